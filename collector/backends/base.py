"""What every backend provides, and the errors it raises."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Protocol

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
