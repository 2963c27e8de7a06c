"""Subscriptions and the one background thread per client that serves them.

The dispatcher thread owns one pub/sub connection per Redis server (a *link*),
shared by every subscription of the client; channels are reference-counted.  It
reads messages, routes each to the subscriptions that want it and runs their
callbacks, in order, on this thread.

List-then-watch, per subscription:

1. SUBSCRIBE to its channels and wait for Redis to confirm;
2. note each relevant stream's newest entry id (the *sync position*), then read
   the current records (HGETALL) and deliver them as ``initial``;
3. deliver each channel event whose version is exactly one more than the last one
   delivered for that object; drop older or equal ones (duplicates of what the
   snapshot already had).

A gap (the version jumped, the connection dropped, Redis cut a slow subscriber off
at its output-buffer limit) triggers a *resync*: re-read the hashes, then scan the
streams backwards for the events missed since the last processed one (see
:mod:`jobtap.backfill`) and deliver them in order; what the streams no longer hold is
delivered as one ``resync`` change built from the hash.  A job whose hash expired
meanwhile is looked up in the streams, so its ``final`` is never missed.
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
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis
from redis.client import PubSub

from .backfill import Entry, newest_id, parse_sid, scan_back
from .cache import Cache, Ref
from .connection import TRANSIENT, Site, SiteConfig, make_redis, reconnecting, translate_error
from .dedupe import LRUSet
from .errors import JobtapError, RedisUnavailable
from .events import FINAL, NEW, REMOVED, UPDATE
from .records import INITIAL, RESYNC, Change, object_prefix, parse_event_id
from .schema import JOB, NODE, QUEUE

log = logging.getLogger("jobtap.sdk")

Callback = Callable[[Change], Any]

FINISHED_MEMORY = 100_000  # finished objects remembered per subscription
_PENDING, _SYNCING, _ACTIVE, _ENDED = "pending", "syncing", "active", "ended"


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class Target:
    """What a subscription watches on one site."""

    site: Site
    kinds: frozenset[str]
    all_jobs: bool = False
    users: frozenset[str] = frozenset()
    jobs: dict[str, Ref] = field(default_factory=dict)  # object prefix -> job

    @property
    def only_jobs(self) -> bool:
        """Watching named jobs only: the subscription ends after their finals."""
        return self.kinds == {JOB} and not self.all_jobs and not self.users

    def channels(self) -> set[str]:
        k = self.site.keys
        out: set[str] = set()
        if JOB in self.kinds:
            if self.all_jobs:
                out.add(k.all_channel)
            else:
                out.update(k.user_channel(u) for u in self.users)
                out.update(k.user_channel(ref.user) for ref in self.jobs.values())
        if NODE in self.kinds or QUEUE in self.kinds:
            out.add(k.nodes_channel)
        return out

    def streams(self) -> set[str]:
        """The streams holding this target's events (in its channels' order)."""
        k = self.site.keys
        out: set[str] = set()
        if JOB in self.kinds:
            if self.all_jobs:
                out.add(k.events)
            else:
                out.update(k.user_events(u) for u in self.users)
                out.update(k.user_events(ref.user) for ref in self.jobs.values())
        if NODE in self.kinds or QUEUE in self.kinds:
            out.add(k.events)
        return out

    def wants(self, event: dict[str, Any], prefix: str) -> bool:
        kind = event.get("kind", JOB)
        if kind not in self.kinds:
            return False
        if kind != JOB or self.all_jobs:
            return True
        return event.get("user") in self.users or prefix in self.jobs

    def listing(self, cache: Cache) -> list[Ref]:
        """The objects to snapshot: named jobs, live jobs of the users, every job
        of the site, every node and queue."""
        name = self.site.name
        refs: list[Ref] = list(self.jobs.values())
        if JOB in self.kinds:
            if self.all_jobs:
                refs += [Ref(name, JOB, jid, u) for jid, u in cache.owners().items()]
            for user in sorted(self.users):
                refs += [Ref(name, JOB, jid, user) for jid in cache.live_job_ids(user)]
        for kind in (NODE, QUEUE):
            if kind in self.kinds:
                refs += [Ref(name, kind, n) for n in cache.names(kind)]
        return refs


class Subscription:
    """A live subscription made by :meth:`Client.subscribe`.

    Its callback runs on the client's background thread: first with the current
    record of every watched object (``initial``), then with every change, in
    version order, once.  A subscription to named jobs ends by itself after the
    last one's ``final`` change.  Use it as a context manager, or call
    :meth:`close`.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        callback: Callback,
        targets: list[Target],
        *,
        attrs: Iterable[str] | None = None,
        initial: bool = True,
    ):
        self._d = dispatcher
        self._callback = callback
        self._targets = {t.site.name: t for t in targets}
        self._attrs = frozenset(attrs) if attrs is not None else None
        self._initial = initial
        self._state = _PENDING
        self._synced = False
        self._seen: dict[str, int] = {}  # object prefix -> last version processed
        self._refs: dict[str, Ref] = {}  # object prefix -> how to re-read it
        self._removed: set[str] = set()
        self._finished = LRUSet(FINISHED_MEMORY)
        # (site, stream) -> sync position; None: the stream is not readable
        self._positions: dict[tuple[str, str], str | None] = {}
        self._channels: set[tuple[Link, str]] = set()
        self._waiting: set[tuple[Link, str]] = set()
        self._ready = threading.Event()
        self._ended = threading.Event()
        self.error: JobtapError | None = None
        self._on_end: Callable[[], Any] | None = None  # for jobtap.aio
        self.resyncs = 0
        """How many times this subscription resynchronised after a gap."""
        self.delivered = 0
        """How many changes its callback was given."""

    # -- public ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the subscription: no callback runs for it after this returns
        (unless called from another thread while its callback is running)."""
        if self._state == _ENDED:
            return
        self._state = _ENDED
        self._d.submit(lambda: self._d.remove(self))

    @property
    def closed(self) -> bool:
        """True once closed, or ended by itself after its jobs' final changes."""
        return self._state == _ENDED

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Block until the subscription ends; False on timeout."""
        return self._ended.wait(timeout)

    @property
    def jobs(self) -> frozenset[str]:
        """The named jobs still watched (their final change not yet delivered)."""
        return frozenset(
            ref.oid
            for t in self._targets.values()
            for prefix, ref in t.jobs.items()
            if prefix not in self._finished
        )

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Subscription {self._state} sites={sorted(self._targets)}>"

    # -- delivery (dispatcher thread) ---------------------------------------------------------
    def _wanted_by_attrs(self, change: Change) -> bool:
        if self._attrs is None or change.type != UPDATE:
            return True  # initial, new, state, final, removed and resync always go out
        for name in change.changes:
            if name in self._attrs or name.partition(".")[0] in self._attrs:
                return True
        return False

    def _deliver(self, change: Change, prefix: str, ref: Ref | None) -> None:
        """Record the change as processed, run the callback, end the object if final."""
        if self._state == _ENDED:
            return
        self._seen[prefix] = change.version
        if ref is not None:
            self._refs[prefix] = ref
        if change.type == REMOVED:
            self._removed.add(prefix)
        else:
            self._removed.discard(prefix)
        if self._wanted_by_attrs(change):
            self.delivered += 1
            try:
                self._callback(change)
            except Exception:
                log.exception("jobtap: a subscription callback raised on %s", change.id)
        if change.final or (change.type == REMOVED and change.kind == JOB):
            self._finish(prefix)

    def _finish(self, prefix: str) -> None:
        self._seen.pop(prefix, None)
        self._refs.pop(prefix, None)
        self._removed.discard(prefix)
        self._finished.add(prefix)
        targets = self._targets.values()
        if all(t.only_jobs for t in targets) and all(
            p in self._finished for t in targets for p in t.jobs
        ):
            if self._state != _ENDED:
                self._state = _ENDED
                self._d.remove(self)

    def _verdict(self, entry: Entry) -> bool | None:
        """For a stream scan: True if processed, False if missed, None if irrelevant."""
        prefix = entry.prefix
        if prefix in self._finished:
            return True
        last = self._seen.get(prefix)
        if last is not None:
            if prefix in self._removed and entry.version <= last:
                return None  # may be an old life of a node that came back
            return entry.version <= last
        target = self._targets.get(entry.event.get("site"))
        if target is None or not target.wants(entry.event, prefix):
            return None
        return False


class LinkDown(Exception):
    def __init__(self, link: Link, exc: BaseException):
        super().__init__(str(exc))
        self.link = link
        self.exc = exc


class Link:
    """One pub/sub connection to one Redis server."""

    def __init__(self, config: SiteConfig):
        self.config = config
        self.client = make_redis(config, pubsub=True)
        self.pubsub: PubSub | None = None
        self.refs: dict[str, int] = {}
        self.confirmed: set[str] = set()
        self.inflight: deque[str] = deque()  # SUBSCRIBEs sent, not answered yet (in order)
        self.run_id: str | None = None

    @property
    def url(self) -> str:
        return self.config.url

    def sock(self) -> socket.socket | None:
        conn = self.pubsub.connection if self.pubsub is not None else None
        return getattr(conn, "_sock", None) if conn is not None else None

    def _server_id(self) -> str | None:
        try:
            return _s(self.client.info("server").get("run_id", "")) or None
        except redis.ResponseError:  # INFO not allowed for this user
            return None

    def connect(self) -> None:
        """(Re)connect and subscribe every referenced channel."""
        self.drop()
        self.client.ping()
        self.run_id = self._server_id()
        for channel in [c for c, n in self.refs.items() if n > 0]:
            self.subscribe(channel)

    def subscribe(self, channel: str) -> None:
        """SUBSCRIBE one channel per command, so that a refusal (an ACL error,
        which does not name the channel) is matched to its channel by order."""
        if self.pubsub is None:
            if self.run_id is None:
                self.run_id = self._server_id()
            self.pubsub = self.client.pubsub()
        self.inflight.append(channel)
        self.pubsub.subscribe(channel)

    def answered(self, channel: str) -> None:
        try:
            self.inflight.remove(channel)
        except ValueError:
            pass

    def unsubscribe(self, channel: str) -> None:
        self.confirmed.discard(channel)
        if self.pubsub is not None:
            self.pubsub.unsubscribe(channel)

    def drop(self) -> None:
        self.confirmed.clear()
        self.inflight.clear()
        if self.pubsub is not None:
            try:
                self.pubsub.close()
            except Exception:  # the connection is gone anyway
                pass
            self.pubsub = None

    def close(self) -> None:
        self.drop()
        self.client.close()


class Dispatcher:
    """The client's background thread: pub/sub reading, routing, callbacks,
    reconnects and resyncs."""

    def __init__(
        self,
        sites: dict[str, Site],
        *,
        backoff: tuple[float, float] = (0.05, 5.0),
        scan_limit: int = 200_000,
    ):
        self.sites = sites
        self.caches = {name: Cache(site) for name, site in sites.items()}
        self.backoff = backoff
        self.scan_limit = scan_limit
        links: dict[tuple, Link] = {}
        self.site_link: dict[str, Link] = {}
        for name, site in sites.items():
            server = site.config.server
            if server not in links:
                links[server] = Link(site.config)
            self.site_link[name] = links[server]
        self.links = list(links.values())
        self.subs: set[Subscription] = set()
        self.by_channel: dict[tuple[Link, str], set[Subscription]] = {}
        self.pending_on: dict[tuple[Link, str], set[Subscription]] = {}
        self._commands: deque[tuple[Callable[[], Any], Future]] = deque()
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

    def submit(self, fn: Callable[[], Any]) -> Future:
        """Run ``fn`` on the dispatcher thread.  From a callback (on that thread)
        it runs once the current batch of messages is handled."""
        fut: Future = Future()
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

    def add(self, sub: Subscription, timeout: float) -> None:
        """Start ``sub``; unless called from a callback, wait until its initial
        records were delivered."""
        self.start()
        self.submit(lambda: self._add(sub))
        if self.in_thread:
            return
        if not sub._ready.wait(timeout):
            sub.close()
            urls = ", ".join(sorted({_safe(link.url) for link, _ in sub._channels}))
            raise RedisUnavailable(
                f"the subscription was not confirmed by Redis at {urls} within {timeout:g} s"
            )
        if sub.error is not None:
            raise sub.error

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
        for sub in list(self.subs):
            sub._state = _ENDED
            if not sub._ended.is_set():
                sub._ended.set()
                if sub._on_end is not None:
                    sub._on_end()

    # -- dispatcher thread ----------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._run_commands()
                self._poll()
            except LinkDown as down:
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
            except LinkDown as down:
                fut.set_result(None)
                raise down
            except Exception as exc:
                fut.set_exception(exc)

    def _poll(self) -> None:
        live = [(link, link.sock()) for link in self.links if link.pubsub is not None]
        socks = [s for _, s in live if s is not None]
        # messages may wait in a parser's buffer, which select() does not see
        wait = 0.0 if self._backlog or self._commands else 1.0
        self._backlog = False
        try:
            select.select([self._wake_r, *socks], [], [], wait)
        except (OSError, ValueError):
            pass  # a socket closed under us: the read below says why
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        for link, _ in live:
            self._drain(link)

    def _drain(self, link: Link, budget: int = 10_000) -> None:
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
                raise LinkDown(link, exc) from exc
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
        self._backlog = True  # budget spent: come back at once

    def _handle(self, link: Link, msg: dict) -> None:
        kind = msg["type"]
        channel = _s(msg["channel"]) if msg.get("channel") is not None else ""
        if kind == "message":
            subs = self.by_channel.get((link, channel))
            if not subs:
                return
            data = msg["data"]
            try:
                event = orjson.loads(data)
                prefix, _ = parse_event_id(event["id"])
                version = int(event["version"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                log.warning("jobtap: ignoring a malformed event on %s", channel)
                return
            change = Change.from_event(event, data)
            for sub in tuple(subs):
                if sub._state == _ACTIVE:
                    self._on_event(sub, event, change, prefix, version)
        elif kind == "subscribe":
            link.answered(channel)
            link.confirmed.add(channel)
            for sub in tuple(self.pending_on.pop((link, channel), ())):
                sub._waiting.discard((link, channel))
                if not sub._waiting and sub._state in (_PENDING, _SYNCING):
                    self._sync(sub)

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
        for sub in failed:
            self._fail(sub, error)

    def _on_event(
        self, sub: Subscription, event: dict, change: Change, prefix: str, version: int
    ) -> None:
        target = sub._targets.get(event.get("site"))
        if target is None or prefix in sub._finished or not target.wants(event, prefix):
            return
        last = sub._seen.get(prefix)
        if last is not None and version <= last:
            if not (prefix in sub._removed and event.get("type") == NEW):
                return  # already delivered (or covered by the snapshot)
            last = 0  # a node or queue that came back
        if version != (last or 0) + 1:
            log.info("jobtap: %s arrived after version %s: resynchronising", change.id, last)
            self._resync_now(sub)
            return
        kind = event.get("kind", JOB)
        ref = Ref(target.site.name, kind, event["object_id"], event.get("user"))
        sub._deliver(change, prefix, ref)

    # -- subscription bookkeeping -----------------------------------------------------------
    def _add(self, sub: Subscription) -> None:
        if sub._state == _ENDED:
            sub._ready.set()
            sub._ended.set()
            return
        self.subs.add(sub)
        for name, target in sub._targets.items():
            link = self.site_link[name]
            for ch in target.channels():
                sub._channels.add((link, ch))
        to_subscribe: list[tuple[Link, str]] = []
        for link, ch in sub._channels:
            self.by_channel.setdefault((link, ch), set()).add(sub)
            link.refs[ch] = link.refs.get(ch, 0) + 1
            if ch not in link.confirmed:
                sub._waiting.add((link, ch))
                self.pending_on.setdefault((link, ch), set()).add(sub)
                if link.refs[ch] == 1:
                    to_subscribe.append((link, ch))
        for link, ch in to_subscribe:
            try:
                link.subscribe(ch)
            except TRANSIENT as exc:
                raise LinkDown(link, exc) from exc
        if not sub._waiting:
            self._sync(sub)

    def remove(self, sub: Subscription) -> None:
        """Forget ``sub`` and release its channels (dispatcher thread)."""
        sub._state = _ENDED
        if sub in self.subs:
            self.subs.discard(sub)
            for link, ch in sub._channels:
                subs = self.by_channel.get((link, ch))
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self.by_channel[(link, ch)]
                waiting = self.pending_on.get((link, ch))
                if waiting is not None:
                    waiting.discard(sub)
                n = link.refs.get(ch, 0) - 1
                if n <= 0:
                    link.refs.pop(ch, None)
                    try:
                        link.unsubscribe(ch)
                    except TRANSIENT:
                        pass  # the reconnect will not subscribe it again
                else:
                    link.refs[ch] = n
        sub._ready.set()
        if not sub._ended.is_set():
            sub._ended.set()
            if sub._on_end is not None:
                sub._on_end()

    def _fail(self, sub: Subscription, error: JobtapError) -> None:
        if sub._synced:
            log.error("jobtap: a subscription ended: %s", error)
        sub.error = error
        self.remove(sub)

    # -- synchronising ------------------------------------------------------------------------
    def _sync(self, sub: Subscription) -> None:
        try:
            if sub._synced:
                self._resync(sub)
            else:
                self._first_sync(sub)
        except LinkDown:
            raise
        except JobtapError as exc:
            self._fail(sub, exc)
        except redis.RedisError as exc:
            self._fail(sub, translate_error(exc, next(iter(sub._targets.values())).site.url))

    def _site_call(self, name: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except TRANSIENT as exc:
            raise LinkDown(self.site_link[name], exc) from exc

    def _first_sync(self, sub: Subscription) -> None:
        initial: list[tuple[Change, str, Ref]] = []
        sub._seen.clear()  # a first sync cut short by a disconnect starts again
        sub._refs.clear()
        for name, target in sub._targets.items():
            cache = self.caches[name]
            r = target.site.redis
            for stream in target.streams():
                try:
                    pos = self._site_call(name, lambda s=stream, rr=r: newest_id(rr, s))
                except redis.exceptions.NoPermissionError:
                    pos = None  # e.g. a user's node events: resyncs re-read the hashes only
                sub._positions[(name, stream)] = pos
            refs = self._site_call(name, lambda t=target, c=cache: t.listing(c))
            records = self._site_call(name, lambda c=cache, rf=refs: c.read(rf))
            for ref, rec in zip(refs, records):
                prefix = object_prefix(name, ref.kind, ref.oid)
                if prefix in sub._seen:
                    continue
                if rec is None:
                    if prefix in target.jobs:
                        sub._seen[prefix] = 0  # not collected yet: wait for its version 1
                        sub._refs[prefix] = ref
                    continue
                final = bool(rec.get("final"))
                if final and prefix not in target.jobs:
                    continue  # a finished job of the site listing: nothing will follow
                sub._seen[prefix] = int(rec.get("version") or 0)
                sub._refs[prefix] = ref
                change = Change.synthesize(INITIAL, ref.kind, name, rec, final=final)
                initial.append((change, prefix, ref))
        sub._synced = True
        sub._state = _ACTIVE
        for change, prefix, ref in initial:
            if sub._initial:
                sub._deliver(change, prefix, ref)
            elif change.final:
                sub._finish(prefix)
        sub._ready.set()

    def _resync_now(self, sub: Subscription) -> None:
        sub._state = _SYNCING
        self._sync(sub)

    def _resync(self, sub: Subscription) -> None:
        """Deliver what ``sub`` missed: from the streams, else from the hashes."""
        sub.resyncs += 1
        sub._state = _SYNCING
        plan: list[tuple[tuple[int, int], int, Change, str, Ref | None]] = []
        for name, target in sub._targets.items():
            plan += self._resync_site(sub, name, target)
        sub._state = _ACTIVE
        plan.sort(key=lambda p: (p[0], p[1]))
        delivered = 0
        for _, _, change, prefix, ref in plan:
            if sub._state == _ENDED:
                break
            last = sub._seen.get(prefix)
            if prefix in sub._finished:
                continue
            if last is not None and change.version <= last and change.type != RESYNC:
                if not (prefix in sub._removed and change.type == NEW):
                    continue
            sub._deliver(change, prefix, ref)
            delivered += 1
        log.debug("jobtap: resync delivered %d change(s)", delivered)

    def _resync_site(self, sub: Subscription, name: str, target: Target) -> list:
        cache = self.caches[name]
        r = target.site.redis
        # 1. current hashes first: the streams, read after, hold at least their versions
        refs = {p: ref for p, ref in sub._refs.items() if ref.site == name}
        for ref in self._site_call(name, lambda: target.listing(cache)):
            p = object_prefix(name, ref.kind, ref.oid)
            if p not in sub._finished:
                refs.setdefault(p, ref)
        order = list(refs)
        records = self._site_call(name, lambda: cache.read([refs[p] for p in order]))
        current = dict(zip(order, records))
        # 2. the missed events, from every stream of the target
        missed: dict[str, dict[int, Entry]] = {}
        for stream in target.streams():
            pos = sub._positions.get((name, stream), "0-0")
            if pos is None:
                continue  # not readable for this user
            scan = self._site_call(
                name,
                lambda s=stream, p=pos: scan_back(
                    r, s, stop_at=p, processed=sub._verdict, limit=self.scan_limit
                ),
            )
            if scan.newest is not None:
                sub._positions[(name, stream)] = scan.newest
            for e in scan.missed:
                missed.setdefault(e.prefix, {})[e.version] = e
        # 3. per object: the events if they follow on, else the hash
        plan: list = []
        late = (1 << 62, 0)
        for prefix in set(missed) | set(current):
            if prefix in sub._finished:
                continue
            last = sub._seen.get(prefix)
            rec = current.get(prefix)
            if prefix in sub._removed and rec is not None:
                last = None  # a node or queue that came back: start again from its record
                sub._seen.pop(prefix, None)
                missed.pop(prefix, None)
            base = last or 0
            entries = [missed[prefix][v] for v in sorted(missed.get(prefix, {})) if v > base]
            follows = [e.version for e in entries] == list(range(base + 1, base + 1 + len(entries)))
            top = base
            if entries and (follows or rec is None):
                for e in entries:
                    change = Change.from_json(e.json, stream_id=e.sid)
                    ref = Ref(name, change.kind, change.object_id, change.user)
                    plan.append((parse_sid(e.sid), e.version, change, prefix, ref))
                top = entries[-1].version
                if rec is None and any(e.type == FINAL for e in entries):
                    continue
            if rec is not None:
                version = int(rec.get("version") or 0)
                if version > top:
                    final = bool(rec.get("final"))
                    kind = refs[prefix].kind
                    if last is None and final and prefix not in target.jobs:
                        continue  # finished before we ever knew it, and the streams forgot it
                    change = Change.synthesize(RESYNC, kind, name, rec, final=final)
                    plan.append((late, version, change, prefix, refs[prefix]))
            elif last and prefix in refs and not entries:
                # known, now gone, and the streams know nothing: expired or removed
                ref = refs[prefix]
                gone = {"id": ref.oid, "user": ref.user, "version": last + 1}
                change = Change.synthesize(REMOVED, ref.kind, name, gone, final=ref.kind == JOB)
                plan.append((late, last + 1, change, prefix, ref))
        return plan

    def _recover(self, link: Link, exc: BaseException) -> None:
        if self._stop.is_set():
            return
        old_id = link.run_id
        log.warning(
            "jobtap: lost the pub/sub connection to %s (%s); reconnecting",
            _safe(link.url),
            exc or type(exc).__name__,
        )
        link.drop()
        for (lk, ch), subs in self.by_channel.items():
            if lk is not link:
                continue
            for sub in subs:
                if sub._state == _ENDED:
                    continue
                if sub._state == _ACTIVE:
                    sub._state = _SYNCING
                sub._waiting.add((link, ch))
                self.pending_on.setdefault((link, ch), set()).add(sub)
        started = time.monotonic()
        initial, cap = self.backoff
        try:
            for attempt in reconnecting(self._stop, initial=initial, cap=cap):
                with attempt:
                    link.connect()
        except redis.AuthenticationError as auth:  # revoked: end its subscriptions, loudly
            error = translate_error(auth, link.url)
            for (lk, _ch), subs in list(self.by_channel.items()):
                if lk is link:
                    for sub in list(subs):
                        if sub._state != _ENDED:
                            self._fail(sub, error)
            return
        except TRANSIENT:
            return  # stopping
        took = time.monotonic() - started
        if old_id and link.run_id and old_id != link.run_id:
            cause = "Redis restarted"
        elif old_id and link.run_id:
            cause = (
                "Redis closed the connection: most likely this client fell behind and hit "
                "the pub/sub output-buffer limit (callbacks too slow?)"
            )
        else:
            cause = "connection lost"
        log.warning(
            "jobtap: reconnected to %s after %.1f s (%s); resynchronising %d subscription(s)",
            _safe(link.url),
            took,
            cause,
            len({s for ch_subs in self.pending_on.values() for s in ch_subs}),
        )


def _safe(url: str) -> str:
    from .connection import safe_url

    return safe_url(url)
