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

from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import redis

from .records import parse_event_id

PAGE = 500


def parse_sid(sid: str) -> tuple[int, int]:
    ms, _, seq = sid.partition("-")
    return int(ms), int(seq or 0)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Entry:
    """One stream entry, its event decoded on demand."""

    __slots__ = ("sid", "eid", "prefix", "version", "type", "json", "_event")

    def __init__(self, sid: str, eid: str, etype: str, json: bytes):
        self.sid = sid
        self.eid = eid
        self.prefix, self.version = parse_event_id(eid)
        self.type = etype
        self.json = json
        self._event: dict | None = None

    @classmethod
    def from_fields(cls, sid: bytes | str, fields: dict) -> Entry:
        return cls(_s(sid), _s(fields[b"id"]), _s(fields.get(b"type", b"")), fields[b"event"])

    @property
    def event(self) -> dict:
        if self._event is None:
            self._event = orjson.loads(self.json)
        return self._event


@dataclass
class Scan:
    missed: list[Entry] = field(default_factory=list)  # oldest first
    newest: str | None = None  # the newest entry id at the time of the scan
    complete: bool = False  # the boundary was found: nothing older was missed


def newest_id(r: redis.Redis, stream: str) -> str:
    """The id of the stream's newest entry (``0-0`` when empty or missing)."""
    last = r.xrevrange(stream, count=1)
    return _s(last[0][0]) if last else "0-0"


def _trimmed_after(r: redis.Redis, stream: str, sid: str) -> bool:
    """True if entries newer than ``sid`` may have been trimmed away."""
    try:
        info = r.xinfo_stream(stream)
    except redis.exceptions.NoPermissionError:
        return True  # cannot tell: assume the worst
    except redis.ResponseError:  # no such key: nothing was ever written
        return False
    deleted = info.get("max-deleted-entry-id") or info.get(b"max-deleted-entry-id")
    if deleted is None:
        return True
    return parse_sid(_s(deleted)) > parse_sid(sid)


def scan_back(
    r: redis.Redis,
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
        page = r.xrevrange(stream, max=end, min="-", count=PAGE)
        if not page:
            scan.complete = not _trimmed_after(r, stream, stop_at)
            break
        if scan.newest is None:
            scan.newest = _s(page[0][0])
        for sid, fields in page:
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
        end = "(" + _s(page[-1][0])
    scan.missed.reverse()
    return scan
