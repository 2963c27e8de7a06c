"""The client's one background thread (the *dispatcher*) and its pub/sub
connections (*links*, :mod:`jobtap.link`).

The dispatcher owns one pub/sub connection per Redis server (on a Redis Cluster:
per site, on the site's shard), shared by every subscription of the client;
channels are reference-counted.  It reads messages,
routes each to the subscriptions (their :class:`~jobtap.feed.Feed`) that want it and
runs their callbacks, in order, on this thread.  It also takes the snapshots,
catches up after gaps (:mod:`jobtap.catchup`) and reconnects.

With a bound (``max_lag``, the default), reading and calling back are apart: the
messages read go to each subscription's queue, and the callbacks run from the
queues, still in the order the messages arrived, for at most :data:`SLICE`
seconds between two reads, so a slow callback does not leave its messages in
Redis' output buffer (where they would get the connection cut).  A
subscription whose oldest queued message was read more than ``max_lag`` seconds
ago, or whose queue passes ``queue_limit`` messages, drops its queue and catches
up by state (:func:`jobtap.catchup.plan_state`); so does one whose catch-up after
a gap finds more than ``queue_limit`` events missed, or that Redis cut off.  A
catch-up's changes are delivered in turns too, and one cut short is carried into
the next (:meth:`jobtap.feed.Feed.enqueue`, :meth:`~jobtap.feed.Feed.drop_queue`).
Without a bound (``max_lag=None``) callbacks run as messages are read, and every
missed event is replayed: the behaviour before the bound existed.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

import orjson
import redis
from tenacity import RetryCallState

from .backfill import Entry, Scan, newest_entry, scan_back
from .cache import Cache, Ref
from .catchup import Planned, SiteReading, plan_object, plan_state
from .connection import Site
from .entries import parse_sid
from .errors import JobtapError, RedisUnavailable
from .feed import Callback, ChannelKey, Feed, StreamPosition
from .link import Link
from .reconnect import TRANSIENT, reconnecting
from .records import Change, object_prefix, parse_event_id
from .redis_errors import describe_error, translate_error
from .subscribe import Subscription
from .target import Target
from .tls import is_tls_failure
from .urls import safe_url

log = logging.getLogger("jobtap.sdk")

T = TypeVar("T")

TOPOLOGY_EVERY = 2.0  # seconds between asking whether a cluster site's shard changed
MESSAGE = ("message", "smessage")
CONFIRMED = ("subscribe", "ssubscribe")
MAX_LAG = 2.0
"""Seconds a subscription's callback may lag behind what was read for it before
it catches up by state (the default of ``Client(max_lag=...)``)."""
QUEUE_LIMIT = 10_000
"""Messages a subscription's queue may hold (the default of ``Client(queue_limit=...)``)."""
SLICE = 0.02
"""Seconds of callbacks between two reads of the pub/sub connections."""


def _epoch_moved(feed: Feed, name: str, scans: dict[str, Scan]) -> bool:
    """Whether a stream's newest event is of another epoch than the one the feed
    last saw in it (a new epoch began)."""
    return any(
        scan.newest_epoch is not None
        and feed.stream_epoch(name, stream) not in (None, scan.newest_epoch)
        for stream, scan in scans.items()
    )


def _take_scans(
    feed: Feed, name: str, scans: dict[str, Scan], positions: list[StreamPosition]
) -> dict[str, list[Entry]]:
    """The missed events of ``scans`` per object, in stream order; each stream's
    epoch is followed at once, its position added to ``positions`` (taken once
    what was missed is covered: :meth:`Feed.take_positions`)."""
    missed: dict[str, list[Entry]] = {}
    for stream, scan in scans.items():
        if scan.newest is not None:
            feed.note_stream_epoch(name, stream, scan.newest_epoch)
            positions.append((name, stream, scan.newest, scan.newest_epoch))
        for e in scan.missed:
            missed.setdefault(e.prefix, []).append(e)
    return missed


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class _ShardChanged(redis.ConnectionError):
    """A cluster site's shard has another primary, or the node gave the site's
    slot away: the link must go to wherever the site is now."""


class _LinkDown(Exception):
    def __init__(self, link: Link, exc: BaseException):
        super().__init__(str(exc))
        self.link = link
        self.exc = exc


class Dispatcher:
    """The client's background thread: pub/sub reading, routing, callbacks,
    reconnects and resyncs."""

    def __init__(
        self,
        sites: dict[str, Site],
        *,
        backoff: tuple[float, float] = (0.05, 5.0),
        scan_limit: int = 200_000,
        max_lag: float | None = MAX_LAG,
        queue_limit: int = QUEUE_LIMIT,
    ):
        self.sites = sites
        self.max_lag = max_lag
        self.queue_limit = queue_limit
        # whose queue holds the next change to deliver: one entry per change
        # queued, in arrival order (an entry of a dropped queue does nothing)
        self._inbox: deque[Feed] = deque()
        self.caches = {name: Cache(site) for name, site in sites.items()}
        self.backoff = backoff
        self.scan_limit = scan_limit
        self._server_links: dict[tuple[str, str | None, str | None], Link] = {}
        self.site_link: dict[str, Link] = {}  # made when a site is first subscribed to
        self.links: list[Link] = []
        self._topology_at = time.monotonic() + TOPOLOGY_EVERY
        self.feeds: set[Feed] = set()
        self.by_channel: dict[ChannelKey, set[Feed]] = {}
        self.pending_on: dict[ChannelKey, set[Feed]] = {}
        self._commands: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._backlog = False
        self._thread = threading.Thread(target=self._run, name="jobtap-sdk", daemon=True)
        self._started = False
        self._lock = threading.Lock()

    # -- called from any thread -------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            if not self._started:
                self._started = True
                self._thread.start()

    @property
    def in_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        """Run ``fn`` on the dispatcher thread.  From a callback (on that thread)
        it runs once the current batch of messages is handled."""
        fut: Future[Any] = Future()
        if not self._started or self._stop.is_set():
            fut.cancel()
            return fut
        self._commands.append((fn, fut))
        if not self.in_thread:
            try:
                self._wake_w.send(b"x")
            except OSError:
                pass  # the pipe is full of wake-ups already
        return fut

    def subscribe(
        self,
        callback: Callback,
        targets: Iterable[Target],
        *,
        attrs: Iterable[str] | None,
        initial: bool,
        timeout: float,
    ) -> Subscription:
        """Start a subscription; unless called from a callback, wait until its
        initial records were delivered."""
        feed = Feed(callback, targets, attrs=attrs, initial=initial, release=self.remove)
        sub = Subscription(feed, self.close_feed)
        self.start()
        self.submit(lambda: self._add(feed))
        if self.in_thread:
            return sub
        if not feed.wait_ready(timeout):
            sub.close()
            urls = ", ".join(sorted({safe_url(link.url) for link, _ in feed.channels}))
            raise RedisUnavailable(
                f"the subscription was not confirmed by Redis at {urls} within {timeout:g} s"
            )
        if feed.error is not None:
            raise feed.error
        return sub

    def close_feed(self, feed: Feed) -> None:
        """Stop ``feed`` (any thread): no callback of it runs after this returns,
        unless called from another thread while one is running."""
        if feed.stop():
            self.submit(lambda: self.remove(feed))

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._started and not self.in_thread:
            self._thread.join(timeout)
        if not self._thread.is_alive():
            for link in self.links:
                link.close()
            self._wake_r.close()
            self._wake_w.close()
        for feed in list(self.feeds):
            feed.end()

    # -- dispatcher thread ----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._run_commands()
                self._poll()
                self._deliver_queued()
                self._check_topology()
            except _LinkDown as down:
                self._recover(down.link, down.exc)
            except Exception:
                log.exception("jobtap: unexpected error in the subscription thread")
                self._stop.wait(0.2)

    def _run_commands(self) -> None:
        while self._commands and not self._stop.is_set():
            fn, fut = self._commands.popleft()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except _LinkDown as down:
                fut.set_result(None)
                raise down
            except Exception as exc:
                fut.set_exception(exc)

    def _poll(self) -> None:
        live = [(link, link.sock()) for link in self.links if link.pubsub is not None]
        socks = [s for _, s in live if s is not None]
        # messages may wait in a parser's buffer, which poll() does not see
        wait = 0.0 if self._backlog or self._commands or self._inbox else 1.0
        self._backlog = False
        # poll(), not select(): a process with many clients has file descriptors
        # above 1023, which select() refuses (and a refusal here was a busy loop).
        poller = select.poll()
        for sock in (self._wake_r, *socks):
            try:
                poller.register(sock, select.POLLIN)
            except (OSError, ValueError):
                pass  # a socket closed under us: the read below says why
        poller.poll(wait * 1000)
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        for link, _ in live:
            self._drain(link)

    def _drain(self, link: Link, budget: int = 10_000) -> None:
        started = time.monotonic()
        for _ in range(budget):
            ps = link.pubsub
            if ps is None:
                return
            if self._commands:  # commands first (e.g. a subscribe made by a callback)
                self._backlog = True
                return
            try:
                # Only read when something has arrived, and then read a whole
                # message: redis-py's get_message(timeout=0) applies the zero
                # timeout to the read itself and fails on a large message that
                # arrives in pieces ("Timeout reading from socket").
                conn = ps.connection
                if conn is None or not conn.can_read(timeout=0):
                    msg = None
                else:
                    msg = ps.get_message(timeout=None)
            except TRANSIENT as exc:
                raise _LinkDown(link, exc) from exc
            except redis.ResponseError as exc:
                self._error_reply(link, exc)
                continue
            if msg is None:
                if not ps.subscribed and not any(link.refs.values()):
                    link.drop()  # nothing subscribed any more: free the connection
                return
            self._handle(link, msg)
            if self._stop.is_set():
                return
            if self._inbox and time.monotonic() - started > SLICE:
                self._backlog = True  # a slow read (large messages): call back in between
                return
        self._backlog = True  # budget spent: come back at once

    def _handle(self, link: Link, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        channel = _s(msg["channel"]) if msg.get("channel") is not None else ""
        key = (link, channel)
        if kind in MESSAGE:
            feeds = self.by_channel.get(key)
            if not feeds:
                return
            data = msg["data"]
            try:
                event = orjson.loads(data)
                prefix, _ = parse_event_id(event["id"])
                change = Change.from_event(event, data)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                log.warning("jobtap: ignoring a malformed event on %s", channel)
                return
            if self.max_lag is None:  # no bound: call back as it comes
                for feed in tuple(feeds):
                    if feed.active and not feed.offer(event, change, prefix):
                        self._resync_now(feed)
                return
            now = time.monotonic()
            for feed in tuple(feeds):
                if not feed.active:
                    continue
                if feed.enqueue(now, event, change, prefix) > self.queue_limit:
                    self._behind(feed, f"more than {self.queue_limit} events queued")
                else:
                    self._inbox.append(feed)
        elif kind in CONFIRMED:
            link.answered(channel)
            link.confirmed.add(channel)
            for feed in tuple(self.pending_on.pop(key, ())):
                if feed.channel_confirmed(key):
                    self._sync(feed)
        elif kind == "sunsubscribe" and link.refs.get(channel, 0) > 0:
            # Not asked for: the node gave the channel's slot away (a slot move).
            why = f"{link.where} gave away the slot of {channel}"
            raise _LinkDown(link, _ShardChanged(why))

    def _deliver_queued(self) -> None:
        """Run queued callbacks, in arrival order, for up to SLICE seconds."""
        deadline = time.monotonic() + SLICE
        while self._inbox and not self._commands and not self._stop.is_set():
            feed = self._inbox.popleft()
            if not feed.active or not feed.queued:
                continue  # closed, resynchronising, or its queue was dropped
            now = time.monotonic()
            if self.max_lag is not None and feed.lag(now) > self.max_lag:
                self._behind(feed, f"{feed.lag(now):.1f} s behind")
            elif not feed.deliver_next():
                # after a catch-up by state that events arrived during: by state again
                feed.by_state = feed.behind_since is not None
                self._resync_now(feed)
            if time.monotonic() >= deadline:
                return

    def _behind(self, feed: Feed, why: str) -> None:
        """``feed`` is too far behind: drop its queue and catch up by state."""
        dropped = feed.drop_queue()
        feed.skipped += dropped
        log.info("jobtap: a subscription is %s: catching up by state", why)
        feed.by_state = True
        self._resync_now(feed)

    def _check_topology(self) -> None:
        """Every few seconds, ask each cluster link whether its site's shard
        changed (a failover that its node survived, a slot move)."""
        now = time.monotonic()
        if now < self._topology_at:
            return
        self._topology_at = now + TOPOLOGY_EVERY
        for link in self.links:
            if link.sharded and link.pubsub is not None:
                try:
                    moved = link.moved()
                except (*TRANSIENT, redis.ResponseError) as exc:
                    raise _LinkDown(link, exc) from exc
                if moved:
                    why = f"the shard of site {link.site.site if link.site else '?'} changed"
                    raise _LinkDown(link, _ShardChanged(why))

    def _error_reply(self, link: Link, exc: redis.ResponseError) -> None:
        """An error reply on the pub/sub connection: the oldest unanswered
        SUBSCRIBE was refused (e.g. the ACL does not allow that channel)."""
        if not link.inflight:
            log.error("jobtap: Redis at %s answered the pub/sub connection: %s", link.url, exc)
            return
        channel = link.inflight.popleft()
        failed = set(self.by_channel.get((link, channel), ())) | set(
            self.pending_on.get((link, channel), ())
        )
        error = translate_error(exc, link.url)
        error.args = (f"{error} (channel {channel})",)
        for feed in failed:
            self._fail(feed, error)

    # -- subscription bookkeeping -----------------------------------------------------------
    def _link_for(self, name: str) -> Link:
        """The link of site ``name``: its server's (plain Redis), or its own on
        the shard that holds it (Redis Cluster)."""
        link = self.site_link.get(name)
        if link is not None:
            return link
        site = self.sites[name]
        if site.server.cluster:
            link = Link(site.config, site.server, site.keys)
        else:
            link = self._server_links.get(site.config.server)
            if link is None:
                link = self._server_links[site.config.server] = Link(site.config)
        if link not in self.links:
            self.links.append(link)
        self.site_link[name] = link
        return link

    def _add(self, feed: Feed) -> None:
        if feed.closed:
            feed.end()
            return
        self.feeds.add(feed)
        to_subscribe: list[ChannelKey] = []
        waiting = False
        links = {name: self._link_for(name) for name in feed.targets}
        for key in feed.bind(links):
            link, ch = key
            self.by_channel.setdefault(key, set()).add(feed)
            link.refs[ch] = link.refs.get(ch, 0) + 1
            if ch not in link.confirmed:
                waiting = True
                feed.await_channel(key)
                self.pending_on.setdefault(key, set()).add(feed)
                if link.refs[ch] == 1:
                    to_subscribe.append(key)
        for link, ch in to_subscribe:
            try:
                link.subscribe(ch)
            except TRANSIENT as exc:
                raise _LinkDown(link, exc) from exc
        if not waiting:
            self._sync(feed)

    def remove(self, feed: Feed) -> None:
        """Forget ``feed``, release its channels and end it (dispatcher thread)."""
        feed.stop()
        feed.drop_queue()
        if feed in self.feeds:
            self.feeds.discard(feed)
            for key in feed.channels:
                self._release_channel(key, feed)
        feed.end()

    def _release_channel(self, key: ChannelKey, feed: Feed) -> None:
        link, ch = key
        feeds = self.by_channel.get(key)
        if feeds is not None:
            feeds.discard(feed)
            if not feeds:
                del self.by_channel[key]
        waiting = self.pending_on.get(key)
        if waiting is not None:
            waiting.discard(feed)
        n = link.refs.get(ch, 0) - 1
        if n > 0:
            link.refs[ch] = n
            return
        link.refs.pop(ch, None)
        try:
            link.unsubscribe(ch)
        except TRANSIENT:
            pass  # the reconnect will not subscribe it again

    def _fail(self, feed: Feed, error: JobtapError) -> None:
        feed.fail(error)
        self.remove(feed)

    # -- synchronising ------------------------------------------------------------------------
    def _sync(self, feed: Feed) -> None:
        try:
            if feed.synced:
                self._resync(feed)
            else:
                self._first_sync(feed)
        except _LinkDown:
            raise
        except JobtapError as exc:
            self._fail(feed, exc)
        except redis.RedisError as exc:
            self._fail(feed, translate_error(exc, next(iter(feed.targets.values())).site.url))

    def _site_call(self, name: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except TRANSIENT as exc:
            raise _LinkDown(self.site_link[name], exc) from exc

    def _first_sync(self, feed: Feed) -> None:
        """List then watch: note the streams' positions, read the records, go live."""
        feed.start_over()
        initial: list[tuple[Change, str, Ref]] = []
        for name, target in feed.targets.items():
            self._note_positions(feed, name, target)
            cache = self.caches[name]
            refs = self._site_call(name, partial(target.listing, cache))
            # a change made from a hash leaves the native record out: not read
            records = self._site_call(name, partial(cache.read, refs, native=False))
            initial += feed.snapshot(name, refs, records)
        feed.deliver_snapshot(initial)

    def _note_positions(self, feed: Feed, name: str, target: Target) -> None:
        """Each stream's newest entry: what the snapshot covers, and the epoch to
        follow (that of the newest event)."""
        r = target.site.redis
        for stream in target.streams():
            try:
                pos, epoch = self._site_call(name, partial(newest_entry, r, stream))
            except redis.exceptions.NoPermissionError:
                # e.g. a user's node events: resyncs re-read the hashes only
                feed.note_position(name, stream, None)
                continue
            feed.note_position(name, stream, pos, epoch)
        feed.settle_epoch(name)

    def _resync_now(self, feed: Feed) -> None:
        feed.mark_gap()
        self._sync(feed)

    def _resync(self, feed: Feed) -> None:
        """Deliver what ``feed`` missed: from the streams, else from the records."""
        feed.begin_resync()
        plan: list[Planned] = []
        positions: list[StreamPosition] = []
        by_state = False
        for name, target in feed.targets.items():
            site_plan, site_by_state = self._catch_up_site(feed, name, target, positions)
            plan += site_plan
            by_state |= site_by_state
        feed.by_state = False
        if by_state:  # in turns, live reading in between, finals first
            feed.state_resyncs += 1
            feed.queue_plan(plan, positions)
            self._inbox.extend([feed] * feed.queued)
        else:
            feed.take_positions(positions, in_order=True)
            feed.deliver_plan(plan)

    def _catch_up_site(
        self,
        feed: Feed,
        name: str,
        target: Target,
        positions: list[StreamPosition],
    ) -> tuple[list[Planned], bool]:
        """What ``feed`` missed of one site, and (into ``positions``) where each
        stream was read up to.  If Redis lost data (seen before the reading, or
        by the scan: a new epoch may begin while it reads), the feed first stops
        taking its finished jobs as boundaries, then reads again, and awaits the
        objects whose record is gone instead of reporting them removed."""
        lost = self._lost_data(feed, name, target)
        if feed.by_state and not lost:
            reading = self._read_moved(feed, name, target, positions)
            if reading is not None:
                return self._plan_site(feed, name, target, reading, True), True
        for _ in range(3):
            if lost:
                feed.new_epoch(name)
            refs, current, news = self._read_records(feed, name, target)
            scans = self._scan_streams(feed, name, target)
            if lost or not _epoch_moved(feed, name, scans):
                break
            lost = True  # a new epoch began while reading: read again as after a loss
        reading = SiteReading(refs, current, _take_scans(feed, name, scans, positions), news)
        if lost:
            feed.await_again(reading.gone())
        by_state = feed.by_state
        if not by_state and self.max_lag is not None:
            why = self._too_far(scans)
            if why:
                log.info("jobtap: a subscription missed %s: catching up by state", why)
                by_state = True
        return self._plan_site(feed, name, target, reading, by_state), by_state

    def _read_moved(
        self, feed: Feed, name: str, target: Target, positions: list[StreamPosition]
    ) -> SiteReading | None:
        """A catch-up by state's reading when the streams hold all it missed: the
        records of the objects that moved only, read after the scan (a record may
        then be newer than the scan: the positions taken after such a catch-up do
        not count as a prefix, :meth:`Feed.take_positions`).  ``None`` if a
        stream does not go back far enough (trimmed, or past the scan's limit) or
        a new epoch began: then every object's record is read."""
        scans = self._scan_streams(feed, name, target)
        if not all(scan.complete for scan in scans.values()) or _epoch_moved(feed, name, scans):
            return None
        known = feed.known_refs(name)
        missed = _take_scans(feed, name, scans, positions)
        refs: dict[str, Ref] = {}
        for prefix, entries in missed.items():
            ref = known.get(prefix)
            if ref is None:
                event = entries[-1].event
                ref = Ref(name, event["kind"], event["object_id"], event.get("user"))
            refs[prefix] = ref
        order = list(refs)
        cache = self.caches[name]
        records = self._site_call(name, lambda: cache.read([refs[p] for p in order], native=False))
        return SiteReading(refs, dict(zip(order, records, strict=True)), missed)

    def _too_far(self, scans: dict[str, Scan]) -> str | None:
        """Whether a catch-up is past the bound: more than ``queue_limit`` missed
        events.  (Not how long ago they were written: a subscriber away for a
        failover's few seconds replays what it missed, as a fast one can.)"""
        count = sum(len(scan.missed) for scan in scans.values())
        return f"{count} events" if count > self.queue_limit else None

    def _lost_data(self, feed: Feed, name: str, target: Target) -> bool:
        """Whether Redis lost data of the site since the feed last looked: a stream
        whose newest event is older than what was covered (Redis went back), that
        is empty though it held events, or whose newest event is of another epoch
        than the last one seen in it."""
        r = target.site.redis
        lost = False
        for stream in target.streams():
            covered = feed.position(name, stream)
            if covered is None:
                continue  # not readable for this user
            seen = feed.stream_epoch(name, stream)
            newest, epoch = self._site_call(name, partial(newest_entry, r, stream))
            went_back = parse_sid(newest) < parse_sid(covered)
            if went_back:
                feed.note_position(name, stream, newest, epoch)  # scan from what is there
            if went_back or (seen is not None and epoch != seen):
                lost = True
        return lost

    def _read_records(
        self, feed: Feed, name: str, target: Target
    ) -> tuple[dict[str, Ref], dict[str, dict[str, Any] | None], frozenset[str]]:
        """The objects to look at (those known, the listing now, and the jobs that
        ended since the feed's positions), their records, and which of them ended
        since (news, though the feed never knew them: their streams may have let
        go of all their events)."""
        cache = self.caches[name]
        refs = feed.known_refs(name)
        listing = self._site_call(name, partial(target.listing, cache))
        ended = self._site_call(
            name, partial(target.ended_since, cache, partial(feed.position, name))
        )
        for ref in listing + ended:
            p = object_prefix(name, ref.kind, ref.oid)
            if not feed.finished(p):
                refs.setdefault(p, ref)
        news = frozenset(object_prefix(name, ref.kind, ref.oid) for ref in ended)
        order = list(refs)
        records = self._site_call(name, lambda: cache.read([refs[p] for p in order], native=False))
        return refs, dict(zip(order, records, strict=True)), news

    def _scan_streams(self, feed: Feed, name: str, target: Target) -> dict[str, Scan]:
        """Each readable stream of the target scanned back for what ``feed`` missed."""
        r = target.site.redis
        scans: dict[str, Scan] = {}
        for stream in target.streams():
            pos = feed.position(name, stream)
            if pos is None:
                continue  # not readable for this user
            scans[stream] = self._site_call(
                name,
                partial(
                    scan_back, r, stream, stop_at=pos, processed=feed.verdict, limit=self.scan_limit
                ),
            )
        return scans

    def _plan_site(
        self, feed: Feed, name: str, target: Target, reading: SiteReading, by_state: bool
    ) -> list[Planned]:
        plan: list[Planned] = []
        planner = plan_state if by_state else plan_object
        for prefix in reading.prefixes():
            if feed.finished(prefix):
                continue
            plan += planner(
                feed.versions,
                name,
                prefix,
                record=reading.current.get(prefix),
                missed=reading.missed.get(prefix, []),
                ref=reading.refs.get(prefix),
                named=prefix in target.jobs or prefix in reading.news,
            )
        return plan

    def _recover(self, link: Link, exc: BaseException) -> None:
        if self._stop.is_set():
            return
        old_id = link.run_id
        log.warning(
            "jobtap: lost the pub/sub connection to %s (%s); reconnecting",
            safe_url(link.where),
            exc or type(exc).__name__,
        )
        link.drop()
        for key, feeds in self.by_channel.items():
            if key[0] is not link:
                continue
            for feed in feeds:
                if not feed.closed:
                    feed.channel_lost(key)
                    self.pending_on.setdefault(key, set()).add(feed)
        started = time.monotonic()
        initial, cap = self.backoff
        try:
            for attempt in reconnecting(
                self._stop, initial=initial, cap=cap, on_retry=partial(_say_tls_failure, link)
            ):
                with attempt:
                    link.connect()
        except redis.AuthenticationError as auth:  # revoked: end its subscriptions, loudly
            error = translate_error(auth, link.url)
            for (lk, _ch), feeds in list(self.by_channel.items()):
                if lk is link:
                    for feed in list(feeds):
                        if not feed.closed:
                            self._fail(feed, error)
            return
        except TRANSIENT:
            return  # stopping
        took = time.monotonic() - started
        if isinstance(exc, _ShardChanged):
            cause = f"{exc}: now on {link.where}"
        elif old_id and link.run_id and old_id != link.run_id:
            cause = "Redis restarted"
        elif old_id and link.run_id:
            cause = (
                "Redis closed the connection: most likely this client fell behind and hit "
                "the pub/sub output-buffer limit (callbacks too slow?)"
            )
            if self.max_lag is not None:  # far behind: catch up by state
                for key, feeds in self.pending_on.items():
                    if key[0] is link:
                        for feed in feeds:
                            feed.by_state = True
        else:
            cause = "connection lost"
        log.warning(
            "jobtap: reconnected to %s after %.1f s (%s); resynchronising %d subscription(s)",
            safe_url(link.where),
            took,
            cause,
            len({f for feeds in self.pending_on.values() for f in feeds}),
        )


def _say_tls_failure(link: Link, state: RetryCallState) -> None:
    """A failed TLS handshake will not mend by itself (a certificate expired, a
    CA changed): say so at each attempt instead of retrying in silence."""
    outcome = state.outcome
    exc = outcome.exception() if outcome is not None and outcome.failed else None
    if exc is not None and is_tls_failure(exc):
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("jobtap: %s; trying again in %.1f s", describe_error(exc, link.url), wait)
