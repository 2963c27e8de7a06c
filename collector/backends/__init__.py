"""Backends: one module per workload manager, each a small class with
``stat_jobs()``, ``stat_nodes()``, ``stat_queues()`` and ``history(job_ids)``
(see :mod:`.base` for the interface and the optional abilities).

Backends are named here by module path and imported only when chosen: a site
running Slurm never imports the PBS parser, and the simulator (``jobtap.sim``,
which builds on this package) is not imported by it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .base import Backend, BadRecord, StatError

__all__ = ["Backend", "BadRecord", "StatError", "make_backend", "BACKENDS"]

_CLASSES = {
    "sim": "jobtap.sim.backend:SimBackend",
    "pbs": "jobtap.collector.backends.pbs:PBSBackend",
    "slurm": "jobtap.collector.backends.slurm:SlurmBackend",
    "flux": "jobtap.collector.backends.flux:FluxBackend",
}
BACKENDS = tuple(_CLASSES)


def make_backend(name: str, **options: Any) -> Backend:
    """Build the backend called ``name`` with its options (see each module)."""
    try:
        module, cls = _CLASSES[name].split(":")
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})") from None
    return getattr(import_module(module), cls)(**options)
