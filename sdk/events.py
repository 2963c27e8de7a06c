"""The event: one JSON object per change of a stored record.

``id`` is deterministic (site, object and version), so a replayed batch, a
retried worker or a restarted collector produce the same id and consumers can
drop duplicates.

The workers build every event with :func:`make_event`.  The same event is
published as schemas downstream systems can register: :func:`json_schema`
(JSON Schema 2020-12, ``jobtap/schemas/event.schema.json``) and
:func:`avro_schema` (for Kafka schema registries, ``event.avsc``; Avro has no
type for free-form JSON, so :func:`to_avro` carries ``record`` as the Redis
hash form, strings keyed by field, and each change as JSON text).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Any, TypedDict

import orjson

from .schema import JOB, to_hash

NEW = "new"
STATE = "state"
UPDATE = "update"
FINAL = "final"
REMOVED = "removed"
EVENT_TYPES = (NEW, STATE, UPDATE, FINAL, REMOVED)


class Event(TypedDict):
    id: str
    site: str
    kind: str
    type: str
    object_id: str
    user: str | None
    version: int
    observed_at: str
    changes: dict[str, list[Any]]
    record: dict[str, Any]


def event_id(site: str, kind: str, object_id: str, version: int) -> str:
    """``S:JOBID:VERSION`` for jobs, ``S:KIND:NAME:VERSION`` for nodes and queues."""
    if kind == JOB:
        return f"{site}:{object_id}:{version}"
    return f"{site}:{kind}:{object_id}:{version}"


def object_key(kind: str, object_id: str) -> str:
    """The name an object goes by in bookkeeping: ``job:12.pbs``, ``node:n1``."""
    return f"{kind}:{object_id}"


def dumps(event: Event | dict[str, Any]) -> bytes:
    return orjson.dumps(event)


def loads(raw: bytes | str) -> Event:
    return orjson.loads(raw)


def make_event(
    *,
    site: str,
    kind: str,
    type: str,
    object_id: str,
    user: str | None,
    version: int,
    observed_at: str,
    changes: dict[str, list[Any]],
    record: dict[str, Any],
) -> Event:
    """The event for ``version`` of an object (its id follows from the rest)."""
    return {
        "id": event_id(site, kind, object_id, version),
        "site": site,
        "kind": kind,
        "type": type,
        "object_id": object_id,
        "user": user,
        "version": version,
        "observed_at": observed_at,
        "changes": changes,
        "record": record,
    }


@cache
def json_schema() -> dict[str, Any]:
    """The event's JSON Schema (draft 2020-12)."""
    return orjson.loads(files(__package__).joinpath("schemas/event.schema.json").read_bytes())


@cache
def avro_schema() -> dict[str, Any]:
    """The event's Avro schema (the form :func:`to_avro` gives)."""
    return orjson.loads(files(__package__).joinpath("schemas/event.avsc").read_bytes())


def to_avro(event: Event | dict[str, Any]) -> dict[str, Any]:
    """The event in the form of :func:`avro_schema`: ``record`` as its Redis
    hash (every value a string) and each change ``[old, new]`` as JSON text."""
    return {
        **event,
        "changes": {k: orjson.dumps(v).decode() for k, v in event["changes"].items()},
        "record": to_hash(event["record"]),
    }
