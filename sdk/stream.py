"""The deduplicated, resumable event stream, for idempotent downstream consumers
(exporters to Kafka or Elasticsearch, accounting, dashboards).

Two modes:

- **plain** (no ``group``): ``XREAD BLOCK`` from a position.  ``since`` is a stream
  id (exclusive; ``"0"`` for everything the stream still holds, ``"$"`` or
  ``None`` for only what comes next).  :attr:`EventStream.last_id` is the position
  to persist and pass back as ``since`` to resume.
- **consumer group**: ``XREADGROUP`` in group ``group`` as ``consumer``.  Each event
  is given to one consumer of the group.  An event is acknowledged (XACK) once the
  caller has taken it and asked for more: the events of a batch are acked when the
  next batch is fetched, and on :meth:`EventStream.close`.  Events a consumer took
  but did not ack (it crashed) stay pending; after ``claim_idle`` seconds another
  consumer of the group claims them (XAUTOCLAIM) and delivers them again.  A
  restarted consumer with the same name first re-reads its own pending events.

Delivery is **at least once**: after a crash, the events of the batch being
processed come again.  Duplicates that the stream itself holds (a replayed
batch: same event id, or a version not newer than the last one seen for that
object) are dropped before they reach the caller, within a bounded memory of
``dedupe`` objects; a consumer should still be idempotent (the event ``id`` is
deterministic: use it as the key downstream).

After a disconnect the stream reconnects with backoff and carries on where it
left off; nothing is skipped that the stream still holds.  The streams are
bounded (the workers' ``--site-maxlen`` and ``--max-age``; a user's stream keeps
nothing older than the site stream's oldest event, and with ``--copy-events`` no
more than ``--user-maxlen``): a plain
reader (or consumer group) behind by more than that is told, each time, in a
warning and in :attr:`EventStream.gaps`, and goes on from the oldest event the
stream holds.
If Redis lost data meanwhile (it restarted, failed over, or went back to an
older snapshot), the events written afterwards carry a new site epoch (see
:mod:`jobtap.events`) and versions from 1 again: the de-duplication counts
versions per epoch, so the new epoch's events all go through
(:attr:`EventStream.epoch` and ``epochs`` say what was seen).

A site stream's entry that names the user's stream holding its event (a job's
event is stored once: :mod:`jobtap.entries`) is read with its event, one
pipelined read a batch, before the batch is handed out.

With ``native=True`` each event comes with the scheduler's own record in
``record.native``, which events of format 2 leave in the object's hash (see
:mod:`jobtap.events`): it is read from the hashes of a fetched batch's objects
in one pipelined read, before the batch is handed out, so it is the record as
the hash holds it then (it may be of a later version than the event), and
``null`` for an object whose hash is gone (a finished job past its retention, a
removed node).  A format-1 event keeps the ``native`` it carries, that of its
own version.  Such a change's ``event`` and ``json`` have it too, and its
``record`` still does not (:mod:`jobtap.records`): the join is for consumers
that forward events downstream as they are, like ``jobtap export --native``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import redis
from tenacity import RetryCallState

from .backfill import newest_id, removed_count, trimmed_after
from .cache import Cache, Ref
from .connection import AnyRedis, Site
from .dedupe import VersionMemory
from .entries import parse_sid, resolve
from .errors import ConfigError, JobtapError
from .events import split_event_id
from .reconnect import TRANSIENT, reconnecting
from .records import Change
from .redis_errors import translate_error, translated
from .replies import Fields, blob, entries, text
from .urls import safe_url

log = logging.getLogger("jobtap.sdk")


def default_consumer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class EventStream(Iterator[Change]):
    """Iterator of :class:`~jobtap.records.Change` from a site's or a user's stream.
    Made by :meth:`Client.stream`; see the module documentation for the semantics.

    ``idle_timeout`` ends the iteration after that many seconds without an event
    (default: never).  Attributes: ``last_id``, ``delivered``, ``duplicates``,
    ``claimed``, ``epoch`` (the site epoch of the last event read), ``epochs``
    (how many times it changed) and ``gaps`` (how many times events were
    trimmed away before they were read).
    """

    def __init__(
        self,
        site: Site,
        *,
        group: str | None = None,
        consumer: str | None = None,
        since: str | None = None,
        user: str | None = None,
        count: int = 1000,
        block: float = 2.0,
        claim_idle: float = 60.0,
        idle_timeout: float | None = None,
        dedupe: int = 200_000,
        backoff: tuple[float, float] = (0.05, 5.0),
        native: bool = False,
    ):
        if count < 1:
            raise ConfigError("count must be at least 1")
        if since not in (None, "$", "0") and not _valid_id(since):
            raise ConfigError(f"since must be a stream id like 1732200000000-0, not {since!r}")
        self.site = site
        self.key = site.keys.user_events(user) if user else site.keys.events
        self.group = group
        # group mode: (group, consumer)
        self._member = (group, consumer or default_consumer()) if group else None
        self.consumer = self._member[1] if self._member else None
        self.since = since
        self.count = count
        self.block = block
        self.claim_idle = claim_idle
        self.idle_timeout = idle_timeout
        self.backoff = backoff
        self.native = native
        """Whether each event gets its object's native record (module docstring)."""
        self.last_id: str | None = None
        """Stream id of the last event handed out (the position to resume from)."""
        self.delivered = 0
        self.duplicates = 0
        self.claimed = 0
        self.epoch: str | None = None
        """The site epoch of the last event read (see :mod:`jobtap.events`)."""
        self.epochs = 0
        """How many new epochs began while reading (Redis lost data)."""
        self.gaps = 0
        """How many times the stream had let go of events after the position (a
        consumer group's, in group mode) before they were read: the reader was
        behind by more than the stream keeps.  Each one is logged."""
        self._place: int | None = None  # plain mode: entries the stream added up to _pos
        self._epochs_seen: set[str] = set()
        self._memory = VersionMemory(dedupe)
        self._buffer: deque[Change] = deque()
        self._fetched: list[Change] = []  # read, not in the buffer yet (native not joined)
        self._pos: str | None = None  # plain mode: last id read
        self._taken: list[str] = []  # group mode: handed out, not acked yet
        self._dropped: list[str] = []  # group mode: duplicates to ack
        self._group_ready = False
        self._own_pending: str | None = "0"  # group mode: cursor over our own pending entries
        self._claim_cursor = "0-0"
        self._next_claim = 0.0
        self._stop = threading.Event()
        self._closed = False
        self._connected = False
        self._last_activity = time.monotonic()
        self._down_since: float | None = None

    @property
    def r(self) -> AnyRedis:
        """The site's data client (made at first use)."""
        return self.site.redis

    # -- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> Change:
        if not self._buffer:
            self._fill()
        change = self._buffer.popleft()
        self._hand_out(change)
        return change

    def batch(self) -> list[Change]:
        """The next non-empty batch (blocking); acks the previous one.  Raises
        ``StopIteration`` when the stream is closed or idle past ``idle_timeout``."""
        if not self._buffer:
            self._fill()
        out = list(self._buffer)
        self._buffer.clear()
        for change in out:
            self._hand_out(change)
        return out

    @property
    def buffered(self) -> int:
        """Events fetched but not handed out yet (0: the next call may block)."""
        return len(self._buffer)

    def _hand_out(self, change: Change) -> None:
        if self.group is not None and change.stream_id is not None:
            self._taken.append(change.stream_id)
        self.last_id = change.stream_id
        self.delivered += 1

    def _untake(self, n: int) -> None:
        """The last ``n`` events handed out did not reach the caller after all."""
        if n and self.group is not None:
            del self._taken[-n:]
        self.delivered -= n

    def ack(self) -> None:
        """Acknowledge every event handed out so far (group mode; no-op otherwise)."""
        with translated(self.site.url):
            self._ack()

    def _ack(self) -> None:
        if self.group is None or not (self._taken or self._dropped):
            return
        self.r.xack(self.key, self.group, *(self._taken + self._dropped))
        self._taken.clear()
        self._dropped.clear()

    def interrupt(self) -> None:
        """Make the iteration end (any thread): a fetch in flight ends after its
        current read, with ``StopIteration``.  Acks nothing: see :meth:`close`."""
        self._stop.set()

    def close(self, ack: bool = True) -> None:
        """Stop; with ``ack``, acknowledge what was handed out.  Events not acked
        (fetched but not handed out, or all of them with ``ack=False``) stay pending
        in the group: another consumer claims them after ``claim_idle``."""
        self._stop.set()
        if self._closed:
            return
        self._closed = True
        if not ack:
            return
        try:
            self.ack()
        except JobtapError as exc:
            log.warning("jobtap: could not ack %d event(s) on close: %s", len(self._taken), exc)

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        # Leaving the block with an exception acks nothing more: the event being
        # processed (and the rest of its batch) will be delivered again.
        self.close(ack=exc_type is None)

    # -- fetching ------------------------------------------------------------------------------
    def _fill(self) -> None:
        while not self._buffer:
            if self._stop.is_set():
                raise StopIteration
            idle = time.monotonic() - self._last_activity
            if self.idle_timeout is not None and idle >= self.idle_timeout:
                raise StopIteration
            try:
                self._fetch_resilient()
            except TRANSIENT as exc:  # only when closed while reconnecting
                if self._stop.is_set():
                    raise StopIteration from None
                raise translate_error(exc, self.site.url) from exc
            except redis.RedisError as exc:
                raise translate_error(exc, self.site.url) from exc
        self._last_activity = time.monotonic()

    def _fetch_resilient(self) -> None:
        if not self._connected:  # Redis unreachable from the start: say so at once
            self._fetch()
            self._connected = True
            return
        initial, cap = self.backoff
        for attempt in reconnecting(self._stop, initial=initial, cap=cap, on_retry=self._on_retry):
            with attempt:
                self._fetch()
        if self._down_since is not None:
            log.warning(
                "jobtap: stream %s readable again after %.1f s; resuming after %s",
                self.key,
                time.monotonic() - self._down_since,
                self.last_id or self._pos or "the start",
            )
            self._down_since = None

    def _on_retry(self, state: RetryCallState) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "jobtap: lost Redis at %s while reading %s (%s); reconnecting",
                safe_url(self.site.url),
                self.key,
                exc,
            )

    def _block_ms(self, limit: float | None = None) -> int:
        wait = self.block
        if self.idle_timeout is not None:
            left = self.idle_timeout - (time.monotonic() - self._last_activity)
            wait = min(wait, max(left, 0.001))
        if limit is not None:
            wait = min(wait, max(limit, 0.001))
        return max(1, int(wait * 1000))

    def _offer_all(
        self, got: Sequence[tuple[bytes | str | None, Fields | None]], run: bool = True
    ) -> None:
        """Offer a read's entries, each with its event (a site stream's entry
        may name the user's stream that holds it: :mod:`jobtap.entries`)."""
        for sid, fields in resolve(self.r, got, run=run):
            self._offer(sid, fields)

    def _offer(self, sid: str, fields: Fields | None) -> None:
        if not fields or b"id" not in fields:  # deleted meanwhile, or not an event
            if self.group is not None:
                self._dropped.append(sid)
            return
        eid = text(fields[b"id"])
        etype = text(fields.get(b"type", b""))
        try:
            prefix, epoch, version = split_event_id(eid)
        except ValueError:
            prefix, epoch, version = eid, "", 0
        if epoch not in self._epochs_seen:
            self._epochs_seen.add(epoch)
            if self.epoch is not None:
                self.epochs += 1
                log.warning(
                    "jobtap: stream %s: epoch %s began (Redis lost data); versions count "
                    "from 1 in it", self.key, epoch or '""',
                )  # fmt: skip
        self.epoch = epoch
        if not self._memory.accept(prefix, version, etype, parse_sid(sid), epoch):
            self.duplicates += 1
            if self.group is not None:
                self._dropped.append(sid)
            return
        event = blob(fields[b"event"])
        self._fetched.append(Change(eid, etype, version, json=event, stream_id=sid))

    def _fetch(self) -> None:
        """Read a batch, join its native records if asked, then buffer it.  A
        batch read whose join failed (Redis went away) is joined on the retry
        before anything more is read, so no event is handed out without it."""
        if not self._fetched:
            if self._member is None:
                self._fetch_plain()
            else:
                self._fetch_group(*self._member)
        if self.native and self._fetched:
            self._fetched = self._with_native(self._fetched)
        self._buffer.extend(self._fetched)
        self._fetched = []

    def _with_native(self, changes: list[Change]) -> list[Change]:
        """``changes`` with their objects' native records in their events, read
        in one pipelined round (an event that carries its own keeps it)."""
        wanting = [c for c in changes if "native" not in c.event.get("record", {})]
        refs = [Ref(self.site.name, c.kind, c.object_id, c.user) for c in wanting]
        joined: dict[int, Change] = {}
        natives = Cache(self.site).natives(refs, damaged_as_none=True)
        for c, native in zip(wanting, natives, strict=True):
            event = {**c.event, "record": {**c.event.get("record", {}), "native": native}}
            joined[id(c)] = Change(c.id, c.type, c.version, event=event, stream_id=c.stream_id)
        return [joined.get(id(c), c) for c in changes]

    def _fetch_plain(self) -> None:
        if self._pos is None:
            if self.since in (None, "$"):
                self._pos = newest_id(self.r, self.key)
            else:
                self._pos = "0-0" if self.since == "0" else self.since
        # what the stream let go of, read just before the events (same round trip)
        pipe = self.r.pipeline(transaction=False)
        pipe.xinfo_stream(self.key)
        pipe.xread({self.key: self._pos}, count=self.count, block=self._block_ms())
        info, reply = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        # each entry with its event first: if that read fails, nothing has moved
        # (the position, the place) and the batch is read again
        read = resolve(self.r, entries(reply))
        if not isinstance(info, Exception):  # no stream yet: nothing was let go of
            self._count_gap(info, len(read))
        for sid, fields in read:
            self._pos = sid
            self._offer(sid, fields)

    def _count_gap(self, info: dict[str, Any], n: int) -> None:
        """Count and log a gap: the stream let go of events after the position
        before they were read (its retention, the workers' ``--site-maxlen``,
        ``--user-maxlen`` and ``--max-age``, is shorter than this reader's lag).
        The position's place in the stream (``entries-added`` up to it) tells how
        many went, and that none did for a reader at the end of a stream whose
        old events age out; a reader resumed from an id has no place until it
        reaches the end, and a trim past that id counts as a gap."""
        assert self._pos is not None
        removed = removed_count(info)
        if self._pos == "0-0" and self._place is None:  # "0": what the stream holds now
            self._place = removed
        elif self._pos == text(info.get("last-generated-id") or b""):
            self._place = int(info.get("entries-added") or 0)  # at the end: nothing missed
        lost: int | None = None
        if self._place is not None:
            lost = max(removed - self._place, 0)
        elif trimmed_after(info, self._pos):
            lost = -1  # some; how many is not known
        if lost:
            self._report_gap(lost, self._pos)
            self._place = removed  # the batch starts at the stream's first entry
        if self._place is not None:
            self._place += n

    def _report_gap(self, lost: int, after: str) -> None:
        """``lost`` events (-1: some) went after ``after`` before they were read."""
        self.gaps += 1
        log.warning(
            "jobtap: stream %s let go of %s event(s) after %s before they were read (this "
            "reader was behind by more than the stream keeps); going on from the oldest "
            "it holds", self.key, "some" if lost < 0 else lost, after,
        )  # fmt: skip

    def _fetch_group(self, group: str, consumer: str) -> None:
        r, key = self.r, self.key
        if not self._group_ready:
            try:
                start = self.since or "$"
                # from "0": the group starts at what the stream holds now (its
                # place: the entries it let go of), so that is no gap
                read = self._removed(key) if start == "0" else None
                r.xgroup_create(key, group, id=start, mkstream=True, entries_read=read)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._group_ready = True
        try:
            self._read_group(r, key, group, consumer)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # Redis lost the group (restarted without persistence): make it again,
            # from the start of what the stream holds now.
            log.warning("jobtap: consumer group %s of %s is gone; creating it again", group, key)
            self._group_ready = False
            self.since = "0"
            self._taken.clear()
            self._dropped.clear()

    def _read_group(self, r: AnyRedis, key: str, group: str, consumer: str) -> None:
        self._ack()
        if self._own_pending is not None:
            reply = r.xreadgroup(group, consumer, {key: self._own_pending}, count=self.count)
            own = entries(reply)
            if not own:
                self._own_pending = None
            else:
                pending = resolve(r, own, run=False)  # before the cursor moves past them
                self._own_pending = pending[-1][0]
                for sid, fields in pending:
                    self._offer(sid, fields)
            return
        now = time.monotonic()
        if now >= self._next_claim:
            claim: Any = r.xautoclaim(
                key, group, consumer, int(self.claim_idle * 1000), self._claim_cursor,
                count=self.count,
            )  # fmt: skip
            cursor, claimed = claim[0], claim[1]
            self._claim_cursor = text(cursor)
            if self._claim_cursor == "0-0":
                self._next_claim = now + min(max(self.claim_idle / 2, 0.05), 30.0)
            if claimed:
                self.claimed += len(claimed)
                log.info("jobtap: claimed %d pending event(s) of %s", len(claimed), group)
                self._offer_all(claimed, run=False)
                return
        wait = self._block_ms(self._next_claim - time.monotonic())
        # what the stream let go of, and the group's place, just before the events
        pipe = r.pipeline(transaction=False)
        pipe.xinfo_stream(key)
        pipe.xinfo_groups(key)
        pipe.xreadgroup(group, consumer, {key: ">"}, count=self.count, block=wait)
        info, groups, reply = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        if not isinstance(info, Exception) and not isinstance(groups, Exception):
            mine = [g for g in groups if text(g.get("name") or b"") == group]
            if mine:
                self._count_group_gap(info, mine[0])
        self._offer_all(entries(reply))

    def _removed(self, key: str) -> int:
        try:
            return removed_count(self.r.xinfo_stream(key))
        except redis.ResponseError:  # no stream yet
            return 0

    def _count_group_gap(self, info: dict[str, Any], group: dict[str, Any]) -> None:
        """A consumer group's gap: Redis keeps its place (``entries-read``), so
        the events the stream let go of past it are counted as a plain reader's
        are (``_count_gap``); a group whose place Redis does not know (made at an
        id) counts a trim past its last delivered id as a gap."""
        place = group.get("entries-read")
        last = text(group.get("last-delivered-id") or b"0-0")
        if place is not None:
            lost = max(removed_count(info) - int(place), 0)
        else:
            lost = -1 if trimmed_after(info, last) else 0
        if lost:
            self._report_gap(lost, last)


def _valid_id(value: str) -> bool:
    ms, sep, seq = value.partition("-")
    return ms.isdigit() and (not sep or seq.isdigit())
