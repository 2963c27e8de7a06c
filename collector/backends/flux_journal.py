"""Flux jobs' records from the events journal, without asking ``flux jobs`` again.

Follow mode hears of a change through the job manager's events journal, and the
journal entry itself says what changed (``finish`` carries the wait status,
``exception`` its type and note, ``clean`` the end).  Asking ``flux jobs --json
ID`` afterwards costs about 0.21 s per call on flux-core 0.88, most of the
delay between a job's end and the user's callback (issue 11: p50 302-323 ms,
p99 up to 1,344 ms with it).  So the Flux backend keeps the last record it saw
of each active job and, when only events it understands followed, builds the
new record itself, exactly as ``flux jobs`` would print it: same fields, same
values, same key order (the collector fingerprints the record as printed, and
a full stat must find nothing left to ship).

What the journal cannot give, the listing still does: a new job (its record is
built from the jobspec), an allocation (nodes, ranks, expiration come from R),
a non-fatal exception or a memo other than a URI (what ``flux jobs`` shows of
those was never captured), and any job not seen since its last listing.  Those
jobs go to ``flux jobs --json ID...`` as before.

Events older than the listing a record came from are not applied to it
(``urgency``, ``priority`` and dependencies can go back and forth): such a job
is listed again instead.  Event times are the broker's clock, the listing's is
the collector's; with the two more than a moment apart the listing is used
more often, never a stale event.

The rules below copy what flux-core 0.88's job-list printed for the captured
jobs (``tests/fixtures/flux``: every job's eventlog and final record); the
tests rebuild each captured job's final record from its earlier records and its
journal events, byte for byte.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from .base import Native

# flux jobs --json prints a job's fields in this order (job-list adds them in a
# fixed order; every record of the fixtures agrees with it).  Fields it does not
# name keep their place after the field that preceded them.
KEY_ORDER = (
    "t_depend", "t_priority", "t_sched", "t_run", "t_cleanup", "t_inactive", "duration",
    "expiration", "name", "cwd", "queue", "ntasks", "ncores", "nnodes", "priority", "ranks",
    "nodelist", "success", "result", "waitstatus", "id", "t_submit", "t_remaining", "state",
    "username", "userid", "urgency", "runtime", "status", "returncode", "dependencies",
    "jobid", "annotations", "exception", "uri",
)  # fmt: skip
_RANK = {key: i for i, key in enumerate(KEY_ORDER)}

# Events that change nothing flux jobs prints.
_SILENT = frozenset(
    {"start", "release", "free", "prolog-start", "prolog-finish", "epilog-start",
     "epilog-finish"}
)  # fmt: skip
_APPLIED = frozenset({"depend", "priority", "urgency", "dependency-add", "dependency-remove",
                      "finish", "clean"})  # fmt: skip
_PENDING = ("DEPEND", "PRIORITY", "SCHED")
_DONE = ("CLEANUP", "INACTIVE")


class CannotApply(Exception):
    """The journal does not carry what ``flux jobs`` would show after this event."""


def ordered(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's keys in the order flux jobs prints them."""
    place: dict[str, float] = {}
    last = -1.0
    for key in record:
        last = float(_RANK[key]) if key in _RANK else last + 1e-6
        place[key] = last
    return {key: record[key] for key in sorted(record, key=place.__getitem__)}


def _cleanup(job: dict[str, Any], timestamp: float) -> None:
    """The job stops running (or is cancelled): CLEANUP from the first such event."""
    if job.get("state") in _DONE:
        return
    job["state"] = job["status"] = "CLEANUP"
    job["t_cleanup"] = timestamp
    if "t_run" in job:  # stable from here on, so flux jobs prints it
        job["runtime"] = timestamp - job["t_run"]


def _result(job: dict[str, Any]) -> str:
    exception = job.get("exception") or {}
    if exception.get("occurred"):
        return {"cancel": "CANCELED", "timeout": "TIMEOUT"}.get(exception.get("type"), "FAILED")
    return "COMPLETED" if job.get("waitstatus", 0) == 0 else "FAILED"


def _returncode(job: dict[str, Any]) -> int:
    status = job.get("waitstatus")
    if status is None:  # never ran: a synthetic code
        return -128 if (job.get("exception") or {}).get("type") == "cancel" else 1
    return -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF


def apply_event(job: dict[str, Any], name: str, timestamp: float, context: dict) -> None:
    """Change ``job`` (a flux jobs record) as this journal event changes it;
    :class:`CannotApply` if the journal does not carry what changes.  Applying
    an event the record already shows changes nothing."""
    state = job.get("state")
    if name in _SILENT:
        return
    if name == "depend" and state == "DEPEND":
        job["state"] = job["status"] = "PRIORITY"
        job["t_priority"] = timestamp
    elif name == "priority" and state in _PENDING + ("PRIORITY",):
        job["priority"] = context["priority"]
        if state == "PRIORITY":
            job["state"] = job["status"] = "SCHED"
            job["t_sched"] = timestamp
    elif name == "urgency" and state in _PENDING:
        job["urgency"] = context["urgency"]
    elif name in ("dependency-add", "dependency-remove") and state in _PENDING:
        deps = list(job.get("dependencies") or [])
        description = context["description"]
        if name == "dependency-add" and description not in deps:
            deps.append(description)
        elif name == "dependency-remove" and description in deps:
            deps.remove(description)
        job["dependencies"] = deps
    elif name == "exception" and context.get("severity") == 0:
        job["exception"] = {"occurred": True, "severity": 0, "type": context.get("type"),
                            "note": context.get("note", "")}  # fmt: skip
        _cleanup(job, timestamp)
    elif name == "finish":
        job["waitstatus"] = context["status"]
        _cleanup(job, timestamp)
    elif name == "clean":
        job["state"] = "INACTIVE"
        job["t_inactive"] = timestamp
        job["result"] = job["status"] = _result(job)
        job["success"] = job["result"] == "COMPLETED"
        job["returncode"] = _returncode(job)
    elif name == "memo" and set(context) == {"uri"}:
        job["uri"] = context["uri"]
    else:
        raise CannotApply(name)


def apply_events(native: Native, events: Iterable[Mapping[str, Any]]) -> Native:
    """A copy of ``native`` with ``events`` (``event``, ``timestamp``,
    ``context``) applied, keys in flux jobs' order; :class:`CannotApply` if one
    of them needs what the journal does not carry."""
    job = dict(native)
    for event in events:
        try:
            apply_event(job, event["event"], event["timestamp"], event.get("context") or {})
        except (KeyError, TypeError) as exc:
            raise CannotApply(f"{event.get('event')}: {exc}") from exc
    return ordered(job)


class JournalRecords:
    """The last record of each active job, when it was true, and the journal
    events that came after.  The feed thread notes events; the collector's
    thread asks for records (:meth:`take`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: dict[str, tuple[Native, float]] = {}  # id -> (record, as of)
        self.events: dict[str, list[dict[str, Any]]] = {}  # id -> events not applied yet
        self.derived = 0  # records built from the journal
        self.listed = 0  # jobs that had to be listed

    def note_events(self, per_job: Mapping[str, Iterable[dict[str, Any]]]) -> None:
        with self.lock:
            for job_id, events in per_job.items():
                self.events.setdefault(job_id, []).extend(events)

    def note_listing(self, natives: Mapping[str, Native], as_of: float, *, full: bool) -> None:
        """Records that ``flux jobs`` printed, asked for at ``as_of`` (wall
        clock).  A full listing replaces every record, and drops the events it
        must already show."""
        with self.lock:
            if full:
                self.records = {}
                for job_id in list(self.events):
                    newer = [e for e in self.events[job_id] if _time(e) > as_of]
                    if newer:
                        self.events[job_id] = newer
                    else:
                        del self.events[job_id]
            for job_id, native in natives.items():
                if native.get("state") == "INACTIVE":
                    self.records.pop(job_id, None)
                else:
                    self.records[job_id] = (native, as_of)

    def at_hand(self, job_ids: Iterable[str]) -> list[str]:
        """The jobs :meth:`take` would answer without a listing (a quick check:
        a record, and events all newer than it)."""
        with self.lock:
            return [
                job_id
                for job_id in job_ids
                if (known := self.records.get(job_id)) is not None
                and (events := self.events.get(job_id))
                and all(_time(e) > known[1] and _appliable(e) for e in events)
            ]

    def take(self, job_ids: Iterable[str]) -> tuple[dict[str, Native], list[str]]:
        """The records the journal gives for these jobs, and the ids that must be
        listed.  A job is listed when it has no record yet, when an event
        predates its record, or when an event needs what the journal lacks."""
        found: dict[str, Native] = {}
        listing: list[str] = []
        with self.lock:
            for job_id in job_ids:
                events = self.events.pop(job_id, [])
                known = self.records.get(job_id)
                record = None
                if known is not None and events and all(_time(e) > known[1] for e in events):
                    try:
                        record = apply_events(known[0], events)
                    except CannotApply:
                        record = None
                if record is None:
                    listing.append(job_id)
                    continue
                found[job_id] = record
                newest = max(_time(e) for e in events)
                if record.get("state") == "INACTIVE":
                    self.records.pop(job_id, None)
                else:
                    self.records[job_id] = (record, newest)
            self.derived += len(found)
            self.listed += len(listing)
        return found, listing


def _appliable(event: Mapping[str, Any]) -> bool:
    """Whether :func:`apply_event` can take this event at all (whatever the
    record's state)."""
    name = event.get("event")
    context = event.get("context") or {}
    if name == "exception":
        return context.get("severity") == 0
    if name == "memo":
        return set(context) == {"uri"}
    return name in _SILENT or name in _APPLIED


def _time(event: Mapping[str, Any]) -> float:
    timestamp = event.get("timestamp")
    return float(timestamp) if isinstance(timestamp, int | float) else float("-inf")
