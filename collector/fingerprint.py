"""Stable fingerprints of native records.

A fingerprint is a short digest of the record exactly as the scheduler printed
it (after parsing).  The collector compares fingerprints, not records, so a
cycle costs one ``orjson.dumps`` and one hash per object and only objects whose
fingerprint moved are normalised and shipped.  Digests are stable across
processes (unlike ``hash()``), so a restarted collector can reuse the ones the
workers stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from hashlib import blake2b
from typing import Any

import orjson


def fingerprint(native: Any) -> str:
    return blake2b(orjson.dumps(native), digest_size=8).hexdigest()


def fingerprint_all(natives: Mapping[str, Any]) -> dict[str, str]:
    dumps = orjson.dumps
    return {oid: blake2b(dumps(rec), digest_size=8).hexdigest() for oid, rec in natives.items()}
