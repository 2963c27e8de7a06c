"""Finding missed events in a stream after a gap (a reconnect, an output-buffer
cut-off, a version that jumped).

Each event is appended to the streams (XADD) and published (PUBLISH) by the same
Lua script, so a channel carries its stream's events in the stream's order, and
what a subscriber processed before a disconnect is a prefix of that order.  Scanning
the stream backwards from its newest entry therefore finds every missed event:
everything newer than the first entry already processed (or newer than the
position noted when the subscription last synchronised).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis

from .connection import AnyRedis
from .entries import parse_sid, resolve
from .events import split_event_id
from .replies import Fields, blob, text

PAGE = 500


class Entry:
    """One stream entry, its event decoded on demand."""

    __slots__ = ("sid", "eid", "prefix", "epoch", "version", "type", "json", "_event")

    def __init__(self, sid: str, eid: str, etype: str, json: bytes):
        self.sid = sid
        self.eid = eid
        self.prefix, self.epoch, self.version = split_event_id(eid)
        self.type = etype
        self.json = json
        self._event: dict[str, Any] | None = None

    @classmethod
    def from_fields(cls, sid: bytes | str | None, fields: Fields) -> Entry:
        return cls(
            text(sid), text(fields[b"id"]), text(fields.get(b"type", b"")), blob(fields[b"event"])
        )

    @property
    def event(self) -> dict[str, Any]:
        if self._event is None:
            event: dict[str, Any] = orjson.loads(self.json)
            self._event = event
        return self._event


@dataclass
class Scan:
    missed: list[Entry] = field(default_factory=list)  # oldest first
    newest: str | None = None  # the newest entry id at the time of the scan
    newest_epoch: str | None = None  # the site epoch of that entry's event
    complete: bool = False  # the boundary was found: nothing older was missed


def newest_id(r: AnyRedis, stream: str) -> str:
    """The id of the stream's newest entry (``0-0`` when empty or missing)."""
    return newest_entry(r, stream)[0]


def newest_entry(r: AnyRedis, stream: str) -> tuple[str, str | None]:
    """The id of the stream's newest entry (``0-0`` when empty or missing) and the
    site epoch of its event (``None`` when there is none)."""
    last = r.xrevrange(stream, count=1)
    if not last:
        return "0-0", None
    sid, fields = last[0]
    eid = fields.get(b"id") if fields else None
    return text(sid), split_event_id(text(eid))[1] if eid is not None else None


def _trimmed_after(r: AnyRedis, stream: str, sid: str) -> bool:
    """True if entries newer than ``sid`` may have been trimmed away."""
    try:
        info = r.xinfo_stream(stream)
    except redis.exceptions.NoPermissionError:
        return True  # cannot tell: assume the worst
    except redis.ResponseError:  # no such key: nothing was ever written
        return False
    return trimmed_after(info, sid)


def trimmed_after(info: Mapping[str, Any], sid: str) -> bool:
    """True if entries newer than ``sid`` may have been removed, from the stream's
    ``XINFO STREAM`` (Redis 7): deleted one by one (``XDEL`` moves
    ``max-deleted-entry-id``) or trimmed (``MAXLEN``, ``MINID``, ``XTRIM`` only
    move ``recorded-first-entry-id`` on, past everything they removed).  "May":
    the stream's first entry may be the one right after ``sid``."""
    deleted, first = info.get("max-deleted-entry-id"), info.get("recorded-first-entry-id")
    if deleted is None or first is None:
        return True  # Redis before 7.0 does not say: assume the worst
    at = parse_sid(sid)
    if parse_sid(text(deleted)) > at:
        return True
    if removed_count(info) == 0:
        return False
    if int(info.get("length") or 0) == 0:  # all of it went
        return parse_sid(text(info.get("last-generated-id") or b"0-0")) > at
    return parse_sid(text(first)) > at


def removed_count(info: Mapping[str, Any]) -> int:
    """How many entries the stream has let go of (added, and no longer held)."""
    return int(info.get("entries-added") or 0) - int(info.get("length") or 0)


def scan_back(
    r: AnyRedis,
    stream: str,
    *,
    stop_at: str,
    processed: Callable[[Entry], bool | None],
    limit: int = 200_000,
) -> Scan:
    """Collect the entries of ``stream`` newer than the boundary.

    ``processed(entry)`` says True for an entry the caller already had (that is the
    boundary), False for one it missed, None for one it does not care about.
    ``stop_at`` is a stream id known to be covered (exclusive).  ``complete`` is
    False when ``limit`` entries were scanned or the stream was trimmed before the
    boundary: then older events may be missing too.
    """
    scan = Scan()
    stop = parse_sid(stop_at)
    end = "+"
    scanned = 0
    while True:
        page = resolve(r, r.xrevrange(stream, max=end, min="-", count=PAGE) or [])
        if not page:
            scan.complete = not _trimmed_after(r, stream, stop_at)
            break
        if scan.newest is None:
            scan.newest = text(page[0][0])
            first = page[0][1]
            if first and b"id" in first:
                scan.newest_epoch = split_event_id(text(first[b"id"]))[1]
        for sid, fields in page:
            if not fields:
                continue  # not an event (XRANGE gives every entry its fields)
            entry = Entry.from_fields(sid, fields)
            if parse_sid(entry.sid) <= stop:
                scan.complete = True
                break
            verdict = processed(entry)
            if verdict is True:
                scan.complete = True
                break
            if verdict is False:
                scan.missed.append(entry)
        if scan.complete:
            break
        scanned += len(page)
        if len(page) < PAGE:
            scan.complete = not _trimmed_after(r, stream, stop_at)
            break
        if scanned >= limit:
            break
        end = "(" + text(page[-1][0])
    scan.missed.reverse()
    return scan
