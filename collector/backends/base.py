"""What every backend provides, and the errors it raises."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Native = dict[str, Any]
Record = dict[str, Any]


class StatError(Exception):
    """A stat of the server failed: command missing, non-zero exit, timeout,
    output that is not what the scheduler prints.  A failed stat changes nothing."""


class CommandNotFound(StatError):
    """The command does not exist here (a failed stat like any other, which
    an optional step may take as "this ability is missing")."""


class ProbeUnavailable(Exception):
    """A backend's probe cannot run here at all (its command is missing): the
    collector stops probing and stats every job every cycle."""


class BadRecord(ValueError):
    """One record of an otherwise good stat cannot be used (missing id, odd
    types, control characters, huge values).  It is reported and skipped."""


class Backend(Protocol):
    """A workload manager seen through its commands.

    ``stat_*`` return the scheduler's own records keyed by object id, exactly as
    the scheduler printed them (``native``); ``normalise_*`` turn one of them into
    the normalised record of ``jobtap.schema``.  Running and parsing are separate so
    that fixtures of real output test the parsers.
    """

    scheduler: str

    def stat_jobs(self) -> dict[str, Native]: ...

    def stat_nodes(self) -> dict[str, Native]: ...

    def stat_queues(self) -> dict[str, Native]: ...

    def history(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """The records of jobs that left the live list, for those the scheduler
        still remembers; ids it has forgotten are simply absent."""
        ...

    def stat_some(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """The current records of just these jobs, live or finished, for follow
        mode's targeted refresh; ids the scheduler does not know are absent."""
        ...

    def poked_reads(self) -> PokedReads:
        """How follow mode gets the records of poked jobs (:class:`PokedReads`)."""
        ...

    def normalise_job(self, job_id: str, native: Native) -> Record: ...

    def normalise_node(self, name: str, native: Native) -> Record: ...

    def normalise_queue(self, name: str, native: Native) -> Record: ...


# Optional abilities: a backend has them or not, and the collector asks once, at
# start (``isinstance(backend, EventFeed)``), never by trial and error.
class FeedBatch(Protocol):
    """Job ids an event feed reports as changed, and the newest event time
    they cover (to restart the feed from there)."""

    last_timestamp: float | None

    def __iter__(self) -> Iterator[str]: ...

    def __len__(self) -> int: ...


@runtime_checkable
class EventFeed(Protocol):
    """A scheduler that pushes its changes (Flux's events journal): follow mode
    runs ``follow_command()`` and turns what ``follow_parse()`` yields into pokes."""

    def follow_command(self, *, since: float | None = None) -> list[str]:
        """The feed's command; ``since``: replay the events after this time first."""
        ...

    def follow_parse(self, lines: Iterable[bytes]) -> Iterator[FeedBatch]: ...


@runtime_checkable
class CanonicalIds(Protocol):
    """A scheduler whose job ids have several spellings (Flux: ``f58``, decimal):
    pokes go through ``canonical_id`` before a refresh (None: not a job id)."""

    def canonical_id(self, job_id: str) -> str | None: ...


@dataclass
class Probe:
    """What a backend's cheap probe saw: the first tier of the observation plan
    (``collector/plan.py``).  A probe never decides anything by itself: it only
    names the jobs worth a full record.

    ``named``: job id -> signature.  A *listing* probe (``complete``) names every
    job the scheduler lists now, each with a short signature of the fields that
    reveal a change (Slurm: one ``squeue`` text line); the collector stats the
    ids whose signature moved, the new ones and the active ones that are no
    longer listed.  A *since* probe (not ``complete``) names the jobs that
    changed since the ``since`` it was given (PBS: ``qselect -x -t m.gt.T``),
    signatures empty; the collector stats all of them.
    ``records``: full records the probe already carries (Flux's ``flux jobs``
    prints whole records), which need no second stat.
    ``until``: what to pass as ``since`` to the next probe once this one's
    changes are shipped (the backend subtracts its own overlap from it).
    """

    named: dict[str, str] = field(default_factory=dict)
    complete: bool = False
    records: dict[str, Native] = field(default_factory=dict)
    until: float | None = None


@runtime_checkable
class ChangeProbe(Protocol):
    """A scheduler with a cheap way to say which jobs changed.

    ``probe(since)`` returns a :class:`Probe`.  ``since`` is the ``until`` of the
    last probe whose changes were shipped, or None (at start and at every full
    reconciliation): then a since-probe names nothing and only returns ``until``,
    and a listing probe returns its listing.  A probe that fails or prints
    something it should not raises :class:`StatError`, like any stat."""

    def probe(self, since: float | None) -> Probe: ...


@dataclass
class Cost:
    """What a backend's commands have cost so far: how many ran and how many
    bytes they printed (a simulated backend counts what the real commands
    would print).  The collector reads it before and after each step."""

    commands: int = 0
    bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, output: bytes | int) -> None:
        """One command ran and printed ``output`` (or that many bytes).  Safe
        from several threads (Flux runs its commands side by side)."""
        with self._lock:
            self.commands += 1
            self.bytes += output if isinstance(output, int) else len(output)

    def snapshot(self) -> tuple[int, int]:
        return self.commands, self.bytes


@runtime_checkable
class MeasuresCost(Protocol):
    """A backend that counts what its commands cost (:class:`Cost`)."""

    cost: Cost


def _always() -> bool:
    return True


@dataclass(frozen=True)
class PokedReads:
    """How follow mode gets the records of poked jobs: the one thing a backend
    tells it (:meth:`Backend.poked_reads`, asked once), each way given or not.

    ``carried``: a record the poke brought with it (PBS's jobobit hook: the
    job as ``qstat -x -f -F json`` will print it; Slurm's completion records),
    turned into the native record to ship without asking the scheduler, or
    None where it is not complete or certain enough: the job is then read as
    for any poke.
    ``carried_soon``: seconds a record-less poke of a job that ended may wait
    for the record another poke will carry (Slurm: the epilog pokes before
    jobcomp's script runs); 0: read it at once.
    ``settle``: seconds any other record-less poke waits before its job is
    read (Slurm: the prolog pokes as slurmctld launches the job, when a read
    waits behind the launch); 0: read it at once.
    ``at_hand``: the ids among some whose current record
    :meth:`Backend.stat_some` builds without running a command (Flux: from
    the journal events the feed read); those are refreshed first, at no cost.
    Every other poked job is read, one by one (``stat_some``) or with one
    listing (``stat_jobs``), as the read budget says (follow/budget.py).
    ``costs``: the scheduler's own figures of what those reads cost it
    (Slurm: ``sdiag``), seconds per read since the last call, as
    ``{"listing": ..., "single": ...}`` for the kinds it saw; without them
    the commands' wall time is used.  A backend that gives them reads poked
    jobs beside a running cycle.  ``singly``: whether ``stat_some`` reads
    each job on its own at the moment (Slurm: while slurmrestd answers), else
    it lists.  ``listing_of``: the records of some jobs from one listing that
    prints those alone (Slurm from 24.05: ``squeue --json --jobs``), where
    the scheduler's cost is a listing's but the command's output and its
    parsing are theirs; without it, a listing for poked jobs is ``stat_jobs``."""

    carried: Callable[[str, bytes], Native | None] | None = None
    carried_soon: float = 0.0
    settle: float = 0.0
    at_hand: Callable[[Iterable[str]], list[str]] | None = None
    costs: Callable[[], dict[str, float]] | None = None
    singly: Callable[[], bool] = _always
    listing_of: Callable[[list[str]], dict[str, Native]] | None = None


_CONTROL = re.compile(r"[\x00-\x20\x7f]")
MAX_ID_LENGTH = 256


def check_object_id(value: Any, what: str = "job id") -> str:
    """Return ``value`` if it can serve as an object id in keys and event ids."""
    if not isinstance(value, str) or not value:
        raise BadRecord(f"{what} missing or not a string: {value!r:.80}")
    if len(value) > MAX_ID_LENGTH:
        raise BadRecord(f"{what} longer than {MAX_ID_LENGTH} characters: {value[:40]!r}...")
    if _CONTROL.search(value):
        raise BadRecord(f"{what} contains white space or control characters: {value!r:.80}")
    return value
