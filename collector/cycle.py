"""One collector cycle, as separate steps so that a targeted refresh can reuse them:

    stat -> fingerprint -> compare with what was shipped -> normalise the changed
    -> look up the vanished in history -> ship -> remember

What is stat'ed depends on the cycle's tier (``plan.py``): a *reconciliation*
stats every job (the steps above, in full); a *probe* cycle asks the backend's
cheap probe what changed and stats just those jobs (``stat_some``), then goes
through the same fingerprint, normalise and ship steps.

A cycle either ships everything it found or changes nothing: the ledger (and
the plan's memory) is updated only after the chunks are enqueued, so a failure
at any step leaves the next cycle to find the same changes again.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import redis

from jobtap.contract import chunk, meta
from jobtap.contract.chunk import STATE, UPDATE, Item
from jobtap.contract.lease import Lease, LeaseLost
from jobtap.keys import SiteKeys
from jobtap.schema import JOB, KINDS, NODE, QUEUE, TERMINAL

from .backends.base import (
    Backend,
    BadRecord,
    CanonicalIds,
    ChangeProbe,
    Cost,
    MeasuresCost,
    Native,
    Probe,
    ProbeUnavailable,
    Record,
    StatError,
    check_object_id,
)
from .fingerprint import fingerprint, fingerprint_all
from .follow.reads import PokedJobReads
from .ledger import Ledger, Seen
from .nodewatch import ON_NODES, NodeWatch
from .plan import PROBE, PUSHED, RECONCILE, TIERS, ObservationPlan, ProbeJobs
from .ship import Batches, Shipper

log = logging.getLogger("jobtap.collector")

MAX_BAD_REPORTED = 20
# A finished job forgotten (gone from the live list) is looked up again after a
# Redis loss for this long: its final may have been in a chunk the loss took.
FORGOTTEN_KEEP_S = 600.0
MAX_POKED_FINALS = 100_000  # jobs whose final came from a poke's record, remembered


@runtime_checkable
class EndedSince(Protocol):
    """A backend whose history can list every job that ended since a time,
    whoever knew of it (Slurm: ``sacct -s ENDED -S ...``).  A reconciliation
    asks it for the window since the previous reconciliation, so that a job
    that was submitted, ran and left the live list in between, unpoked, still
    gets its ``new`` and ``final``."""

    def ended_since(self, since: float) -> dict[str, Native]:
        """Final records of the jobs that ended at ``since`` (epoch seconds)
        or later."""
        ...


class CycleFailed(Exception):
    """The cycle changed nothing; the message says why (one line)."""


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@dataclass
class CycleReport:
    """What one cycle did: its tier, how long each stage took, what each stage's
    commands cost (``costs[stage] = [commands, bytes]``, for backends that
    count it), and what it found."""

    cycle: int
    observed_at: str
    tier: str = RECONCILE
    timings: dict[str, float] = field(default_factory=dict)
    costs: dict[str, list[int]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # A refresh: the state each poked job the scheduler knows is in now (what
    # follow mode decides its re-checks on, without the ledger a cycle may own).
    states: dict[str, str] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return sum(self.timings.values())

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def tier_fields(self, duration: float) -> dict[str, str | int | float]:
        """What ``meta`` keeps of this cycle's tier: which tier ran last, and
        per tier when it last ran, how long it took, what its commands cost
        (count and bytes printed) and how many jobs it stat'ed.  Kept per tier
        so that ``jobtap status`` shows both the probe and the reconciliation."""
        jobs = self.counts.get("jobs" if self.tier == RECONCILE else "targeted_found", 0)
        return {
            meta.LAST_TIER: self.tier,
            meta.tier_last(self.tier, "at"): self.observed_at,
            meta.tier_last(self.tier, "s"): round(duration, 4),
            meta.tier_last(self.tier, "commands"): sum(c for c, _ in self.costs.values()),
            meta.tier_last(self.tier, "bytes"): sum(b for _, b in self.costs.values()),
            meta.tier_last(self.tier, "jobs"): jobs,
        }


class _Stopwatch:
    """Adds a stage's time (and, given the backend's :class:`Cost`, the
    commands it ran and the bytes they printed) to the report."""

    def __init__(self, report: CycleReport, stage: str, cost: Cost | None = None):
        self.report, self.stage, self.cost = report, stage, cost

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()
        self.c0 = self.cost.snapshot() if self.cost is not None else (0, 0)

    def __exit__(self, *exc: Any) -> None:
        t = self.report.timings
        t[self.stage] = t.get(self.stage, 0.0) + time.perf_counter() - self.t0
        if self.cost is not None:
            commands, size = self.cost.snapshot()
            if commands > self.c0[0]:
                spent = self.report.costs.setdefault(self.stage, [0, 0])
                spent[0] += commands - self.c0[0]
                spent[1] += size - self.c0[1]


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: parsing a big stat allocates hundreds of
    thousands of dicts (none of them cyclic), and the collections that would
    trigger cost as much as the parse itself."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# Pure steps --------------------------------------------------------------------
def compare(seen: dict[str, Seen], fps: dict[str, str]) -> tuple[list[str], list[str]]:
    """Ids whose fingerprint differs from the shipped one, and ids that vanished."""
    changed = [
        oid for oid, fp in fps.items() if (s := seen.get(oid)) is None or s.fingerprint != fp
    ]
    vanished = [oid for oid in seen if oid not in fps]
    return changed, vanished


def normalise_many(
    normalise: Callable[[str, Native], Record],
    natives: dict[str, Native],
    ids: Iterable[str],
    site: str,
    report: CycleReport,
    what: str = "job",
) -> dict[str, Record]:
    """Normalise ``ids``; bad records are reported one by one and skipped."""
    out: dict[str, Record] = {}
    for oid in ids:
        try:
            check_object_id(oid, f"{what} id")
            record = normalise(oid, natives[oid])
        except BadRecord as exc:
            report.add("bad")
            if len(report.bad) < MAX_BAD_REPORTED:
                report.bad.append(f"{what} {oid!r:.80}: {exc}")
            continue
        except Exception as exc:  # a normaliser bug must not sink the whole cycle
            report.add("bad")
            if len(report.bad) < MAX_BAD_REPORTED:
                report.bad.append(f"{what} {oid!r:.80}: unexpected {type(exc).__name__}: {exc}")
            log.exception("normalising %s %r failed", what, oid)
            continue
        record["site"] = site
        out[oid] = record
    return out


def classify(
    changed: Iterable[str],
    fps: dict[str, str],
    records: dict[str, Record],
    seen: dict[str, Seen],
    urgent: set[str],
    report: CycleReport,
) -> tuple[list[Item], list[Item], dict[str, Seen]]:
    """Split changed jobs into state-queue items (new, state changes, finals,
    ``urgent``) and update-queue items; and what to remember of each."""
    state_items: list[Item] = []
    update_items: list[Item] = []
    new_seen: dict[str, Seen] = {}
    for oid in changed:
        fp = fps[oid]
        record = records.get(oid)
        old = seen.get(oid)
        if record is None:  # bad record: remember it so it is reported once
            new_seen[oid] = Seen(fp, old.state if old else "")
            continue
        state = record.get("state") or ""
        new_seen[oid] = Seen(fp, state)
        important = old is None or old.state != state or state in TERMINAL or oid in urgent
        (state_items if important else update_items).append(chunk.upsert(oid, fp, record))
        report.add("new" if old is None else "state" if old.state != state else "update")
    return state_items, update_items, new_seen


@dataclass
class Shipment:
    """What one cycle ships, and what the collector remembers once it is shipped.

    Nothing is remembered before the chunks are enqueued: a cycle that fails at
    any step leaves the next one to find the same changes again."""

    batches: Batches = field(default_factory=dict)
    forget: list[str] = field(default_factory=list)  # fingerprint fields to drop
    on_shipped: list[Callable[[], None]] = field(default_factory=list)

    def add(self, priority: str, kind: str, items: list[Item]) -> None:
        if items:
            self.batches.setdefault((priority, kind), []).extend(items)

    def then(self, step: Callable[[], None]) -> None:
        self.on_shipped.append(step)


# The collector -----------------------------------------------------------------
class Collector:
    """Stats one site's scheduler and ships what changed.

    ``shrink_ratio``: a live list that lost more than this fraction of its active
    jobs since the last cycle (or is suddenly empty) is believed only for the
    jobs that history confirms as finished; the others stay as they were.
    ``reconcile_every``: seconds between full stats when the backend has a
    probe (:class:`~.backends.base.ChangeProbe`; 0: a full stat every cycle);
    ``max_targeted``: a probe naming more jobs than this makes the cycle a full
    stat (see :class:`~.plan.ObservationPlan`); ``pushed``: follow mode's pokes
    bring the jobs' changes, so the cycles between two reconciliations stat no
    jobs (the plan for Slurm's and Flux's follow mode);
    ``clock``: the plan's seconds (monotonic; a simulation's virtual clock in
    tests and benchmarks).
    """

    def __init__(
        self,
        backend: Backend,
        data_redis: redis.Redis,
        queue_redis: redis.Redis | None = None,
        *,
        site: str,
        nodes_every: int = 6,
        chunk_size: int = 1000,
        shrink_ratio: float = 0.5,
        reconcile_every: float = 60.0,
        max_targeted: int = 5000,
        pushed: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        history_overlap: float = 60.0,
        max_history_window: float = 86400.0,
    ):
        self.backend = backend
        self.redis = data_redis
        self.keys = SiteKeys(site)
        self.site = site
        self.shipper = Shipper(queue_redis or data_redis, self.keys, chunk_size=chunk_size)
        self.nodes_every = max(1, nodes_every)
        self.shrink_ratio = shrink_ratio
        self.ledger: Ledger | None = None
        self.nodewatch = NodeWatch()
        self.job_nodes_known = self.node_states_known = False
        self.cycles_run = 0
        self.last_cycle = 0
        self._cycle_lock = threading.Lock()
        # Checked once: does this scheduler spell job ids in several ways, can it
        # say cheaply what changed, does it count what its commands cost?
        self.canonical_id = backend.canonical_id if isinstance(backend, CanonicalIds) else None
        self.prober = backend if isinstance(backend, ChangeProbe) else None
        self.cost = backend.cost if isinstance(backend, MeasuresCost) else None
        # The jobs that ended between two reconciliations (EndedSince): the
        # window starts where the previous reconciliation started (wall clock,
        # kept in meta across restarts), less ``history_overlap`` seconds, and
        # is never longer than ``max_history_window``.  ``recent_finals``: jobs
        # finalised and forgotten, with when, so the window's overlap does not
        # ship them again.
        self.ended_lister = backend if isinstance(backend, EndedSince) else None
        self.wall_clock = wall_clock
        self.history_overlap = float(history_overlap)
        self.max_history_window = float(max_history_window)
        self.window_start: float | None = None
        self.recent_finals: dict[str, float] = {}
        # Finished jobs forgotten once gone from the live list, with when
        # (monotonic): their final may still wait in a queue that Redis loses
        # with the rest, so resume_after_loss looks them up again.
        self.forgotten: dict[str, float] = {}
        # Jobs whose final came from a poke's record, oldest first (see
        # _not_after_poked_final); forgotten with the job.
        self.poked_finals: dict[str, None] = {}
        # The site lease (jobtap.contract.lease), set by the service: checked before
        # each write to Redis (the cycle counter, the shipment, the history
        # window); its generation goes into every chunk.  None: no lease (tests
        # and benchmarks that drive cycles by hand).
        self.lease: Lease | None = None
        self.plan = ObservationPlan(
            reconcile_every=reconcile_every,
            probing=self.prober is not None,
            pushed=pushed,
            max_targeted=max_targeted,
            clock=clock,
        )
        # How poked jobs are read, within follow mode's read budget (follow/reads.py).
        self.reads = PokedJobReads(
            backend, pushed=self.plan.pushed, probing=self.plan.probing, clock=clock
        )

    # -- state ------------------------------------------------------------------
    def load(self) -> Ledger:
        self.ledger = Ledger.load(self.redis, self.keys)
        self.nodewatch = NodeWatch()
        self.job_nodes_known = self.node_states_known = False
        self.plan.reset()  # what the probe remembered is no longer a baseline
        if self.ended_lister is not None and self.window_start is None:
            saved = self.redis.hget(self.keys.meta, meta.HISTORY_WINDOW)
            try:
                self.window_start = float(saved) if saved else None
            except ValueError:
                self.window_start = None
        log.info(
            "loaded %d jobs, %d nodes, %d queues from %s",
            self.ledger.count(JOB),
            self.ledger.count(NODE),
            self.ledger.count(QUEUE),
            self.keys.fingerprints,
        )
        return self.ledger

    def resume_after_loss(self) -> None:
        """Redis' data is not what this collector shipped (a new epoch began):
        take what Redis holds now, and forget the fingerprints of the objects
        Redis lost, so that each is shipped again if it is still there, and a
        job that ended meanwhile is looked up in history for its final."""
        known = self.ledger
        self.load()
        if known is None:
            return
        assert self.ledger is not None
        for kind in KINDS:
            now = self.ledger.of(kind)
            for oid in known.of(kind).keys() - now.keys():
                now[oid] = Seen("", "")
        # Jobs forgotten lately: the chunk with their final may have been lost
        # before a worker applied it (the queue lives in the same Redis).
        jobs = self.ledger.of(JOB)
        for oid in self.forgotten.keys() - jobs.keys():
            jobs[oid] = Seen("", "")
        self.forgotten.clear()

    def next_cycle(self) -> int:
        """The next cycle number: persisted in ``meta``, monotonic even if Redis
        lost it (chunks of older cycles may still sit in a separate queue Redis)."""
        if self.lease is not None:
            self.lease.check()
        with self._cycle_lock:  # a refresh may run beside a cycle (service._run_cycle)
            cycle = int(self.redis.hincrby(self.keys.meta, meta.CYCLE, 1))
            if cycle <= self.last_cycle:
                cycle = self.last_cycle + 1
                self.redis.hset(self.keys.meta, meta.CYCLE, cycle)
            self.last_cycle = cycle
            return cycle

    # -- one cycle ----------------------------------------------------------------
    def run_cycle(self, *, with_nodes: bool | None = None, tier: str | None = None) -> CycleReport:
        """Run one cycle of ``tier`` (default: the one the plan chooses); raise
        :class:`CycleFailed` if it changed nothing."""
        if self.ledger is None:
            self.load()
        if with_nodes is None:
            with_nodes = self.cycles_run % self.nodes_every == 0
        if tier is None:
            tier = self.plan.tier()
        elif tier not in TIERS or (tier == PROBE and self.prober is None):
            raise ValueError(f"cannot run a {tier!r} cycle with {self.backend!r}")
        report = self._new_report()
        shipment = Shipment()
        bad, delta = self.nodewatch.bad, set[str]()
        if with_nodes:  # nodes first: a node that just went bad changes its jobs' reason
            bad, delta = self._nodes_and_queues(report, shipment)
        try:
            self._jobs_of_tier(tier, report, shipment, bad, delta)
        except StatError as exc:
            raise CycleFailed(str(exc)) from exc
        shipment.then(lambda: setattr(self.nodewatch, "bad", bad))
        self._ship(report, shipment)
        self.cycles_run += 1
        return report

    def refresh(
        self,
        job_ids: Iterable[str],
        given: Mapping[str, Native] | None = None,
        *,
        deferred: list[Callable[[], None]] | None = None,
    ) -> CycleReport:
        """Follow mode's targeted refresh: stat just these jobs and ship what
        changed, through the same fingerprint/normalise/ship steps as a full
        cycle (so a later full cycle finds nothing new and ids never repeat).
        ``given``: native records the pokes brought (PBS's jobobit hook: as
        the scheduler's listing prints them; Slurm's completion records); those
        jobs are not stat'ed, and those whose final already went out (a read
        found the end first) are left out.
        ``deferred``: while a cycle runs in another thread, what is remembered
        of the shipped jobs is appended there, to be done after the cycle
        (the cycle owns the ledger until it ends).

        Ids the scheduler does not know are ignored: a poke for an unknown or
        vanished job is harmless, and the next full cycle deals with vanished
        jobs.  Raises :class:`CycleFailed` if it changed nothing."""
        if self.ledger is None:
            self.load()
        seen = self._seen(JOB)
        given = given or {}
        ids = self._poked_ids(job_ids)
        report = self._new_report()
        late = {j for j in ids if j in given and (x := seen.get(j)) and x.state in TERMINAL}
        if late:  # their final went out (a read found the end first): nothing to add
            ids = [j for j in ids if j not in late]
            report.add("poked_record_after_final", len(late))
        done = {j for j in ids if j not in given and j in self.poked_finals}
        if done:  # their final went out from a carried record: a read could ship nothing
            ids = [j for j in ids if j not in done]
            report.add("poked_after_carried_final", len(done))
        if not ids:
            return report
        natives = {j: given[j] for j in ids if j in given}
        rest = [j for j in ids if j not in natives]
        if rest:
            how = self.reads.mode(rest)
            try:
                with self._watch(report, "stat"):
                    natives.update(self.reads.read(rest, how))
            except StatError as exc:
                raise CycleFailed(str(exc)) from exc
            report.counts[f"read_{how}"] = 1
        natives = {j: natives[j] for j in ids if j in natives}
        fps = fingerprint_all(natives)
        changed = [j for j, fp in fps.items() if (x := seen.get(j)) is None or x.fingerprint != fp]
        changed = self._not_after_poked_final(changed, report)
        report.counts.update(poked=len(ids), jobs=len(natives), changed=len(changed))
        if given:
            report.counts["from_poke"] = len(ids) - len(rest)
        records = self._normalise_jobs(natives, changed, report, self.nodewatch.bad)
        state_items, update_items, new_seen = classify(changed, fps, records, seen, set(), report)
        for jid in natives:
            now_seen = new_seen.get(jid) or seen.get(jid)
            if now_seen is not None:
                report.states[jid] = now_seen.state
        shipment = Shipment()
        shipment.add(STATE, JOB, state_items)
        shipment.add(UPDATE, JOB, update_items)
        shipment.then(lambda: self._remember_jobs(new_seen, records, drop=()))
        finals = [j for j in natives if j in given and records.get(j, {}).get("state") in TERMINAL]
        if finals:
            shipment.then(lambda: self._note_poked_finals(finals))
        self._ship(report, shipment, deferred)
        return report

    # -- finals shipped from a poke's record ------------------------------------------
    def _note_poked_finals(self, ids: list[str]) -> None:
        for jid in ids:
            self.poked_finals[jid] = None
        while len(self.poked_finals) > MAX_POKED_FINALS:
            del self.poked_finals[next(iter(self.poked_finals))]

    def _not_after_poked_final(self, changed: list[str], report: CycleReport) -> list[str]:
        """``changed`` less the jobs whose final was shipped from a poke's record
        (PBS's jobobit hook, which builds the record qstat will print).  A
        final is the last thing applied to a job (the worker writes nothing
        after it), so a later listing that prints it otherwise (a time one
        second off, a subjob turned from X to F when its array ended) must not
        ship it again."""
        if not self.poked_finals:
            return changed
        kept = [j for j in changed if j not in self.poked_finals]
        if len(kept) < len(changed):
            report.add("poked_final_unchanged", len(changed) - len(kept))
        return kept

    # -- the steps -----------------------------------------------------------------
    def _watch(self, report: CycleReport, stage: str) -> _Stopwatch:
        return _Stopwatch(report, stage, self.cost)

    def _new_report(self) -> CycleReport:
        try:
            cycle = self.next_cycle()
        except redis.RedisError as exc:
            raise CycleFailed(f"redis: {exc}") from exc
        return CycleReport(cycle=cycle, observed_at=utc_now_iso())

    def _seen(self, kind: str) -> dict[str, Seen]:
        assert self.ledger is not None
        return self.ledger.of(kind)

    def _poked_ids(self, job_ids: Iterable[str]) -> list[str]:
        """Poked ids in the collector's spelling, valid, each once."""
        ids = []
        for jid in job_ids:
            if self.canonical_id is not None:
                jid = self.canonical_id(jid)
            try:
                ids.append(check_object_id(jid))
            except BadRecord:
                continue
        return list(dict.fromkeys(ids))

    def _ship(
        self,
        report: CycleReport,
        shipment: Shipment,
        deferred: list[Callable[[], None]] | None = None,
    ) -> None:
        """Enqueue the chunks (and drop forgotten fingerprints) in one round trip,
        then remember what was shipped (or leave that to ``deferred``)."""
        forget = shipment.forget
        lease = self.lease
        with self._watch(report, "ship"):
            try:
                if lease is not None:  # still ours (one round trip), with this generation
                    lease.check()
                    self.shipper.lease = lease.generation
                pipe = self.shipper.redis.pipeline(transaction=False)
                report.counts["chunks"] = self.shipper.ship(
                    report.cycle, report.observed_at, shipment.batches, pipeline=pipe
                )
                if forget and self.shipper.redis is self.redis and lease is None:
                    pipe.hdel(self.keys.fingerprints, *forget)
                    forget = []
                if lease is not None:  # not run out since (by this host's clock)
                    lease.still_valid()
                self._send(pipe)
                if forget and lease is not None:
                    lease.guarded().hdel(self.keys.fingerprints, *forget).execute()
                elif forget:
                    self.redis.hdel(self.keys.fingerprints, *forget)
            except redis.RedisError as exc:
                raise CycleFailed(f"redis: {exc}") from exc
        if deferred is not None:
            deferred.extend(shipment.on_shipped)
            return
        for step in shipment.on_shipped:
            step()

    def _send(self, pipe: redis.client.Pipeline) -> None:
        """Send the shipment: a process paused here past its lease ships chunks
        of a deposed generation, which the workers drop (the lease fence, jobtap.contract.lease)."""
        pipe.execute()

    def _normalise_jobs(
        self, natives: dict[str, Native], ids: list[str], report: CycleReport, bad: dict[str, str]
    ) -> dict[str, Record]:
        """Normalise ``ids``, with the reason of jobs on bad nodes overlaid."""
        records = normalise_many(self.backend.normalise_job, natives, ids, self.site, report)
        for rec in records.values():
            self.nodewatch.overlay(rec, bad)
        return records

    def _remember_jobs(
        self, new_seen: dict[str, Seen], records: dict[str, Record], drop: Iterable[str]
    ) -> None:
        seen, watch = self._seen(JOB), self.nodewatch
        seen.update(new_seen)
        now = time.monotonic()
        for oid in drop:
            seen.pop(oid, None)
            watch.job_nodes.pop(oid, None)
            self.poked_finals.pop(oid, None)
            self.forgotten[oid] = now
        if drop:
            kept = now - FORGOTTEN_KEEP_S
            self.forgotten = {j: t for j, t in self.forgotten.items() if t >= kept}
        for jid, rec in records.items():
            watch.note(jid, rec)

    def _jobs_of_tier(
        self,
        tier: str,
        report: CycleReport,
        shipment: Shipment,
        bad: dict[str, str],
        delta: set[str],
    ) -> None:
        """Tier 1 and 2 (probe, then a targeted stat of what it names), or, when
        a reconciliation is due or the probe names too much, tier 3 (a full
        stat).  A reconciliation probes first too: its probe is the baseline of
        the next probe cycle, taken before the full stat so that nothing that
        changes in between is missed.  A pushed plan never probes: between its
        reconciliations only the jobs on nodes that just went bad or came back
        are stat'ed."""
        started = self.plan.clock()
        if tier == PUSHED:  # the pokes bring the changes: only the jobs of bad nodes
            report.tier = PUSHED
            self._targeted(ProbeJobs([], {}), Probe(), report, shipment, bad, delta)
            return
        probe = None if self.plan.pushed else self._probe(report, self.plan.probe_since(tier))
        if tier == PROBE and probe is not None:
            seen = self._seen(JOB)
            jobs = self.plan.probe_jobs(probe, seen)
            report.counts.update(probe_named=len(probe.named), targeted=len(jobs))
            if not self.plan.too_many(jobs, seen):
                report.tier = PROBE
                self._targeted(jobs, probe, report, shipment, bad, delta)
                return
            report.add("escalated")  # one full stat costs less than this many targeted ones
        report.tier = RECONCILE
        self._jobs(report, shipment, bad, delta)
        shipment.then(lambda: self.plan.commit_reconcile(probe, started))

    def _probe(self, report: CycleReport, since: float | None) -> Probe | None:
        """Tier 1: the backend's cheap probe (None for a backend without one, or
        when every cycle is a full stat)."""
        if self.prober is None or not self.plan.probing:
            return None
        try:
            with no_gc(), self._watch(report, "probe"):
                return self.prober.probe(since)
        except ProbeUnavailable as exc:
            log.warning("the probe cannot run (%s): every cycle stats every job", exc)
            report.warnings.append(f"no probe ({exc}): every cycle stats every job")
            self.plan.probing = False
            return None

    def _targeted(
        self,
        jobs: ProbeJobs,
        probe: Probe,
        report: CycleReport,
        shipment: Shipment,
        bad: dict[str, str],
        delta: set[str],
    ) -> None:
        """Tier 2: full records of the jobs the probe named (and of the jobs on
        nodes that just went bad or came back); ship the changed ones.

        Nothing is finalised here but from a record that says the job ended:
        a job that the scheduler no longer knows at all is left to the next
        reconciliation, which has the full list and the shrink guard."""
        seen = self._seen(JOB)
        ids = list(dict.fromkeys([*jobs.ids, *sorted(self.nodewatch.jobs_on(delta))]))
        ids = [j for j in ids if j not in jobs.records]
        natives: dict[str, Native] = {}
        if ids:
            how = self.reads.mode(ids)
            with no_gc(), self._watch(report, "stat"):
                found = self.reads.read(ids, how)
            report.counts[f"read_{how}"] = 1
            natives = {j: found[j] for j in ids if j in found}
        natives.update(jobs.records)
        with no_gc(), self._watch(report, "fingerprint"):
            fps = fingerprint_all(natives)
            changed = [
                j for j, fp in fps.items() if (s := seen.get(j)) is None or s.fingerprint != fp
            ]
        report.counts.update(targeted_found=len(natives), changed=len(changed))
        records, state_items, update_items, new_seen = self._changed_jobs(
            natives, fps, changed, delta, report, bad
        )
        if probe.complete:  # jobs no longer listed whose record (history) says they ended
            gone = [j for j in ids if j not in probe.named and j in records]
            ended = sum(1 for j in gone if records[j].get("state") in TERMINAL)
            if ended:
                report.add("finalised", ended)
        shipment.add(STATE, JOB, state_items)
        shipment.add(UPDATE, JOB, update_items)
        shipment.then(lambda: self._remember_jobs(new_seen, records, drop=()))
        shipment.then(lambda: self.plan.commit_probe(probe, ids, set(natives)))

    def _changed_jobs(
        self,
        natives: dict[str, Native],
        fps: dict[str, str],
        changed: list[str],
        delta: set[str],
        report: CycleReport,
        bad: dict[str, str],
    ) -> tuple[dict[str, Record], list[Item], list[Item], dict[str, Seen]]:
        """Normalise and classify the changed jobs, and the jobs on nodes that
        just went bad or came back (their reason changes although the
        scheduler's record of them did not)."""
        seen = self._seen(JOB)
        changed = self._not_after_poked_final(changed, report)
        nodes_moved = {j for j in self.nodewatch.jobs_on(delta) if j in natives} - set(changed)
        nodes_moved -= self.poked_finals.keys()
        if nodes_moved:
            changed = changed + sorted(nodes_moved)
            report.add("node_reason", len(nodes_moved))
        with self._watch(report, "normalise"):
            records = self._normalise_jobs(natives, changed, report, bad)
        state_items, update_items, new_seen = classify(
            changed, fps, records, seen, nodes_moved, report
        )
        return records, state_items, update_items, new_seen

    def _jobs(
        self, report: CycleReport, shipment: Shipment, bad: dict[str, str], delta: set[str]
    ) -> None:
        """Tier 3: stat every job; ship the changed and the vanished ones."""
        seen = self._seen(JOB)
        wall_started = self.wall_clock()
        t0 = time.perf_counter()
        with no_gc(), self._watch(report, "stat"):
            natives = self.backend.stat_jobs()
        self.reads.listed(time.perf_counter() - t0)  # what the read budget is measured in
        with no_gc(), self._watch(report, "fingerprint"):
            fps = fingerprint_all(natives)
            changed, vanished = compare(seen, fps)
        report.counts.update(jobs=len(natives), changed=len(changed), vanished=len(vanished))
        self._learn_job_nodes(natives, report)
        records, state_items, update_items, new_seen = self._changed_jobs(
            natives, fps, changed, delta, report, bad
        )
        finals, drop = self._vanished(vanished, natives, report, shipment)
        unseen = self._ended_unseen(natives, report, wall_started)
        shipment.add(STATE, JOB, state_items + finals + unseen)
        shipment.add(UPDATE, JOB, update_items)
        shipment.then(lambda: self._remember_jobs(new_seen, records, drop))
        if self.ended_lister is not None:
            done = [*drop, *(item["id"] for item in unseen)]
            shipment.then(lambda: self._note_window(wall_started, done))

    def _ended_unseen(
        self, natives: dict[str, Native], report: CycleReport, wall_started: float
    ) -> list[Item]:
        """Finals of the jobs that ended in the window since the previous
        reconciliation and that the collector never saw (gone from the live
        list before any stat or poke found them): their first record is
        their final, so the worker sends ``new`` then ``final``.  The first
        reconciliation of a collector that never reconciled has no window."""
        if self.ended_lister is None or self.window_start is None:
            return []
        since = max(
            self.window_start - self.history_overlap, wall_started - self.max_history_window
        )
        with self._watch(report, "history"):
            ended = self.ended_lister.ended_since(since)
        seen = self._seen(JOB)
        fresh = [
            j for j in ended if j not in natives and j not in seen and j not in self.recent_finals
        ]
        records = normalise_many(self.backend.normalise_job, ended, fresh, self.site, report)
        items = [
            chunk.upsert(j, fingerprint(ended[j]), rec, live=False)
            for j, rec in records.items()
            if rec.get("state") in TERMINAL
        ]
        report.counts["ended_in_window"] = len(ended)
        if items:
            report.add("ended_unseen", len(items))
            report.add("finalised", len(items))
        self.recent_finals = {j: t for j, t in self.recent_finals.items() if t >= since}
        return items

    def _note_window(self, wall_started: float, done: list[str]) -> None:
        """A reconciliation shipped: the next window starts where it started;
        the jobs it finalised and forgot are not shipped again by the overlap."""
        self.window_start = wall_started
        now = self.wall_clock()
        for jid in done:
            self.recent_finals[jid] = now
        try:
            if self.lease is None:
                self.redis.hset(self.keys.meta, meta.HISTORY_WINDOW, f"{wall_started:.3f}")
            else:
                guarded = self.lease.guarded()
                guarded.hset(self.keys.meta, meta.HISTORY_WINDOW, f"{wall_started:.3f}").execute()
        except (redis.RedisError, LeaseLost) as exc:  # only a restart's first window is at stake
            log.warning("cannot note the history window: %s", exc)

    def _learn_job_nodes(self, natives: dict[str, Native], report: CycleReport) -> None:
        """After a (re)start: where do the running jobs run?"""
        if self.job_nodes_known:
            return
        seen = self._seen(JOB)
        running = [j for j, s in seen.items() if s.state in ON_NODES and j in natives]
        for jid, rec in normalise_many(
            self.backend.normalise_job, natives, running, "", report
        ).items():
            self.nodewatch.note(jid, rec)
        self.job_nodes_known = True

    def _vanished(
        self,
        vanished: list[str],
        natives: dict[str, Native],
        report: CycleReport,
        shipment: Shipment,
    ) -> tuple[list[Item], list[str]]:
        """Finals for the jobs that left the live list, and the ids to drop.

        The terminal ones were finalised while live; the rest are looked up in
        history.  A list that shrank suspiciously is believed only where
        history confirms."""
        seen = self._seen(JOB)
        gone_done = [oid for oid in vanished if seen[oid].state in TERMINAL]
        active = [oid for oid in vanished if seen[oid].state not in TERMINAL]
        shipment.forget.extend(f"{JOB}:{oid}" for oid in gone_done)
        drop, finals = list(gone_done), []
        if not active:
            return finals, drop
        prev_active = sum(1 for s in seen.values() if s.state not in TERMINAL)
        suspicious = len(active) > 1 and (
            not natives or len(active) > self.shrink_ratio * prev_active
        )
        with self._watch(report, "history"):
            found = self.backend.history(active)
        history = normalise_many(self.backend.normalise_job, found, list(found), self.site, report)
        kept = 0
        for oid in active:
            record = history.get(oid)
            if record is not None and record.get("state") in TERMINAL:
                finals.append(chunk.upsert(oid, fingerprint(found[oid]), record, live=False))
                report.add("finalised")
                drop.append(oid)
            elif record is None and not suspicious and oid not in found:
                finals.append(chunk.vanished(oid))
                report.add("finalised")
                report.add("vanished_no_history")
                drop.append(oid)
            else:  # history says it is alive, or the list is not to be believed
                kept += 1
        if kept:
            report.add("kept", kept)
            if suspicious:
                report.warnings.append(
                    f"live list shrank from {prev_active} to {len(natives)} active jobs:"
                    f" {kept} jobs not confirmed by history stay as they were"
                )
        return finals, drop

    def _nodes_and_queues(
        self, report: CycleReport, shipment: Shipment
    ) -> tuple[dict[str, str], set[str]]:
        """Ship changed nodes and queues; return the bad nodes and which moved."""
        bad, delta = self.nodewatch.bad, set[str]()
        for kind, stat, normalise in (
            (NODE, self.backend.stat_nodes, self.backend.normalise_node),
            (QUEUE, self.backend.stat_queues, self.backend.normalise_queue),
        ):
            try:
                done = self._others(kind, stat, normalise, report, shipment)
            except StatError as exc:  # jobs still go through; nodes wait for next time
                report.warnings.append(f"{kind} stat failed: {exc}")
                continue
            if kind == NODE and done is not None:
                bad, delta = self.nodewatch.plan(*done)
        return bad, delta

    def _others(
        self,
        kind: str,
        stat: Callable[[], dict[str, Native]],
        normalise: Callable[[str, Native], Record],
        report: CycleReport,
        shipment: Shipment,
    ) -> tuple[list[Record], list[str]] | None:
        seen = self._seen(kind)
        with self._watch(report, f"stat_{kind}s"):
            natives = stat()
        if not natives and seen:
            report.warnings.append(f"{kind} list is empty: ignored (had {len(seen)})")
            return None
        fps = fingerprint_all(natives)
        changed, vanished = compare(seen, fps)
        records = normalise_many(normalise, natives, changed, self.site, report, kind)
        items: list[Item] = []
        new_seen = {}
        for oid in changed:
            record = records.get(oid)
            state = (record or {}).get("state") or ""
            new_seen[oid] = Seen(fps[oid], state)
            if record is not None:
                items.append(chunk.upsert(oid, fps[oid], record))
        items.extend(chunk.remove(oid) for oid in vanished)
        report.counts[f"{kind}s"] = len(natives)
        report.counts[f"{kind}s_changed"] = len(items)
        shipment.add(STATE, kind, items)

        def remember() -> None:
            seen.update(new_seen)
            for oid in vanished:
                seen.pop(oid, None)

        shipment.then(remember)
        if kind == NODE and not self.node_states_known:
            # after a (re)start every node's state is needed, not just the changed ones
            others = [oid for oid in natives if oid not in records]
            records.update(normalise_many(normalise, natives, others, self.site, report, kind))
            shipment.then(lambda: setattr(self, "node_states_known", True))
        return list(records.values()), vanished
