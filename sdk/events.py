"""The event: one JSON object per change of a stored record.

``id`` is deterministic (site, object and version), so a replayed batch, a
retried worker or a restarted collector produce the same id and consumers can
drop duplicates.
"""

from __future__ import annotations

from typing import Any, TypedDict

import orjson

from .schema import JOB

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
