"""A finished job's native record, kept packed in its hash.

Nothing diffs a finished job's record again and few read its native record
(``jobtap show --native``, ``jobtap export --native``), yet the native record is
most of a hash kept for the retention (two days).  So a job's final write keeps
it packed, beside an empty ``native``:

- :data:`PRIMED_NATIVE` (``native_zd``, what workers write): ``1:`` then the
  base64 of the record's JSON packed by zlib (level 6) with a preset dictionary:
  the hash's scheduler's part of native dictionary ``1`` (the skeleton of that
  scheduler's job records: its keys in the order it writes them, with the short
  values that recur from job to job), then the values of the hash's own fields
  that the native record repeats (:data:`PRIMER_FIELDS`: owner, name, queue,
  times, resources...).  A PBS record packs to about 0.3 of its JSON, a Slurm
  ``squeue --json`` one to 0.11-0.15 (docs/performance.md, "A finished job's
  native record packed with a dictionary").
- :data:`PACKED_NATIVE` (``native_z``, what workers wrote before, still read):
  zlib level 6 without a dictionary, then base64.

A value stays text (base64), which every reader, ``decode_responses`` ones too,
can take.  A reader older than a field sees no native record (``native`` is
empty) rather than bytes it cannot parse.

The primer fields are written with the final and never change after it (a
finished job is never written again; only its bookkeeping could be), so a reader
rebuilds the same dictionary from the hash.  A dictionary must stay byte for
byte what it was for as long as a hash packed with it is kept: dictionary ``1``
is ``schemas/native-dictionary-1.json``, whose digest is checked when it is
loaded; a better one is a dictionary ``2`` beside it (``python -m
bench.native_pack --dictionary FILE`` makes one from the captures), never an
edit.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import zlib
from collections.abc import Mapping, Sequence
from functools import cache
from importlib.resources import files
from typing import Any

import orjson

PRIMED_NATIVE = "native_zd"
PACKED_NATIVE = "native_z"
NATIVE_FORMS = ("native", PRIMED_NATIVE, PACKED_NATIVE)
"""The fields a job hash may hold its native record in."""

DICTIONARY = "1"
"""The native dictionary workers pack with (the prefix of their values)."""
_DIGESTS = {"1": "d5418a38305fc29dbf6e38488e3187d4cc2a2a71e8693d2190fe6a6ccfd31d2e"}

PRIMER_FIELDS: tuple[str, ...] = (
    "id",
    "user",
    "group",
    "account",
    "name",
    "queue",
    "comment",
    "submit_time",
    "start_time",
    "end_time",
    "requested",
    "allocated",
    "resources_used",
    "array_parent",
)
"""A job hash's fields whose values its native record repeats (in its own
spelling or near it), in the order they end the dictionary."""

NATIVE_FIELDS: tuple[str, ...] = (
    "native",
    PRIMED_NATIVE,
    PACKED_NATIVE,
    "scheduler",
    *PRIMER_FIELDS,
)
"""The fields a reader asks for (``HMGET``) to have a job's native record,
whichever form it is in (:func:`native_read`)."""

_LEVEL = 6
# The zlib format, not raw deflate: its header names the dictionary (its Adler-32)
# and its trailer checks what came out, 10 bytes that make a hash whose fields
# were edited since an error rather than another record.
_WBITS = 15


@cache
def dictionary(version: str = DICTIONARY) -> dict[str, bytes]:
    """Native dictionary ``version``: scheduler -> its part.  A ``ValueError``
    if there is none, or if its file is not the one released."""
    digest = _DIGESTS.get(version)
    if digest is None:
        raise ValueError(
            f"no native dictionary {version[:20]!r} (a newer jobtap packed this record)"
        )
    raw = files(__package__).joinpath("schemas", f"native-dictionary-{version}.json").read_bytes()
    if hashlib.sha256(raw).hexdigest() != digest:
        raise ValueError(
            f"native dictionary {version} is not the one released: it must never be edited"
            " (records packed with it are read with it); make a new version instead"
        )
    parts: dict[str, str] = orjson.loads(raw)
    return {scheduler: part.encode() for scheduler, part in parts.items()}


def _field(fields: Mapping[Any, Any], name: str) -> bytes:
    value = fields.get(name)
    if value is None:
        value = fields.get(name.encode())
    if value is None:
        return b""
    return value if isinstance(value, bytes) else str(value).encode()


def _primer(fields: Mapping[Any, Any], version: str) -> bytes:
    scheduler = _field(fields, "scheduler").decode(errors="replace")
    own = b"\n".join(_field(fields, name) for name in PRIMER_FIELDS)
    return dictionary(version).get(scheduler, b"") + b"\n" + own


def pack_native(text: str, fields: Mapping[str, str]) -> str:
    """The :data:`PRIMED_NATIVE` value of a native record's JSON ``text`` in a
    job hash whose fields, once written, are ``fields`` (its scheduler and
    :data:`PRIMER_FIELDS` are read from them)."""
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, _WBITS, zdict=_primer(fields, DICTIONARY))
    packed = packer.compress(text.encode()) + packer.flush()
    return f"{DICTIONARY}:{base64.b64encode(packed).decode('ascii')}"


def unpack_native(raw: str | bytes, fields: Mapping[Any, Any]) -> Any:
    """The native record a :data:`PRIMED_NATIVE` value of the hash whose fields
    are ``fields`` holds; a ``ValueError`` saying so if it is not one (a
    hand-edited or truncated hash)."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    version, colon, data = text.partition(":")
    if not colon:
        raise ValueError(f"{PRIMED_NATIVE} is not a packed native record: no dictionary named")
    try:
        unpacker = zlib.decompressobj(_WBITS, zdict=_primer(fields, version))
        plain = unpacker.decompress(base64.b64decode(data, validate=True)) + unpacker.flush()
        if not unpacker.eof:
            raise zlib.error("truncated")
        return orjson.loads(plain)
    except (binascii.Error, zlib.error, orjson.JSONDecodeError) as exc:
        raise ValueError(f"{PRIMED_NATIVE} is not a packed native record: {exc}") from None


def pack_zlib(text: str) -> str:
    """The :data:`PACKED_NATIVE` value of a native record's JSON ``text``: what
    workers wrote before :data:`PRIMED_NATIVE`, and what a site's hashes hold
    for the retention after it upgrades (tests and benches write it)."""
    return base64.b64encode(zlib.compress(text.encode(), _LEVEL)).decode("ascii")


def unpack_zlib(raw: str | bytes) -> Any:
    """The native record a :data:`PACKED_NATIVE` value (no dictionary) holds;
    a ``ValueError`` saying so if it is not one."""
    try:
        return orjson.loads(zlib.decompress(base64.b64decode(raw, validate=True)))
    except (binascii.Error, zlib.error, orjson.JSONDecodeError) as exc:
        raise ValueError(f"{PACKED_NATIVE} is not a packed native record: {exc}") from None


def native_of(fields: Mapping[Any, Any]) -> Any:
    """A job's native record from its hash's fields (as read: ``str`` or
    ``bytes`` names and values, ``None`` for one absent): ``native`` unless it is
    empty, else the packed one unpacked; ``None`` when none holds one."""
    plain = _field(fields, "native")
    if plain:
        return orjson.loads(plain)
    primed = _field(fields, PRIMED_NATIVE)
    if primed:
        return unpack_native(primed, fields)
    packed = _field(fields, PACKED_NATIVE)
    return unpack_zlib(packed) if packed else None


def native_read(values: Sequence[str | bytes | None]) -> Any:
    """A job's native record from the reply of ``HMGET key *NATIVE_FIELDS``."""
    return native_of(dict(zip(NATIVE_FIELDS, values, strict=True)))
