"""What the collector remembers between cycles: for every object it has shipped,
the fingerprint of its native record and its normalised state.

The workers persist the same pairs in ``jobtap:{S}:fingerprints`` when they apply
a change, so a restarted collector picks up where the last one stopped and ships
only what changed while it was away (no duplicate events).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from jobtap.keys import SiteKeys
from jobtap.schema import KINDS


@dataclass(slots=True)
class Seen:
    fingerprint: str
    state: str


def encode_seen(fp: str, state: str | None) -> str:
    return f"{fp} {state or ''}"


def decode_seen(raw: str) -> Seen:
    fp, _, state = raw.partition(" ")
    return Seen(fp, state)


@dataclass
class Ledger:
    """What the collector has shipped: each object's :class:`Seen`, by kind and id."""

    objects: dict[str, dict[str, Seen]] = field(default_factory=lambda: {k: {} for k in KINDS})

    def of(self, kind: str) -> dict[str, Seen]:
        return self.objects[kind]

    def count(self, kind: str) -> int:
        return len(self.objects[kind])

    @classmethod
    def load(cls, r: redis.Redis, keys: SiteKeys) -> Ledger:
        """Rebuild from the fingerprints the workers stored."""
        ledger = cls()
        for name, raw in r.hscan_iter(keys.fingerprints, count=5000):
            name = name.decode() if isinstance(name, bytes) else name
            raw = raw.decode() if isinstance(raw, bytes) else raw
            kind, _, oid = name.partition(":")
            if kind in ledger.objects and oid:
                ledger.objects[kind][oid] = decode_seen(raw)
        return ledger
