"""Typed views of redis-py replies.

The SDK's Redis clients do not decode responses, so replies hold ``bytes``;
redis-py's own annotations also allow ``str``, numbers and ``None`` (other
protocol versions and settings).  These helpers turn a reply value into what
the SDK works with, and say so when a reply is not what it should be.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Fields = Mapping[Any, Any]
"""A stream entry's fields as redis-py returns them (``bytes`` keys and values)."""


def text(value: bytes | str | int | float | None) -> str:
    """A reply value as ``str`` (stream ids, names, user names)."""
    if isinstance(value, bytes):
        return value.decode()
    if value is None:
        raise ValueError("a Redis reply lacks a value it should have")
    return str(value)


def blob(value: bytes | str | int | float | None) -> bytes:
    """A reply value as ``bytes`` (an event's JSON)."""
    if isinstance(value, bytes):
        return value
    return text(value).encode()


def entries(reply: Any) -> list[tuple[str, Fields]]:
    """The entries of an XREAD/XREADGROUP reply over one stream (RESP2: a list of
    ``[stream, entries]``; an empty reply: no entries)."""
    out: list[tuple[str, Fields]] = []
    for _stream, items in reply or ():
        out.extend((text(sid), fields) for sid, fields in items)
    return out
