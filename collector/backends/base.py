"""What every backend provides, and the errors it raises."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

Native = dict[str, Any]
Record = dict[str, Any]


class StatError(Exception):
    """A stat of the server failed: command missing, non-zero exit, timeout,
    output that is not what the scheduler prints.  A failed stat changes nothing."""


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
