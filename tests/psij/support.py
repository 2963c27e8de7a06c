"""Helpers of the PSI/J tests: jobtap's collector and worker as processes, and
executors made the way PSI/J users make them (``JobExecutor.get_instance``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.procs import stop_process

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


def new_executor(name: str, url: str | None, **config):
    """An executor as a PSI/J user gets one, with a JobtapExecutorConfig."""
    import psij

    from jobtap.psij.config import JobtapExecutorConfig

    return psij.JobExecutor.get_instance(name, url=url, config=JobtapExecutorConfig(**config))
