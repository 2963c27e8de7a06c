"""Fault injection: the kinds of misbehaving stats and the queue of pending ones.

A fault changes what the next stat(s) of a
:class:`~jobtap.sim.backend.SimBackend` return, never the simulation or its
ground truth: ``fail`` (the job stat raises StatError), ``empty`` (it
returns no job), ``short`` (it returns ~10% of the jobs), ``history_fail``
(the history look-up raises), ``probe_fail`` (the probe, ``qselect``, exits
non-zero), ``probe_garbage`` (it prints something that is not a list of job
ids), ``probe_blind`` (it prints nothing although jobs changed: a change the
probe cannot see).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["FAULT_KINDS", "JOB_FAULTS", "PROBE_FAULTS", "FaultQueue"]

FAULT_KINDS = ("fail", "empty", "short", "history_fail", "probe_fail", "probe_garbage",
               "probe_blind")  # fmt: skip
JOB_FAULTS = ("fail", "empty", "short")  # the ones the job stat consumes
PROBE_FAULTS = ("probe_fail", "probe_garbage", "probe_blind")  # the probe's


class FaultQueue:
    """Pending faults, oldest first, each with the number of stats it spoils."""

    def __init__(self) -> None:
        self._faults: list[list[Any]] = []  # [kind, stats left]

    def add(self, kind: str, count: int = 1) -> None:
        """Spoil the next ``count`` stats that consume faults of this kind."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r} (choose from {', '.join(FAULT_KINDS)})")
        if count < 1:
            raise ValueError("count must be at least 1")
        self._faults.append([kind, count])

    @property
    def pending(self) -> list[tuple[str, int]]:
        return [(kind, count) for kind, count in self._faults]

    def take(self, kinds: Iterable[str]) -> str | None:
        """Consume one pending fault among ``kinds`` (oldest first)."""
        wanted = set(kinds)
        for i, entry in enumerate(self._faults):
            if entry[0] in wanted:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._faults[i]
                return entry[0]
        return None
