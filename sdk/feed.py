"""One subscription as the dispatcher serves it: what it watches, what it has
delivered (per object, a :class:`~jobtap.sequence.VersionSequence`), which
channels it waits for, and where it is in its life:

    pending --(channels confirmed, snapshot)--> active --(gap)--> syncing --> active
       any state --(close, error, last named job final)--> ended

Per site it follows one epoch (see :mod:`jobtap.events`): the epoch of the newest
event its streams hold.  An event of another epoch is a gap like any other, and
the catch-up that follows finds that Redis lost data (a stream went back, or a
new epoch began) and treats it like a Kubernetes watch's "410 Gone": what it
knew of the old epoch no longer decides what is new, objects whose record is
gone are awaited in the new epoch instead of being reported removed, and
finished jobs of the site or a user's listing are followed again (in the new
epoch: their events of the epoch their final was of were delivered, and stay so).

Every method runs on the dispatcher thread, except :meth:`Feed.stop`,
:meth:`Feed.add_end_callback` and the read-only properties, which any thread may use.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any

from .backfill import Entry
from .cache import Ref
from .catchup import Planned
from .entries import parse_sid
from .errors import JobtapError
from .events import INITIAL, REMOVED, RESYNC, UPDATE
from .records import Change, object_prefix
from .schema import JOB
from .sequence import Step, VersionSequence
from .target import Target

if TYPE_CHECKING:
    from .link import Link

log = logging.getLogger("jobtap.sdk")

Callback = Callable[[Change], Any]
ChannelKey = tuple["Link", str]
"""A channel on one pub/sub connection."""

FINISHED_MEMORY = 100_000  # finished objects remembered per subscription

StreamPosition = tuple[str, str, str, str | None]
"""(site, stream, position, epoch of the event there) that a catch-up read up to."""


class Phase(Enum):
    PENDING = "pending"  # waiting for Redis to confirm its channels
    SYNCING = "syncing"  # reading the snapshot, or catching up after a gap
    ACTIVE = "active"  # delivering channel events as they come
    ENDED = "ended"


class Feed:
    """The state of one subscription, and what happens to it."""

    def __init__(
        self,
        callback: Callback,
        targets: Iterable[Target],
        *,
        attrs: Iterable[str] | None,
        initial: bool,
        release: Callable[[Feed], None],
    ):
        self._callback = callback
        self._targets = {t.site.name: t for t in targets}
        self._attrs = frozenset(attrs) if attrs is not None else None
        self._initial = initial
        self._release = release  # the dispatcher's: drop this feed and its channels
        self._phase = Phase.PENDING
        self._synced = False
        self._versions: VersionSequence[Ref] = VersionSequence()
        self._finished = Finished(FINISHED_MEMORY)
        # (site, stream) -> sync position; None: the stream is not readable
        self._positions: dict[tuple[str, str], str | None] = {}
        # (site, stream) -> the epoch of the event at its position
        self._stream_epochs: dict[tuple[str, str], str] = {}
        self._epochs: dict[str, str | None] = {}  # site -> the epoch followed
        self._channels: frozenset[ChannelKey] = frozenset()
        self._waiting: set[ChannelKey] = set()
        self._ready = threading.Event()
        self._ended = threading.Event()
        self._end_lock = threading.Lock()
        self._on_end: list[Callable[[], object]] = []
        self.error: JobtapError | None = None
        self.resyncs = 0
        self.delivered = 0
        # What waits for the callback (dispatcher with a bound): a catch-up by
        # state's changes, then channel events with the time each was read.
        self._plan: deque[Planned] = deque()
        # when the first channel event was passed over while a catch-up's changes
        # were delivered (None: none was)
        self.behind_since: float | None = None
        self._final_waiting = False  # one of those events was a final
        self._live: deque[tuple[float, Mapping[str, Any], Change, str]] = deque()
        # A catch-up by state delivers out of stream order, in turns: the streams'
        # positions it read up to count as covered only once its last change is
        # delivered (until then a rescan goes back to the old ones and passes over
        # what was delivered instead of stopping at it).
        self._plan_positions: list[StreamPosition] = []
        self._planned: dict[str, tuple[str, int]] = {}  # prefix -> (epoch, version) queued
        self._carried: dict[str, Planned] = {}  # a cut-short catch-up's undelivered changes
        self._in_order = True  # what was delivered since the positions is a prefix of the streams
        self.queue_peak = 0
        self.by_state = False  # the next resync catches up by state
        self.state_resyncs = 0
        self.skipped = 0  # channel events not called back for: caught up by state instead

    # -- read by anyone ---------------------------------------------------------------------
    @property
    def targets(self) -> Mapping[str, Target]:
        return self._targets

    @property
    def channels(self) -> frozenset[ChannelKey]:
        return self._channels

    @property
    def closed(self) -> bool:
        return self._phase is Phase.ENDED

    @property
    def active(self) -> bool:
        return self._phase is Phase.ACTIVE

    @property
    def synced(self) -> bool:
        """True once the first snapshot was taken (later syncs are resyncs)."""
        return self._synced

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def jobs(self) -> frozenset[str]:
        """The named jobs whose final change was not delivered yet."""
        return frozenset(
            ref.oid
            for t in self._targets.values()
            for prefix, ref in t.jobs.items()
            if prefix not in self._finished
        )

    def wait_ready(self, timeout: float | None) -> bool:
        return self._ready.wait(timeout)

    def wait_closed(self, timeout: float | None) -> bool:
        return self._ended.wait(timeout)

    # -- lifecycle ---------------------------------------------------------------------------
    def stop(self) -> bool:
        """No more callbacks from now on (any thread); False if it had ended already."""
        if self._phase is Phase.ENDED:
            return False
        self._phase = Phase.ENDED
        return True

    def add_end_callback(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` once the feed has ended (at once if it has)."""
        with self._end_lock:
            if not self._ended.is_set():
                self._on_end.append(fn)
                return
        fn()

    def end(self) -> None:
        """Ended for good (its channels released): wake up whoever waits for it."""
        self._phase = Phase.ENDED
        self._ready.set()
        with self._end_lock:
            if self._ended.is_set():
                return
            self._ended.set()
            callbacks, self._on_end = self._on_end, []
        for fn in callbacks:
            fn()

    def fail(self, error: JobtapError) -> None:
        """Record why the feed ends (the dispatcher then releases it)."""
        if self._synced:
            log.error("jobtap: a subscription ended: %s", error)
        self.error = error

    # -- channels ----------------------------------------------------------------------------
    def bind(self, links: Mapping[str, Link]) -> frozenset[ChannelKey]:
        """Its channels, each on the link to its site's server."""
        self._channels = frozenset(
            (links[name], channel)
            for name, target in self._targets.items()
            for channel in target.channels()
        )
        return self._channels

    def await_channel(self, key: ChannelKey) -> None:
        """Redis has not confirmed ``key`` yet: no snapshot before it does."""
        self._waiting.add(key)

    def channel_lost(self, key: ChannelKey) -> None:
        """The connection of ``key`` dropped: changes may be missed until it is back."""
        if self._phase is Phase.ACTIVE:
            self._phase = Phase.SYNCING
        self._waiting.add(key)

    def channel_confirmed(self, key: ChannelKey) -> bool:
        """Redis confirmed ``key``; True if that was the last one awaited and the
        feed must now (re)synchronise."""
        self._waiting.discard(key)
        return not self._waiting and self._phase in (Phase.PENDING, Phase.SYNCING)

    # -- the snapshot (first sync) ---------------------------------------------------------------
    def start_over(self) -> None:
        """A first sync (again, if one was cut short by a disconnect): forget every version."""
        self._versions.clear()
        self._carried.clear()
        self._in_order = True

    def note_position(
        self, site: str, stream: str, position: str | None, epoch: str | None = None
    ) -> None:
        """Events of ``stream`` up to ``position`` are covered (``None``: unreadable);
        ``epoch``: that of the event at ``position`` (``None``: no event there)."""
        self._positions[(site, stream)] = position
        self.note_stream_epoch(site, stream, epoch)

    def note_stream_epoch(self, site: str, stream: str, epoch: str | None) -> None:
        """The epoch of ``stream``'s newest event (``None``: no event there)."""
        if epoch is None:
            self._stream_epochs.pop((site, stream), None)
        else:
            self._stream_epochs[(site, stream)] = epoch

    def take_positions(self, positions: Iterable[StreamPosition], *, in_order: bool) -> None:
        """A catch-up's (site, stream, position, epoch): events up to there are
        covered; each site follows the epoch of its newest.  ``in_order``: what
        was delivered is a prefix of the streams (a replay: a later scan may stop
        at the first event it finds delivered); not after a catch-up by state,
        which reads records after the streams and delivers their versions, which
        may be past the positions: later scans go back to the positions."""
        sites = set()
        for site, stream, position, epoch in positions:
            self.note_position(site, stream, position, epoch)
            sites.add(site)
        for site in sites:
            self.settle_epoch(site)
        self._in_order = in_order

    def position(self, site: str, stream: str) -> str | None:
        return self._positions.get((site, stream), "0-0")

    def stream_epoch(self, site: str, stream: str) -> str | None:
        return self._stream_epochs.get((site, stream))

    def epoch(self, site: str) -> str | None:
        """The epoch followed on ``site`` (``None``: not known yet)."""
        return self._epochs.get(site)

    def settle_epoch(self, site: str) -> None:
        """Follow the epoch of the newest event the site's streams hold (stream
        ids of one server grow with time, across streams)."""
        newest: tuple[tuple[int, int], str] | None = None
        for (name, stream), epoch in self._stream_epochs.items():
            position = self._positions.get((name, stream))
            if name != site or position is None:
                continue
            if newest is None or parse_sid(position) > newest[0]:
                newest = (parse_sid(position), epoch)
        self._epochs[site] = newest[1] if newest is not None else None

    def new_epoch(self, site: str) -> None:
        """Redis lost data for ``site`` (a new epoch began, or a stream went back):
        follow again the site's finished jobs of listings (named jobs stay
        finished), so that the new epoch's events of them are caught up with too.
        Their finals stay known with their epoch: a scan back over that epoch's
        events of them (after the positions) takes those as delivered, not missed
        (:meth:`verdict`).  Other sites lost nothing: their finished jobs stay."""
        log.warning(
            "jobtap: site %s: a new epoch began (Redis restarted or lost data); catching up",
            site,
        )
        named = {p for t in self._targets.values() for p in t.jobs}
        self._finished.release(site, named)

    def await_again(self, gone: Iterable[tuple[str, Ref]]) -> None:
        """After a loss, the objects whose record is ``gone`` are not removed: they
        are awaited at version 1 of the new epoch (the collector writes them again)."""
        for prefix, ref in gone:
            self._versions.expect(prefix, 0, ref)

    def snapshot(
        self, site: str, refs: Iterable[Ref], records: Iterable[dict[str, Any] | None]
    ) -> list[tuple[Change, str, Ref]]:
        """Know each listed object at the version of its record; the ``initial``
        changes to deliver."""
        target = self._targets[site]
        initial: list[tuple[Change, str, Ref]] = []
        for ref, rec in zip(refs, records, strict=True):
            prefix = object_prefix(site, ref.kind, ref.oid)
            if prefix in self._versions:
                continue
            if rec is None:
                if prefix in target.jobs:
                    self._versions.expect(prefix, 0, ref)  # not collected yet: await version 1
                continue
            final = bool(rec.get("final"))
            if final and prefix not in target.jobs:
                continue  # a finished job of the site listing: nothing will follow
            epoch = str(rec.get("epoch") or "")
            self._versions.expect(prefix, int(rec.get("version") or 0), ref, epoch)
            change = Change.synthesize(INITIAL, ref.kind, site, rec, final=final)
            initial.append((change, prefix, ref))
        return initial

    def deliver_snapshot(self, initial: Iterable[tuple[Change, str, Ref]]) -> None:
        """Go live: deliver the ``initial`` changes (when asked for) and unblock the caller."""
        self._synced = True
        self._go_live()
        for change, prefix, ref in initial:
            if self._initial:
                self.deliver(change, prefix, ref)
            elif change.final:
                self.finish(prefix, change.epoch)
        self._ready.set()

    # -- live events -------------------------------------------------------------------------
    def offer(self, event: Mapping[str, Any], change: Change, prefix: str) -> bool:
        """A channel event: deliver it if it is the object's next version, drop it if
        it is old; False if versions were missed (a gap: resynchronise)."""
        site = event.get("site", "")
        target = self._targets.get(site)
        if target is None or not target.wants(event, prefix):
            return True
        epoch = change.epoch
        followed = self._epochs.get(site)
        if followed is None:
            self._epochs[site] = epoch  # the streams held nothing yet: follow this one
        elif epoch != followed:
            log.info("jobtap: %s is of another epoch than %s: resynchronising", change.id, followed)
            return False
        if self._finished.ended_in(prefix, epoch):
            return True
        self._stream_epochs[(site, target.stream_of(event))] = epoch
        step = self._versions.step(prefix, change.version, change.type, epoch)
        if step is Step.OLD:
            return True  # already delivered, or covered by the snapshot
        if step is Step.GAP:
            log.info(
                "jobtap: %s arrived after version %s: resynchronising",
                change.id,
                self._versions.last(prefix),
            )
            return False
        ref = Ref(target.site.name, change.kind, change.object_id, change.user)
        self.deliver(change, prefix, ref)
        return True

    def deliver(self, change: Change, prefix: str, ref: Ref) -> None:
        """Note the change as processed, run the callback, end the object if final."""
        if self._phase is Phase.ENDED:
            return
        self._versions.advance(prefix, change.version, change.type, ref, change.epoch)
        if self._wanted_by_attrs(change):
            self.delivered += 1
            try:
                self._callback(change)
            except Exception:
                log.exception("jobtap: a subscription callback raised on %s", change.id)
        if change.final or (change.type == REMOVED and change.kind == JOB):
            self.finish(prefix, change.epoch)

    def _wanted_by_attrs(self, change: Change) -> bool:
        if self._attrs is None or change.type != UPDATE:
            return True  # initial, new, state, final, removed and resync always go out
        for name in change.changed():
            if name in self._attrs or name.partition(".")[0] in self._attrs:
                return True
        return False

    def finish(self, prefix: str, epoch: str = "") -> None:
        """Nothing follows for this object (in ``epoch``); the feed ends after its
        last named job."""
        self._versions.forget(prefix)
        self._finished.add(prefix, epoch)
        targets = self._targets.values()
        if all(t.only_jobs for t in targets) and all(
            p in self._finished for t in targets for p in t.jobs
        ):
            if self._phase is not Phase.ENDED:
                self._phase = Phase.ENDED
                self._release(self)

    # -- catching up after a gap ------------------------------------------------------------
    def mark_gap(self) -> None:
        """Changes were missed: hold live events until the feed has caught up."""
        self._phase = Phase.SYNCING

    def begin_resync(self) -> None:
        self.resyncs += 1
        self._phase = Phase.SYNCING
        self.drop_queue()  # what it holds is in the streams: the catch-up covers it

    # -- the queue between the pub/sub reader and the callback ---------------------------------
    @property
    def queued(self) -> int:
        return len(self._plan) + len(self._live)

    def enqueue(self, now: float, event: Mapping[str, Any], change: Change, prefix: str) -> int:
        """A channel event read at ``now``, to deliver in turn; how many channel
        events wait.  While a catch-up's changes are delivered in turns, channel
        events are not queued: the streams hold them, and once the turns are done
        the feed catches up again from where the catch-up read (:meth:`deliver_next`),
        so a slow callback's memory holds one change per object at most."""
        if self._plan:
            planned = self._planned.get(prefix)
            if planned is not None and planned[0] == change.epoch and change.version <= planned[1]:
                return 0  # published before the catch-up read: it covers it
            if self._versions.step(prefix, change.version, change.type, change.epoch) is Step.OLD:
                return 0
            if self.behind_since is None:
                self.behind_since = now
            self._final_waiting |= change.final
            self.skipped += 1
            return 0
        self._live.append((now, event, change, prefix))
        n = len(self._live)
        if n > self.queue_peak:
            self.queue_peak = n
        return n

    def lag(self, now: float) -> float:
        """How long ago the oldest channel event not called back for yet was read
        (0: none).  While a catch-up's changes are delivered, that is the first
        event passed over: past the bound, the catch-up starts again (finals
        first), rather than finishing the changes of objects that moved again."""
        if self._plan:
            return now - self.behind_since if self.behind_since is not None else 0.0
        return now - self._live[0][0] if self._live else 0.0

    def drop_queue(self) -> int:
        """Forget what waits (a catch-up follows); how many channel events that was.
        A catch-up cut short (its callback fell behind again) is not lost: the
        streams are covered up to where it read, and the changes it did not
        deliver are carried into the next catch-up, where a newer reading of the
        same object replaces them."""
        dropped = len(self._live)
        if self._plan:
            for item in self._plan:
                self._carried[item.prefix] = item
            self._plan.clear()
            self._planned.clear()
            self.take_positions(self._plan_positions, in_order=False)
        self._plan_positions = []
        self.behind_since = None
        self._final_waiting = False
        self._live.clear()
        return dropped

    def _with_carried(self, plan: list[Planned]) -> list[Planned]:
        """``plan`` and what a catch-up cut short did not deliver, for the objects
        ``plan`` does not have (it read them anew)."""
        if not self._carried:
            return plan
        fresh = {item.prefix for item in plan}
        plan = plan + [item for p, item in self._carried.items() if p not in fresh]
        self._carried.clear()
        return plan

    def queue_plan(self, plan: list[Planned], positions: list[StreamPosition]) -> None:
        """Go live again; the catch-up's changes are delivered in turn, before the
        channel events that arrive from now on.  ``positions`` (site, stream,
        position, epoch) are what the catch-up read up to: they are noted once its
        last change is delivered."""
        self._go_live()
        self.drop_queue()
        self._plan.extend(sorted(self._with_carried(plan), key=Planned.order))
        self._planned = {p.prefix: (p.change.epoch, p.change.version) for p in self._plan}
        self.queue_peak = max(self.queue_peak, len(self._plan))
        self._in_order = False
        self._plan_positions = positions
        for site in {site for site, *_ in positions}:
            self.settle_epoch(site)  # live events of a new epoch are followed at once
        if not self._plan:
            self._plan_done()

    def _plan_done(self) -> None:
        self.take_positions(self._plan_positions, in_order=False)
        self._plan_positions = []

    def deliver_next(self) -> bool:
        """Deliver what is first in the queue; False if the feed must catch up
        again: a channel event came after a gap, or channel events arrived while a
        catch-up's changes were delivered (since :attr:`behind_since`) and either
        the catch-up is done or one of them was a final and only changes that are
        not finals are left (finals first, across catch-ups too)."""
        if self._plan:
            if self._final_waiting and not self._plan[0].change.final:
                return False  # finals first: what is left can wait for the next catch-up
            item = self._plan.popleft()
            self._planned.pop(item.prefix, None)
            self.deliver_planned(item)
            if not self._plan:
                self._plan_done()
                return self.behind_since is None
            return True
        if not self._live:
            return True
        _, event, change, prefix = self._live.popleft()
        return self.offer(event, change, prefix)

    @property
    def versions(self) -> VersionSequence[Ref]:
        """What was delivered per object (read it; only the feed changes it)."""
        return self._versions

    def finished(self, prefix: str) -> bool:
        return prefix in self._finished

    def known_refs(self, site: str) -> dict[str, Ref]:
        """Every object of ``site`` delivered so far (or awaited), by prefix."""
        return {p: ref for p, ref in self._versions.marks().items() if ref.site == site}

    def verdict(self, entry: Entry) -> bool | None:
        """For a stream scan: True if processed (the scan stops there), False if
        missed, None if irrelevant.  After a catch-up by state that was not
        delivered to its end, what was delivered is not a prefix of the stream:
        a processed entry is then passed over (None), and the scan goes back to
        the positions.  An entry of the epoch an object's final was delivered in
        was processed, also once a new epoch made the feed follow the object
        again (:meth:`new_epoch`): it is not missed."""
        prefix = entry.prefix
        if self._finished.epoch(prefix) == entry.epoch:  # its final of that epoch came
            return True if self._in_order else None
        if prefix in self._finished:  # a later epoch's events of it are not for us
            return None
        if prefix in self._versions:
            processed = self._versions.processed(prefix, entry.version, entry.epoch)
            return None if processed and not self._in_order else processed
        target = self._targets.get(entry.event.get("site", ""))
        if target is None or not target.wants(entry.event, prefix):
            return None
        return False

    def deliver_plan(self, plan: list[Planned]) -> None:
        """Go live again and deliver what was missed, in stream order."""
        self._go_live()
        delivered = 0
        for item in sorted(self._with_carried(plan), key=Planned.order):
            if self._phase is Phase.ENDED:
                break
            delivered += self.deliver_planned(item)
        log.debug("jobtap: resync delivered %d change(s)", delivered)

    def deliver_planned(self, item: Planned) -> bool:
        """Deliver one change of a catch-up, unless it is no longer news; True if it was."""
        change = item.change
        if self._phase is Phase.ENDED or self._finished.ended_in(item.prefix, change.epoch):
            return False
        if item.restart:  # a node or queue that came back: start again from its record
            self._versions.forget(item.prefix)
        if change.type != RESYNC and (
            self._versions.step(item.prefix, change.version, change.type, change.epoch) is Step.OLD
        ):
            return False
        self.deliver(change, item.prefix, item.ref)
        return True

    def _go_live(self) -> None:
        if self._phase is not Phase.ENDED:  # closed meanwhile: stay closed
            self._phase = Phase.ACTIVE


class Finished:
    """The objects whose final change was delivered, and the epoch it was of;
    at most ``maxsize`` (the least recently finished are forgotten first).

    After Redis lost data an object may be *released* (:meth:`release`): it no
    longer counts as finished (``in``), since the new epoch may bring news of it,
    but the epoch of its final is still known (:meth:`epoch`): that epoch's
    events of it were delivered, and are not news when a scan finds them again."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._items: OrderedDict[str, str] = OrderedDict()
        self._released: set[str] = set()

    def add(self, prefix: str, epoch: str) -> None:
        self._items[prefix] = epoch
        self._items.move_to_end(prefix)
        self._released.discard(prefix)
        if len(self._items) > self.maxsize:
            oldest, _ = self._items.popitem(last=False)
            self._released.discard(oldest)

    def epoch(self, prefix: str) -> str | None:
        """The epoch of the object's final (released or not; ``None``: not known)."""
        return self._items.get(prefix)

    def ended_in(self, prefix: str, epoch: str) -> bool:
        """Whether nothing of the object in ``epoch`` is news: it is finished,
        or (released) its final was of that epoch."""
        return prefix in self or self._items.get(prefix) == epoch

    def release(self, site: str, keep: set[str]) -> None:
        """The objects of ``site`` that are not in ``keep`` count as finished no longer."""
        head = f"{site}:"
        self._released.update(p for p in self._items if p.startswith(head) and p not in keep)

    def __contains__(self, prefix: object) -> bool:
        return prefix in self._items and prefix not in self._released
