"""jobtap as a release ships it, and what an import costs.

:func:`build_dists` makes the sdist and the wheel the way ``python -m build``
does for a release (the wheel built from the sdist), from a copy of the
checkout's files: setuptools' ``build/`` and ``jobtap.egg-info`` never land in
the checkout others work in, and the build sees what a clean clone has.
:class:`Venv` is a fresh virtualenv with that wheel installed as a user installs
it (dependencies from the package index, through pip's cache).
:func:`loaded_after` and :func:`heavy` say what a fresh interpreter holds after
an import: ``import jobtap`` must load no rq, click or service code.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from sim.rig.paths import ROOT

# Folders of package folders that a checkout imports (as sim.rig, sim.standins) and
# the sdist and the wheel do not hold (MANIFEST.in prunes them; not in `packages`).
CHECKOUT_ONLY = ("sim/rig", "sim/standins")
SERVICES = ("jobtap.collector", "jobtap.workers", "jobtap.cli", "jobtap.acl", "jobtap.sim")


def version() -> str:
    """The version pyproject.toml gives (its one source)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def _clean_env() -> dict[str, str]:
    """This environment without what would let another jobtap in."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def loaded_after(code: str, python: str = sys.executable) -> set[str]:
    """The modules a fresh interpreter holds after running ``code`` (isolated:
    neither the working directory nor $PYTHONPATH is on its path)."""
    probe = f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run(
        [python, "-I", "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return set(out.split())


def heavy(modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the SDK must not load."""
    return {
        m
        for m in modules
        if m.split(".")[0] in ("rq", "click")
        or any(m == s or m.startswith(f"{s}.") for s in SERVICES)
    }


# distutils says so of every wheel it builds; pip compiles the files at install
HARMLESS = re.compile(r"warning: (build_py|install_lib): byte-compiling is disabled, skipping\.")


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path
    source: Path  # the copy of the checkout the sdist was made from
    log: str  # what `python -m build` printed

    def warnings(self) -> list[str]:
        return [
            line
            for line in self.log.splitlines()
            if "warn" in line.lower() and not HARMLESS.search(line)
        ]


def source_copy(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked, or new and not ignored),
    copied to ``dest``."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, names):
        src = ROOT / name
        if src.is_file():  # not one deleted since it was committed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def build_dists(out: Path) -> Dists:
    """``python -m build`` (sdist, then the wheel from the sdist) without build
    isolation (the backend, setuptools, is this venv's: no network)."""
    source = source_copy(out / "source")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out / "dist"),
         str(source)],
        capture_output=True, text=True, timeout=300, env=_clean_env(),
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    (sdist,) = (out / "dist").glob("*.tar.gz")
    (wheel,) = (out / "dist").glob("*.whl")
    return Dists(sdist, wheel, source, log)


@dataclass(frozen=True)
class Venv:
    """A virtualenv made empty (no pip, no system site-packages); pip runs from
    this venv against it (``pip --python``)."""

    root: Path
    site: Path  # its site-packages

    @classmethod
    def create(cls, root: Path) -> Venv:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
        python = str(root / "bin" / "python")
        site = subprocess.run(
            [python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        return cls(root, Path(site))

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    def install(self, wheel: Path, extras: tuple[str, ...] = ()) -> None:
        """``pip install WHEEL[EXTRAS]`` with its dependencies, as a user would."""
        target = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "--python", self.python, "install", "--quiet",
             "--disable-pip-version-check", target],
            capture_output=True, text=True, timeout=300, env=_clean_env(),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    def run(self, *args: str) -> str:
        """Run one of the venv's commands (``python``, ``jobtap``) from inside the
        venv (no checkout on the path); its standard output."""
        proc = subprocess.run(
            [str(self.root / "bin" / args[0]), *args[1:]],
            capture_output=True, text=True, timeout=120, cwd=self.root, env=_clean_env(),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout
