"""The ``tests`` folder of an installed distribution's sdist, for running a tool's
own test files (PSI/J's, snakemake-executor-plugin-slurm's) unmodified: wheels do
not ship them.  Downloaded once per version with ``pip download`` and cached in the
virtualenv, under a file lock (xdist workers may ask at once)."""

from __future__ import annotations

import fcntl
import importlib.metadata
import subprocess
import sys
import tarfile
from pathlib import Path


def sdist_tests(dist: str, marker: str, cache: Path | None = None) -> Path:
    """The ``tests`` folder of the installed ``dist``'s sdist, where ``marker``
    (a file in it) shows that it was unpacked whole."""
    version = importlib.metadata.version(dist)
    cache = cache or Path(sys.prefix) / "sdists"
    with open(_lock(cache), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for folder in cache.glob(f"*-{version}"):
            if (folder / "tests" / marker).exists() and _same_dist(folder.name, dist, version):
                return folder / "tests"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
             "--no-binary", ":all:", f"{dist}=={version}", "-d", str(cache)],
            check=True, stdin=subprocess.DEVNULL, timeout=300,
        )  # fmt: skip
        archive = next(
            a for a in cache.glob(f"*-{version}.tar.gz") if _same_dist(a.name, dist, version)
        )
        top = archive.name.removesuffix(".tar.gz")
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"{top}/tests/")]
            tar.extractall(cache, members=members, filter="data")
    tests = cache / top / "tests"
    if not (tests / marker).exists():
        raise FileNotFoundError(f"{archive.name} has no tests/{marker}")
    return tests


def _lock(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    return cache / ".lock"


def _same_dist(name: str, dist: str, version: str) -> bool:
    """Whether an sdist's file or folder name is ``dist``'s (sdists name it with
    ``-`` or ``_``, in any case)."""
    norm = name.removesuffix(".tar.gz").removesuffix(f"-{version}").lower().replace("_", "-")
    return norm == dist.lower().replace("_", "-")
