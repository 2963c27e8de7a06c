"""The normalised record: the same fields for every job, node and queue, whatever
the scheduler.  Writers encode records into Redis hashes with :func:`to_hash`;
readers decode them with :func:`from_hash`.  Hash values are plain strings so
that ``redis-cli HGETALL`` shows readable data: integers as decimal, lists and
dicts as JSON, a missing value as the empty string.  One exception: a finished
job's native record, which nothing diffs again and few read, may be kept packed
(:data:`PACKED_NATIVE`).
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from .errors import ConfigError

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


# A finished job's native record, packed: zlib, then base64 (a hash value stays
# text, which every reader, ``decode_responses`` ones too, can take), in a field
# of its own beside an empty ``native``.  Most of a finished job's hash is its
# native record (docs/performance.md, "Redis memory of a 100,000-job site"), kept
# for ``jobtap show --native`` and ``export --native`` alone; packed it takes
# 0.65 of the bytes for PBS, 0.36 for Slurm.  A reader older than this field sees
# no native record (``native`` empty) rather than bytes it cannot parse.
PACKED_NATIVE = "native_z"


def pack_native(text: str) -> str:
    """The :data:`PACKED_NATIVE` form of a native record's JSON text."""
    return base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def unpack_native(raw: str | bytes) -> Any:
    """The native record a :data:`PACKED_NATIVE` value holds; a ``ValueError``
    saying so if it is not one (a hand-edited or truncated hash)."""
    try:
        return orjson.loads(zlib.decompress(base64.b64decode(raw, validate=True)))
    except (binascii.Error, zlib.error, orjson.JSONDecodeError) as exc:
        raise ValueError(f"{PACKED_NATIVE} is not a packed native record: {exc}") from None


def decode_value(name: str, raw: str | bytes) -> Any:
    if isinstance(raw, bytes):
        raw = raw.decode()
    if raw == "":
        return None
    if name in JSON_FIELDS:
        return orjson.loads(raw)
    if name in INT_FIELDS:
        try:
            return int(raw)
        except ValueError:
            return raw
    return raw


def from_hash(raw: Mapping[str | bytes, str | bytes]) -> dict[str, Any]:
    """Decode an HGETALL reply into a record (the inverse of :func:`to_hash`,
    a packed native record unpacked into ``native``)."""
    out = {}
    for name, value in raw.items():
        key = name.decode() if isinstance(name, bytes) else name
        out[key] = decode_value(key, value)
    if PACKED_NATIVE in out:
        out["native"] = native_of(out.get("native"), out.pop(PACKED_NATIVE))
    return out


def native_of(plain: Any, packed: str | bytes | None) -> Any:
    """A job's native record from its hash's two fields: ``native`` (``plain``,
    as read or decoded) unless it is empty, else :data:`PACKED_NATIVE`
    (``packed``) unpacked; ``None`` when neither holds one."""
    if isinstance(plain, (str, bytes)):
        plain = decode_value("native", plain)
    if plain is not None:
        return plain
    return unpack_native(packed) if packed else None


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
