"""The service processes (``jobtap collector``, ``jobtap worker``) that tests and
benchmarks start, and stopping them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, 20 s to exit on its own, then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


JOBTAP = Path(sys.executable).with_name("jobtap")


@contextmanager
def jobtap_services(
    url: str, site: str, collector_args: Sequence[str], log_dir: Path, env: dict | None = None
) -> Iterator[None]:
    """``jobtap collector`` (with ``collector_args``) and ``jobtap worker`` on
    ``url``/``site`` as processes, for the duration of the block."""
    common = ["--redis", url, "--site", site, "--log-level", "INFO"]
    procs = []
    try:
        for name, argv in (
            ("collector", [str(JOBTAP), "collector", *common, *collector_args]),
            ("worker", [str(JOBTAP), "worker", *common]),
        ):
            log = open(log_dir / f"{name}.log", "ab")
            procs.append(
                subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
            )
            log.close()
        yield
    finally:
        for proc in procs:
            stop_process(proc)
