"""Backends: one module per workload manager, each a small class with
``stat_jobs()``, ``stat_nodes()``, ``stat_queues()`` and ``history(job_ids)``
(see :mod:`.base` for the interface and the optional abilities).

Backends plug in as entry points of the group ``jobtap.backends`` (pyproject.toml:
``NAME = "module:Class"``), and a backend's module is imported only when it is
chosen: a site running Slurm never imports the PBS parser.  The simulator,
which builds on this package, registers itself there like the schedulers, so
the collector names none of them (tests/test_layout.py checks it).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .base import Backend, BadRecord, StatError

__all__ = ["Backend", "BadRecord", "StatError", "make_backend", "BACKENDS"]

GROUP = "jobtap.backends"
# in the order the installed metadata lists them (pyproject.toml's)
_ENTRY_POINTS: dict[str, EntryPoint] = {ep.name: ep for ep in entry_points(group=GROUP)}
BACKENDS = tuple(_ENTRY_POINTS)


def make_backend(name: str, **options: Any) -> Backend:
    """Build the backend called ``name`` with its options (see each module)."""
    try:
        entry_point = _ENTRY_POINTS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (choose from {', '.join(BACKENDS)})") from None
    return entry_point.load()(**options)
