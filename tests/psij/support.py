"""Helpers of the PSI/J tests: executors made the way PSI/J users make them
(``JobExecutor.get_instance``).  jobtap's collector and worker as processes are
:func:`sim.rig.procs.jobtap_services`."""

from __future__ import annotations


def new_executor(name: str, url: str | None, **config):
    """An executor as a PSI/J user gets one, with a JobtapExecutorConfig."""
    import psij

    from jobtap.psij.config import JobtapExecutorConfig

    return psij.JobExecutor.get_instance(name, url=url, config=JobtapExecutorConfig(**config))
