"""What to deliver after a gap, per object.

After a gap the dispatcher re-reads the records of a subscription's objects, then
scans its streams back for the events it missed (:mod:`jobtap.backfill`); the
records are read first so that the streams hold at least their versions.  Per
object, :func:`plan_object` then chooses:

- the missed events, if they continue what was delivered (or the object is gone
  and they are all there is); across a new site epoch they continue from its
  version 1;
- else the record, as one ``resync`` change (its changes are lost to the streams),
  when it is not the one last delivered (after Redis went back to an older
  snapshot, it may be an older one);
- for an object that was delivered before, is gone now and that no stream
  mentions: a ``removed`` change (its hash expired, or it was deleted).  After
  Redis lost data the dispatcher awaits such objects instead (version 0), so
  nothing is said about them until the collector writes them again.

A subscription too far behind (see :mod:`jobtap.subscribe`: cut off by Redis, or
behind by more than its bound) catches up *by state* instead: per object,
:func:`plan_state` gives at most one change, the object's current state, with a
summary of what it stands for (:class:`~jobtap.records.Missed`); finals first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .backfill import Entry
from .cache import Ref
from .entries import parse_sid
from .events import FINAL, REMOVED, RESYNC, record_of
from .records import Change, Missed
from .schema import JOB
from .sequence import VersionSequence

StreamPos = tuple[int, int]
LATE: StreamPos = (1 << 62, 0)
"""The place of changes made from a record: after every stream event."""
FIRST: StreamPos = (0, 0)
"""The place of a final in a catch-up by state: before anything else."""
STATE_MOVED: StreamPos = (0, 1)
"""The place of a change of state in a catch-up by state: after the finals."""


@dataclass(frozen=True)
class Planned:
    """One change to deliver, and where it goes in stream order."""

    position: StreamPos
    change: Change
    prefix: str
    ref: Ref
    restart: bool = False
    """A removed node or queue that came back: its versions start again."""

    def order(self) -> tuple[StreamPos, int]:
        return (self.position, self.change.version)


@dataclass
class SiteReading:
    """What a resync read of one site: the objects to look at, their current
    records (``None``: gone), and the missed events per object, in stream order."""

    refs: dict[str, Ref]
    current: dict[str, dict[str, Any] | None]
    missed: dict[str, list[Entry]]
    news: frozenset[str] = frozenset()
    """Jobs that ended since the feed's positions: their finals are news though
    the feed never knew them (Target.ended_since)."""

    def prefixes(self) -> set[str]:
        return set(self.missed) | set(self.current)

    def gone(self) -> list[tuple[str, Ref]]:
        """The objects whose record is gone."""
        return [(p, self.refs[p]) for p, rec in self.current.items() if rec is None]


def _chain(
    versions: VersionSequence[Ref], prefix: str, missed: Sequence[Entry]
) -> tuple[list[Entry], bool]:
    """The missed events that continue what was delivered, in stream order, and
    whether they all do (within an epoch: one version after another; the first
    of another epoch: version 1)."""
    epoch, last = versions.epoch(prefix) or "", versions.last(prefix) or 0
    chain: list[Entry] = []
    for e in missed:
        if e.epoch == epoch and e.version <= last:
            continue  # delivered already
        expected = last + 1 if e.epoch == epoch else 1
        if e.version != expected:
            return chain, False
        chain.append(e)
        epoch, last = e.epoch, e.version
    return chain, True


def plan_object(
    versions: VersionSequence[Ref],
    site: str,
    prefix: str,
    *,
    record: dict[str, Any] | None,
    missed: Sequence[Entry],
    ref: Ref | None,
    named: bool,
) -> list[Planned]:
    """The changes that bring one object up to date (see the module documentation).
    ``missed``: its missed events in stream order.  ``named``: a job the
    subscription names (its final is wanted even if it was never delivered before)."""
    restart = versions.removed(prefix) and record is not None
    last = None if restart else versions.last(prefix)
    entries: list[Entry] = []
    if not restart and missed:
        chain, whole = _chain(versions, prefix, missed)
        if whole:
            entries = chain
        elif record is None:  # gone: the events are all there is
            base = (versions.epoch(prefix) or "", last or 0)
            entries = [e for e in missed if e.epoch != base[0] or e.version > base[1]]
    out: list[Planned] = []
    for e in entries:
        change = Change.from_json(e.json, stream_id=e.sid)
        entry_ref = Ref(site, change.kind, change.object_id, change.user)
        out.append(Planned(parse_sid(e.sid), change, prefix, entry_ref))
    if record is None and any(e.type == FINAL for e in entries):
        return out
    if entries:
        top = (entries[-1].epoch, entries[-1].version)
    else:
        top = (versions.epoch(prefix) or "", last or 0)
    if record is not None and ref is not None:
        now = (str(record.get("epoch") or ""), int(record.get("version") or 0))
        # The record was read before the streams: events that go on from it are
        # newer.  Within its epoch, those up to its version or beyond; into a new
        # epoch (the record's epoch is the one delivered before, or one the
        # events leave), all of them: the record was read before the new epoch's
        # first write, which is the case right after a Redis Cluster failover.
        left = {versions.epoch(prefix) or ""} | {e.epoch for e in entries[:-1]}
        newer_events = bool(entries) and (
            (now[0] == top[0] and now[1] <= top[1]) or (now[0] != top[0] and now[0] in left)
        )
        if now != top and not newer_events and now[1] > 0:
            final = bool(record.get("final"))
            if last is None and final and not named:
                return out  # finished before we ever knew it, and the streams forgot it
            change = Change.synthesize(RESYNC, ref.kind, site, record, final=final)
            out.append(Planned(LATE, change, prefix, ref, restart=restart))
    elif last and ref is not None and not entries:
        # known, now gone, and the streams know nothing: expired or removed
        gone = {"id": ref.oid, "user": ref.user, "version": last + 1, "epoch": top[0]}
        change = Change.synthesize(REMOVED, ref.kind, site, gone, final=ref.kind == JOB)
        out.append(Planned(LATE, change, prefix, ref))
    return out


def plan_state(
    versions: VersionSequence[Ref],
    site: str,
    prefix: str,
    *,
    record: dict[str, Any] | None,
    missed: Sequence[Entry],
    ref: Ref | None,
    named: bool,
) -> list[Planned]:
    """Catching up by state: at most one change for the object, its current state
    (a ``resync``; for a job that ended, its ``final`` event when the streams hold
    it, else a ``resync`` with ``final`` set), with :attr:`Change.missed` set;
    nothing if it did not move.  Finals go first, then changes of state, then the
    rest.  Objects whose record is gone, and objects seen across two epochs, are
    planned as :func:`plan_object` does (rare, and there the events are all there is)."""
    delivered_epoch, last = versions.epoch(prefix), versions.last(prefix)
    epoch = str(record.get("epoch") or "") if record is not None else ""
    if (
        record is None
        or ref is None
        or versions.removed(prefix)
        or any(e.epoch != epoch for e in missed)
        or delivered_epoch not in (None, epoch)
    ):
        return _summarised(plan_object(
            versions, site, prefix, record=record, missed=missed, ref=ref, named=named
        ))  # fmt: skip
    version = int(record.get("version") or 0)
    base = last or 0
    skipped = [e for e in missed if e.version > base]
    newest = skipped[-1] if skipped else None
    if newest is not None and newest.version > version:
        # written after the record was read: the event holds the newer record
        record = {**record_of(newest.event), "epoch": epoch, "version": newest.version}
        record["final"] = 1 if newest.type == FINAL else 0
        version = newest.version
    if version <= base or version <= 0:
        return []  # nothing moved (or an older record, after a loss: await the news)
    final = bool(record.get("final"))
    if last is None and final and not named and not skipped:
        return []  # finished before this subscription knew it: not news
    change: Change
    if final and newest is not None and newest.version == version and newest.type == FINAL:
        change = Change.from_json(newest.json, stream_id=newest.sid)
    else:
        change = Change.synthesize(RESYNC, ref.kind, site, record, final=final)
    states: list[str] = []
    fields: set[str] = set()
    for e in skipped:
        fields.update(Change.from_event(e.event, e.json).changed())
        state = (e.event.get("record") or {}).get("state")
        if state and (not states or states[-1] != state):
            states.append(str(state))
    change.missed = Missed(
        events=version - base,
        fields=frozenset(fields),
        states=tuple(states),
        complete=[e.version for e in skipped] == list(range(base + 1, version + 1)),
    )
    if final:
        position = FIRST
    elif "state" in fields or not change.missed.complete:
        position = STATE_MOVED
    else:
        position = LATE
    return [Planned(position, change, prefix, ref)]


def _summarised(plan: list[Planned]) -> list[Planned]:
    """A plan made as after a small gap, in a catch-up by state: if it ends the
    object, only its final, first (what came before it is skipped)."""
    for p in plan:
        if p.change.final:
            return [Planned(FIRST, p.change, p.prefix, p.ref, p.restart)]
    return plan
