"""The normalised record: the same fields for every job, node and queue, whatever
the scheduler.  Writers encode records into Redis hashes with :func:`to_hash`;
readers decode them with :func:`from_hash`.  Hash values are plain strings so
that ``redis-cli HGETALL`` shows readable data: integers as decimal, lists and
dicts as JSON, a missing value as the empty string, or as no field at all (a
new object's fields without a value are not written).  One exception: a finished
job's native record, which nothing diffs again and few read, is kept packed
(:mod:`jobtap.packing`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from .errors import ConfigError
from .packing import NATIVE_FORMS, PACKED_NATIVE, PRIMED_NATIVE, native_of

log = logging.getLogger("jobtap.sdk")

# Job states ---------------------------------------------------------------------
QUEUED = "queued"
HELD = "held"
WAITING = "waiting"
RUNNING = "running"
SUSPENDED = "suspended"
EXITING = "exiting"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"
UNKNOWN = "unknown"

ACTIVE_STATES = frozenset({QUEUED, HELD, WAITING, RUNNING, SUSPENDED, EXITING, UNKNOWN})
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED})
JOB_STATES = ACTIVE_STATES | TERMINAL

# Node states --------------------------------------------------------------------
NODE_FREE = "free"
NODE_BUSY = "busy"
NODE_DOWN = "down"
NODE_OFFLINE = "offline"
NODE_DRAIN = "drain"
NODE_STATES = frozenset({NODE_FREE, NODE_BUSY, NODE_DOWN, NODE_OFFLINE, NODE_DRAIN, UNKNOWN})
BAD_NODE_STATES = frozenset({NODE_DOWN, NODE_OFFLINE, NODE_DRAIN})

# Object kinds -------------------------------------------------------------------
JOB = "job"
NODE = "node"
QUEUE = "queue"
KINDS = (JOB, NODE, QUEUE)

# Fields -------------------------------------------------------------------------
JOB_FIELDS: tuple[str, ...] = (
    "id",
    "site",
    "scheduler",
    "user",
    "group",
    "account",
    "name",
    "queue",
    "state",
    "native_state",
    "reason",
    "comment",
    "submit_time",
    "start_time",
    "end_time",
    "exit_status",
    "requested",
    "allocated",
    "resources_used",
    "array_parent",
    "array_index",
    "priority",
    "version",
    "updated_at",
    "native",
)
NODE_FIELDS: tuple[str, ...] = (
    "id",
    "site",
    "scheduler",
    "state",
    "native_state",
    "reason",
    "jobs",
    "resources",
    "version",
    "updated_at",
    "native",
)
QUEUE_FIELDS: tuple[str, ...] = (
    "id",
    "site",
    "scheduler",
    "state",
    "native_state",
    "counts",
    "resources",
    "version",
    "updated_at",
    "native",
)
FIELDS = {JOB: JOB_FIELDS, NODE: NODE_FIELDS, QUEUE: QUEUE_FIELDS}

INT_FIELDS = frozenset({"exit_status", "array_index", "priority", "version", "cycle", "final"})
JSON_FIELDS = frozenset(
    {"requested", "allocated", "resources_used", "native", "jobs", "resources", "counts"}
)
# Fields that the store maintains itself: a change in them alone is not a change
# of the record (no version bump, no event).  ``cycle`` is the collector cycle
# that last wrote the object (for ordering); ``final`` is 1 once a job's final
# event went out (nothing follows it); ``epoch`` is the site epoch ``version``
# counts in (see jobtap.events).
BOOKKEEPING = frozenset({"version", "updated_at", "cycle", "final", "epoch"})


def to_hash(record: Mapping[str, Any]) -> dict[str, str]:
    """Encode a record for HSET: every value becomes a string (None: empty,
    lists and dicts: JSON, numbers: decimal)."""
    out = {}
    dumps = orjson.dumps
    for name, value in record.items():
        if value is None:
            out[name] = ""
        elif name in JSON_FIELDS:
            out[name] = dumps(value).decode()
        elif type(value) is str:
            out[name] = value
        else:
            out[name] = str(value)
    return out


def decode_value(name: str, raw: str | bytes) -> Any:
    """A hash value as the record holds it.  A JSON field that holds no JSON (a
    hash edited by hand) reads as empty, with a warning: one such value must not
    stop a subscription's reads, nor the worker's diff, which then writes the
    field again whole."""
    if isinstance(raw, bytes):
        raw = raw.decode()
    if raw == "":
        return None
    if name in JSON_FIELDS:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            log.warning("jobtap: a record's %s is not JSON (%s: %.40r): read as empty",
                        name, exc, raw)  # fmt: skip
            return None
    if name in INT_FIELDS:
        try:
            return int(raw)
        except ValueError:
            return raw
    return raw


def from_hash(raw: Mapping[str | bytes, str | bytes], *, native: bool = True) -> dict[str, Any]:
    """Decode an HGETALL reply into a record (the inverse of :func:`to_hash`;
    a finished job's packed native record unpacked into ``native``:
    :mod:`jobtap.packing`).  ``native=False`` leaves the native record out,
    undecoded: a reader that drops it does not pay for it, nor fail on a hash
    whose packed record was damaged."""
    out = {}
    for name, value in raw.items():
        key = name.decode() if isinstance(name, bytes) else name
        if native or key not in NATIVE_FORMS:
            out[key] = decode_value(key, value)
    if PRIMED_NATIVE in out or PACKED_NATIVE in out:
        out["native"] = native_of(raw)
        out.pop(PRIMED_NATIVE, None)
        out.pop(PACKED_NATIVE, None)
    return out


def is_terminal(state: str | None) -> bool:
    return state in TERMINAL


def job_states(states: str | Iterable[str]) -> frozenset[str]:
    """``states`` (one state or several) as a set, or a :class:`ConfigError` naming
    the valid job states: a mistyped state would match no job, and a wait for it
    would last until its timeout."""
    wanted = frozenset([states] if isinstance(states, str) else states)
    unknown = sorted(wanted - JOB_STATES)
    if unknown or not wanted:
        said = ", ".join(map(repr, unknown)) or "no state"
        known = ", ".join(sorted(JOB_STATES))
        raise ConfigError(f"unknown job state {said}: the job states are {known}")
    return wanted
