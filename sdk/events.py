"""The event: one JSON object per change of a stored record.

``id`` is deterministic (site, epoch, object and version), so a replayed batch,
a retried worker or a restarted collector produce the same id and consumers can
drop duplicates.  Its format:

    SITE:EPOCH:JOBID:VERSION         a job      hpc1:mg3k1x2a7f3c:12.pbs:3
    SITE:EPOCH:KIND:NAME:VERSION     a node or queue   hpc1:mg3k1x2a7f3c:node:n1:2

``EPOCH`` is the site's epoch (:data:`EPOCH_LENGTH` characters of ``0-9a-z``): a
new one begins whenever Redis' data for the site is not the continuation of what
was written before (Redis came back empty, restarted, failed over, or was
restored from an older snapshot; see ``jobtap.contract.epoch``).  ``VERSION`` counts
the object's changes within the epoch: 1, 2, 3..., one more exactly when the
stored record changes; an object's first change in a new epoch is version 1
again.  So an id is never given to two different events, and the versions of an
object within an epoch have no gap.  Ids written before epochs existed
(``SITE:JOBID:VERSION``, ``SITE:KIND:NAME:VERSION``) are read with the epoch
``""`` (:func:`split_event_id`).

The workers build every event with :func:`make_event`.  The same event is
published as schemas downstream systems can register: :func:`json_schema`
(JSON Schema 2020-12, ``jobtap/schemas/event.schema.json``) and
:func:`avro_schema` (for Kafka schema registries, ``event.avsc``; Avro has no
type for free-form JSON, so :func:`to_avro` carries ``record`` as the Redis
hash form, strings keyed by field, and each change as JSON text).

Two formats, told apart by ``event_version`` (:func:`format_of`):

- **2** (``"event_version": 2``, what workers write by default): each byte once.
  ``record`` is the normalised record as of this version, less what the event
  holds elsewhere or nobody asked for: not ``native``, the scheduler's own
  record, which is the larger half of a job's record and stays in the object's
  hash (``Client.native()``, ``jobtap show --native``, ``jobtap export
  --native``); not the fields the event's envelope holds (``id`` is
  ``object_id``, ``site``, ``user``, ``version``, ``updated_at`` is
  ``observed_at``: :data:`ENVELOPE`); and not the fields without a value
  (``null``).  ``was`` holds, for each normalised attribute that changed, the
  value it had before: its new value is ``record``'s (absent there: ``null``).
  A ``new`` event's ``was`` is empty: every field of its record is new.  The
  native keys that changed are named in ``native_changed`` (their values are
  the native record's: in the hash), except in a ``new`` event.
- **1** (no ``event_version`` key; ``jobtap worker --event-version 1``): the
  whole record, ``native`` included, and ``changes``: ``{attr: [old, new]}``
  for every attribute that changed, the native keys as ``native.KEY``.  Readers
  take an event without ``event_version`` as format 1.

:func:`record_of` and :func:`changes_of` give the whole normalised record and
``{attr: [old, new]}`` of an event of either format; the SDK reads both and
gives the same :class:`~jobtap.records.Change` for either (its ``record`` never
carries ``native``: see :mod:`jobtap.records`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from typing import Any, NotRequired, TypedDict

import orjson

from .schema import BOOKKEEPING, FIELDS, JOB, to_hash

# Change types.  The workers write the first five into events; a subscription
# also delivers the last two, which it makes itself from the cache.
NEW = "new"  # the object appeared (a removed node or queue that comes back starts again here)
STATE = "state"  # a job's state changed
UPDATE = "update"  # other attributes changed
FINAL = "final"  # a job's last event: terminal state, or gone from the server
REMOVED = "removed"  # the object left the cache (a node or queue deleted, a job purged)
INITIAL = "initial"  # the current record, delivered first by Client.subscribe(initial=True)
RESYNC = "resync"  # the record re-read after missed changes no stream holds any more
EVENT_TYPES = (NEW, STATE, UPDATE, FINAL, REMOVED)
CHANGE_TYPES = (*EVENT_TYPES, INITIAL, RESYNC)


EVENT_VERSION = 2
"""The event format workers write unless told otherwise (see the module docstring)."""
EVENT_VERSIONS = (1, 2)
"""The formats workers can write and readers read."""

EPOCH_LENGTH = 12
_EPOCH_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyz")


class Event(TypedDict):
    id: str
    site: str
    epoch: str
    kind: str
    type: str
    object_id: str
    user: str | None
    version: int
    observed_at: str
    changes: NotRequired[dict[str, list[Any]]]  # format 1: attr -> [old, new]
    record: dict[str, Any]
    was: NotRequired[dict[str, Any]]  # format 2: attr -> its value before
    event_version: NotRequired[int]  # absent: format 1
    native_changed: NotRequired[list[str]]  # format 2: the native keys that changed


def format_of(event: Mapping[str, Any]) -> int:
    """The format of ``event``: its ``event_version``, 1 when it has none."""
    version: int = event.get("event_version", 1)
    return version


ENVELOPE: dict[str, str] = {
    "id": "object_id",
    "site": "site",
    "user": "user",
    "version": "version",
    "updated_at": "observed_at",
}
"""The record's fields a format-2 event holds once, in its envelope: record
field -> the event's key (``user`` a job's only)."""

_NOT_IN_RECORD = frozenset({*ENVELOPE, "native"})


def lean_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as a format-2 event carries it: without ``native``, the
    envelope's fields (:data:`ENVELOPE`) and the fields without a value."""
    return {k: v for k, v in record.items() if v is not None and k not in _NOT_IN_RECORD}


def record_of(event: Mapping[str, Any]) -> dict[str, Any]:
    """The normalised record of ``event``, of either format, whole: every field
    of its kind (``None`` where it has no value), the envelope's fields put back
    (a format-1 event's record as it is, ``native`` included)."""
    record: dict[str, Any] = event.get("record") or {}
    if format_of(event) == 1:
        return record
    kind = event.get("kind", JOB)
    out: dict[str, Any] = dict.fromkeys(FIELDS.get(kind, ()))
    out.pop("native", None)
    out.update(record)
    for name, key in ENVELOPE.items():
        if name != "user" or kind == JOB:
            out[name] = event.get(key)
    return out


def changes_of(event: Mapping[str, Any]) -> dict[str, list[Any]]:
    """``{attr: [old, new]}`` of ``event``, of either format: format 1's
    ``changes``; format 2's ``was`` with the new values from its record (a
    ``new`` event: every field with a value, ``[None, value]``, as format 1 has
    them: an empty string is no value there either)."""
    was: dict[str, Any] | None = event.get("was")
    if was is None:
        changes: dict[str, list[Any]] = event.get("changes") or {}
        return changes
    record = record_of(event)
    if event.get("type") == NEW:
        return {
            f: [None, v]
            for f, v in record.items()
            if v is not None and v != "" and f not in BOOKKEEPING
        }
    return {f: [old, record.get(f)] for f, old in was.items()}


def object_prefix(site: str, kind: str, object_id: str) -> str:
    """What names one object in event ids, whatever the epoch: ``S:JOBID`` for
    jobs, ``S:KIND:NAME`` for nodes and queues."""
    if kind == JOB:
        return f"{site}:{object_id}"
    return f"{site}:{kind}:{object_id}"


def event_id(site: str, epoch: str, kind: str, object_id: str, version: int) -> str:
    """``S:EPOCH:JOBID:VERSION`` for jobs, ``S:EPOCH:KIND:NAME:VERSION`` for nodes
    and queues."""
    if kind == JOB:
        return f"{site}:{epoch}:{object_id}:{version}"
    return f"{site}:{epoch}:{kind}:{object_id}:{version}"


def is_epoch(text: str) -> bool:
    """Whether ``text`` has the form of an epoch (see :data:`EPOCH_LENGTH`)."""
    return len(text) == EPOCH_LENGTH and _EPOCH_CHARS.issuperset(text)


def split_event_id(eid: str) -> tuple[str, str, int]:
    """``(object prefix, epoch, version)`` of an event id:
    ``("hpc1:12.pbs", "mg3k1x2a7f3c", 3)`` from ``"hpc1:mg3k1x2a7f3c:12.pbs:3"``.

    An id of the form used before epochs existed gives the epoch ``""``.  Raises
    ``ValueError`` if there is no version."""
    rest, _, version = eid.rpartition(":")
    site, _, tail = rest.partition(":")
    epoch, sep, obj = tail.partition(":")
    if sep and is_epoch(epoch):
        return f"{site}:{obj}", epoch, int(version)
    return rest, "", int(version)


def object_key(kind: str, object_id: str) -> str:
    """The name an object goes by in bookkeeping: ``job:12.pbs``, ``node:n1``."""
    return f"{kind}:{object_id}"


def dumps(event: Event | dict[str, Any]) -> bytes:
    return orjson.dumps(event)


def loads(raw: bytes | str) -> Event:
    event: Event = orjson.loads(raw)
    return event


def make_event(
    *,
    site: str,
    epoch: str,
    kind: str,
    type: str,
    object_id: str,
    user: str | None,
    version: int,
    observed_at: str,
    changes: dict[str, list[Any]],
    record: dict[str, Any],
    event_version: int = EVENT_VERSION,
) -> Event:
    """The event for ``version`` of an object in ``epoch`` (its id follows from
    the rest), in format ``event_version`` (the module docstring): 2, each byte
    once, from ``changes`` (``{attr: [old, new]}``, native keys as
    ``native.KEY``) and the whole ``record``; 1 is the event as it was before
    formats had numbers (the whole record, no ``event_version`` key)."""
    if event_version not in EVENT_VERSIONS:
        raise ValueError(f"event_version must be one of {EVENT_VERSIONS}, not {event_version!r}")
    eid = event_id(site, epoch, kind, object_id, version)
    if event_version == 1:
        return {
            "id": eid, "site": site, "epoch": epoch, "kind": kind, "type": type,
            "object_id": object_id, "user": user, "version": version,
            "observed_at": observed_at, "changes": changes, "record": record,
        }  # fmt: skip
    lean, native_changed = split_native(changes)
    event: Event = {
        "id": eid, "site": site, "epoch": epoch, "kind": kind, "type": type,
        "object_id": object_id, "user": user, "version": version,
        "observed_at": observed_at, "event_version": event_version,
        "was": {} if type == NEW else {name: pair[0] for name, pair in lean.items()},
        "record": lean_record(record),
    }  # fmt: skip
    if native_changed and type != NEW:
        event["native_changed"] = native_changed
    return event


def split_native(changes: dict[str, list[Any]]) -> tuple[dict[str, list[Any]], list[str]]:
    """``changes`` split as format 2 carries them: the normalised attributes'
    ``[old, new]`` (whose old values go into ``was``), and the names of the
    native keys that changed (``native.KEY``; ``*`` for a native record
    replaced whole), whose values stay in the hash."""
    lean: dict[str, list[Any]] = {}
    named: list[str] = []
    for name, pair in changes.items():
        if name == "native" or name.startswith("native."):
            named.append(name.partition(".")[2] or "*")
        else:
            lean[name] = pair
    return lean, sorted(named)


@cache
def json_schema() -> dict[str, Any]:
    """The event's JSON Schema (draft 2020-12)."""
    return _load_schema("event.schema.json")


@cache
def avro_schema() -> dict[str, Any]:
    """The event's Avro schema (the form :func:`to_avro` gives)."""
    return _load_schema("event.avsc")


def _load_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = orjson.loads(files(__package__).joinpath("schemas", name).read_bytes())
    return schema


def to_avro(event: Event | dict[str, Any]) -> dict[str, Any]:
    """The event in the form of :func:`avro_schema`, whatever its format: the
    whole ``record`` (:func:`record_of`) as its Redis hash (every value a
    string; ``native`` there only in format 1), each change ``[old, new]``
    (:func:`changes_of`) as JSON text, and ``event_version`` and
    ``native_changed`` always (1 and ``[]`` for an event without them, as the
    schema's defaults read an older message)."""
    out = {k: v for k, v in event.items() if k != "was"}
    out["changes"] = {k: orjson.dumps(v).decode() for k, v in changes_of(event).items()}
    out["record"] = to_hash(record_of(event))
    out["event_version"] = format_of(event)
    out["native_changed"] = list(event.get("native_changed") or ())
    return out
