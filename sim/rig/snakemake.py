"""A small Snakemake workflow on the real Slurm, run as a user runs it (a
``snakemake`` process), for tests/live/test_snakemake.py and bench/."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# `parts` independent jobs, then one that gathers them: two levels of jobs
SNAKEFILE = """
PARTS = list(range({parts}))

rule all:
    input: "all.txt"

rule part:
    output: "part{{i}}.txt"
    shell: "sleep {seconds}; echo {{wildcards.i}} > {{output}}"

rule gather:
    input: expand("part{{i}}.txt", i=PARTS)
    output: "all.txt"
    shell: "sleep {seconds}; cat {{input}} > {{output}}"
"""


@dataclass
class Run:
    returncode: int
    wall: float
    output: str
    workdir: Path


def write_workflow(workdir: Path, parts: int = 3, seconds: int = 2) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    snakefile = workdir / "Snakefile"
    snakefile.write_text(SNAKEFILE.format(parts=parts, seconds=seconds))
    return snakefile


def run_workflow(
    workdir: Path, executor: str, env: dict[str, str], *extra: str, timeout: float = 600
) -> Run:
    """``snakemake --executor EXECUTOR`` on the workflow in ``workdir`` (the
    partition of deploy/slurm/start.sh as the default resource)."""
    argv = [
        sys.executable, "-m", "snakemake", "--executor", executor, "--jobs", "8",
        "--default-resources", "slurm_partition=debug", "runtime=5", "mem_mb=100",
        "--directory", str(workdir), "--snakefile", str(workdir / "Snakefile"),
        "--latency-wait", "5", *extra,
    ]  # fmt: skip
    t0 = time.monotonic()
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    return Run(proc.returncode, time.monotonic() - t0, proc.stdout + proc.stderr, workdir)
