"""Backends: one module per workload manager, each a small class with
``stat_jobs()``, ``stat_nodes()``, ``stat_queues()`` and ``history(job_ids)``."""

from __future__ import annotations

from typing import Any

from .base import Backend, BadRecord, StatError

__all__ = ["Backend", "BadRecord", "StatError", "make_backend", "BACKENDS"]

BACKENDS = ("sim", "pbs", "slurm", "flux")


def make_backend(name: str, **options: Any) -> Backend:
    """Build the backend called ``name`` with its options (see each module)."""
    if name == "sim":
        from .sim import SimBackend

        return SimBackend(**options)
    if name == "pbs":
        from .pbs import PBSBackend

        return PBSBackend(**options)
    if name == "slurm":
        from .slurm import SlurmBackend

        return SlurmBackend(**options)
    if name == "flux":
        from .flux import FluxBackend

        return FluxBackend(**options)
    raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})")
