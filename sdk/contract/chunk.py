"""The chunk: what the collector ships to the workers, one rq job each.

This module is the whole contract between ``jobtap.collector`` (which builds
chunks, see ``collector/ship.py``) and ``jobtap.workers`` (which applies them,
see ``workers/apply.py``).  It imports neither side, nor rq.

A chunk holds the site, the collector's cycle number, the time of observation
and a list of items of one kind (job, node or queue).  Items are:

- ``upsert``: the object's normalised record (``{"op", "id", "fp", "state",
  "record"}``; ``live: False`` for a job found in history rather than in the
  live list, whose fingerprint must not be remembered);
- ``vanished``: a job left the live list and history has nothing on it: the
  worker finalises it with ``reason: "vanished"``;
- ``remove``: a node or queue is gone.

Chunks go to one of two rq queues per site (``keys.rq_queue(priority)``):
:data:`STATE` for new objects, state transitions and finals, :data:`UPDATE` for
attribute-only changes, so that a flood of usage updates never delays "your
job started".  The cycle number lets the workers apply chunks in any order and
makes a retried chunk a no-op.

Contract version 2 adds ``lease``: the generation of the collector's lease
(``collector/lease.py``) when the chunk was shipped.  The apply step drops a
chunk whose generation is below the site's (``workers/fence.lua``): it comes
from a collector that was deposed meanwhile.  A version-1 chunk (no ``lease``)
counts as generation 0, accepted only while the site has no lease generation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final, Literal, NotRequired, TypedDict

import orjson

# Queue priorities, most urgent first: workers serve STATE before UPDATE.
STATE = "state"
UPDATE = "update"
PRIORITIES = (STATE, UPDATE)

# The rq job that applies a chunk (rq names its function by dotted path).
APPLY_FUNC = "jobtap.workers.apply.apply_chunk"

# The chunk's contract version: 2 carries the lease generation.
CONTRACT = 2

UPSERT: Final = "upsert"
VANISHED: Final = "vanished"
REMOVE: Final = "remove"
Op = Literal["upsert", "vanished", "remove"]


class Item(TypedDict):
    op: Op
    id: str
    fp: NotRequired[str]
    state: NotRequired[str | None]
    record: NotRequired[dict[str, Any]]
    live: NotRequired[bool]


def upsert(oid: str, fp: str, record: dict[str, Any], *, live: bool = True) -> Item:
    """An object's new normalised record (``live=False``: found in history)."""
    item: Item = {"op": UPSERT, "id": oid, "fp": fp, "state": record.get("state"), "record": record}
    if not live:
        item["live"] = False
    return item


def vanished(oid: str) -> Item:
    """A job left the live list and history has nothing on it."""
    return {"op": VANISHED, "id": oid}


def remove(oid: str) -> Item:
    """A node or queue is gone."""
    return {"op": REMOVE, "id": oid}


@dataclass(frozen=True, slots=True)
class Chunk:
    site: str
    cycle: int
    observed_at: str
    kind: str
    items: list[Item]
    lease: int = 0  # the collector's lease generation (0: none, a version-1 chunk)

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "site": self.site,
                "cycle": self.cycle,
                "observed_at": self.observed_at,
                "kind": self.kind,
                "items": self.items,
                "v": CONTRACT,
                "lease": self.lease,
            }
        )

    @classmethod
    def decode(cls, payload: bytes | str) -> Chunk:
        """The chunk in ``payload``; a ``ValueError`` names what is wrong with it."""
        try:
            data = orjson.loads(payload)
            chunk = cls(
                site=data["site"],
                cycle=int(data["cycle"]),
                observed_at=data["observed_at"],
                kind=data["kind"],
                items=data["items"],
                lease=int(data.get("lease") or 0),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a jobtap chunk: {type(exc).__name__}: {exc}") from None
        if not isinstance(chunk.items, list):
            raise ValueError("not a jobtap chunk: items is not a list")
        return chunk

    def part(self, items: list[Item]) -> Chunk:
        """The same chunk with only ``items`` (a batch of it)."""
        return replace(self, items=items)
