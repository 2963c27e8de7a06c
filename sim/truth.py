"""Ground truth: what really happened to each simulated job.

:class:`JobTruth` is the simulation's record of one job, kept for every job
ever submitted; :func:`pbs_state` reads the normalised state of a PBS record,
the way the truth (and the tests comparing the collector's view with it)
names states.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobtap.schema import (
    CANCELLED,
    COMPLETED,
    EXITING,
    FAILED,
    HELD,
    QUEUED,
    RUNNING,
    SUSPENDED,
    UNKNOWN,
    WAITING,
)
from jobtap.sim.pbs import SUB_FAILED, SUB_TERMINATED

__all__ = ["JobTruth", "pbs_state"]

_STATE_OF_LETTER = {
    "Q": QUEUED,
    "H": HELD,
    "W": WAITING,
    "T": QUEUED,
    "R": RUNNING,
    "B": RUNNING,
    "E": EXITING,
    "S": SUSPENDED,
    "U": SUSPENDED,
}


def pbs_state(native: dict[str, Any]) -> str:
    """The normalised state of a PBS job record.

    Q -> queued, H -> held, W -> waiting, R and an array parent's B -> running,
    E -> exiting.  Finished (F, X): substate 91 -> cancelled, 93 -> failed,
    otherwise Exit_status 0 -> completed, another exit -> failed, no exit ->
    cancelled.
    """
    letter = native.get("job_state")
    state = _STATE_OF_LETTER.get(letter)  # type: ignore[arg-type]
    if state is not None:
        return state
    if letter not in ("F", "X"):
        return UNKNOWN
    substate = native.get("substate")
    if substate == SUB_TERMINATED:
        return CANCELLED
    if substate == SUB_FAILED:
        return FAILED
    exit_status = native.get("Exit_status")
    if exit_status is None:
        return CANCELLED
    return COMPLETED if exit_status == 0 else FAILED


@dataclass(slots=True)
class JobTruth:
    """What really happened to one job.

    ``transitions`` lists ``(virtual_time, normalised_state)`` each time the
    state changed, starting with the state at submission.  ``purged`` is true
    once the server has forgotten the finished job (``history()`` does not
    return it).  ``tags`` name the notable things that happened to it
    (``held``, ``released``, ``qdel_queued``, ``qdel_running``, ``walltime``,
    ``exit_nonzero``, ``node_kill``, ``array``, ``subjob``, ``waiting``,
    ``never``)."""

    id: str
    user: str
    transitions: list[tuple[float, str]]
    final_state: str | None = None
    exit_status: int | None = None
    purged: bool = False
    array_parent: str | None = None
    tags: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """The current normalised state."""
        return self.transitions[-1][1]
