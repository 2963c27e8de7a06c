"""How poked jobs are read: the way the backend gives (``PokedReads``), within
the read budget (:class:`~.budget.ReadBudget`), learning what reads cost.

The collector's targeted refresh (``Collector.refresh``) asks this for the
records of the poked jobs it has no carried record for; the follower
(:mod:`.follower`) asks it when to read them (now, or after holding them for
the budget) and whether it may read them beside a running cycle.  The cycle's
reconciliation tells it what a listing cost (:meth:`PokedJobReads.listed`):
that is what the budget is measured in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from ..backends.base import Backend, Native, PokedReads, StatError
from .budget import LISTING, SINGLE_SHARE, SINGLES, ReadBudget

log = logging.getLogger("jobtap.collector")

# The scheduler's read costs are sampled at each reconciliation, after each
# listing follow mode makes, before the budget makes pokes wait for reads whose
# cost it only expects, and otherwise at most every COSTS_EVERY intervals, once
# SAMPLE_AFTER jobs were read one by one since: never when quiet.  A sample is
# one sdiag, 0.1-0.3 ms of slurmctld's time: a listing costs it 5-50.
COSTS_EVERY = 30
SAMPLE_AFTER = 5


class PokedJobReads:
    """The reads of poked jobs for one backend.  ``pushed``: the collector's
    plan leaves the jobs' changes to follow mode (its budget then bounds the
    reads); otherwise poked jobs are read the cheaper way, at once.
    ``probing``: the plan's cycles between reconciliations probe (else every
    cycle lists, and what reads cost is not worth sampling unless pushed)."""

    def __init__(
        self,
        backend: Backend,
        *,
        pushed: bool,
        probing: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.ways: PokedReads = backend.poked_reads()
        self.pushed = pushed
        self.probing = probing
        self.budget = ReadBudget(clock=clock, single_share=SINGLE_SHARE)
        # What reads cost: from the scheduler's figures (``ways.costs``), sampled
        # at most once an interval, else from wall time.
        self._costs_at: float | None = None
        self._costs_ok = self._costs_failed = False
        self._costs_lock = threading.Lock()
        self._reads_since_sample = 0

    # -- when and how -------------------------------------------------------------
    def delay(self, job_ids: Collection[str]) -> float:
        """Seconds to hold these poked jobs before reading them (0: read now):
        the budget for this interval is spent and neither their single reads
        nor one listing fits yet.  Pokes that arrive meanwhile join them."""
        if not self.pushed or not job_ids:
            return 0.0
        return self._choose(len(job_ids), singly=self.ways.singly())[1]

    def beside_cycles(self) -> bool:
        """Whether poked jobs may be read while a cycle runs: a pushed plan
        whose backend reads them one by one and says what that costs (Slurm
        through slurmrestd).  A reconciliation's listing of 10,000 jobs takes
        seconds; a final must not wait for it."""
        return self.pushed and self.ways.costs is not None and self.ways.singly()

    def singly_now(self, job_ids: Collection[str]) -> bool:
        """Whether these poked jobs would be read one by one, now: the budget
        has room for their single reads.  Beside a cycle that is the only read
        follow mode makes; a listing waits for the cycle's end."""
        if not job_ids or not self.beside_cycles():
            return False
        how, wait = self._choose(len(job_ids), singly=True)
        return how == SINGLES and wait <= 0

    def at_hand(self, ids: Collection[str]) -> list[str]:
        """The ids among these whose record the backend builds at no cost."""
        return self.ways.at_hand(ids) if self.ways.at_hand is not None else []

    def mode(self, ids: list[str]) -> str:
        """Read these jobs one by one (``stat_some``) or from one listing: in a
        pushed plan as the budget says, otherwise whichever is cheaper; records
        already at hand one by one, at no cost."""
        if self._all_at_hand(ids):
            return SINGLES
        singly = self.ways.singly()
        if not self.pushed:  # only where the scheduler's own figures say so
            if self.ways.costs is None:
                return SINGLES
            self._sample_costs()
            return self.budget.cheaper(len(ids), singly=singly)
        return self._choose(len(ids), singly=singly)[0]

    def _choose(self, n: int, *, singly: bool) -> tuple[str, float]:
        """The budget's choice for ``n`` poked jobs; before it makes them wait,
        what was read since the last sample is settled at what it cost, so a
        wait rests on measured prices, not expected ones."""
        self._sample_costs()
        how, wait = self.budget.choose(n, singly=singly)
        if wait > 0 and self.budget.unsettled_reads() and self._measured():
            self._sample_costs(force=True)
            how, wait = self.budget.choose(n, singly=singly)
        return how, wait

    # -- reading --------------------------------------------------------------------
    def read(self, ids: list[str], how: str) -> dict[str, Native]:
        """The records of poked jobs: each on its own, or from one full listing
        (and history for those it no longer lists), learning what it cost."""
        budget = self.budget
        free = self._all_at_hand(ids)  # built from what the backend holds: no read at all
        if self.pushed and not free:  # taken as the read starts: the bucket refills
            budget.spend(how, len(ids))
        t0 = time.perf_counter()
        if how == SINGLES:
            natives = self.backend.stat_some(ids)
        else:
            lister = self.ways.listing_of
            listed = lister(ids) if lister is not None else self.backend.stat_jobs()
            natives = {j: listed[j] for j in ids if j in listed}
            gone = [j for j in ids if j not in listed]
            if gone:
                try:
                    natives.update(self.backend.history(gone))
                except StatError as exc:  # left to the next reconciliation
                    log.warning("refresh: history of %d poked jobs failed: %s", len(gone), exc)
        if free:
            return natives
        if not self._measured():  # wall time: measured and settled at once
            took = time.perf_counter() - t0
            budget.learn(how, took, len(ids))
            budget.settle(how, took / len(ids) if how == SINGLES else took)
        self._reads_since_sample += len(ids) if how == SINGLES else SAMPLE_AFTER
        if self._measured():
            if how == LISTING:  # settled at once: amid a burst one costs several quiet ones
                self._sample_costs(force=True)
            elif budget.single is None:  # the first single reads: measured before the next decision
                self._costs_at = None
        return natives

    def listed(self, seconds: float) -> None:
        """A cycle's full listing took ``seconds``: what the budget is measured in
        (the scheduler's own figure where it gives one, sampled now), and, in a
        pushed plan, taken from its bucket: follow mode's reads and the
        reconciliations together stay within a poller's listings."""
        price = self._sample_costs(force=True).get("listing")
        if not self._measured():
            self.budget.learn(LISTING, seconds)
            price = seconds
        if price is not None:
            self.budget.learn_scheduled(price)
            if self.pushed:
                self.budget.charge(price)

    # -- what reads cost ------------------------------------------------------------
    def _all_at_hand(self, ids: list[str]) -> bool:
        return self.ways.at_hand is not None and len(self.ways.at_hand(ids)) == len(ids)

    def _measured(self) -> bool:
        return self.ways.costs is not None and self._costs_ok

    def _sample_costs(self, force: bool = False) -> dict[str, float]:
        """Learn what reads cost from the scheduler's own figures (one cheap
        command), and settle the reads spent since at that: when ``force``d
        (see :data:`COSTS_EVERY`), else at most every ``COSTS_EVERY``
        intervals once ``SAMPLE_AFTER`` reads were made since; without them,
        wall time is used.  Returns the figures sampled now ({} if none)."""
        costs = self.ways.costs
        if costs is None or self._costs_failed:
            return {}
        if not (self.pushed or self.probing):  # every cycle lists: nothing to choose
            return {}
        with self._costs_lock:  # a cycle and the reads beside it (singly_now)
            return self._sample_costs_now(costs, force)

    def _sample_costs_now(
        self, costs: Callable[[], dict[str, float]], force: bool
    ) -> dict[str, float]:
        budget = self.budget
        now = budget.clock()
        every = COSTS_EVERY * budget.interval
        if not force and self._costs_at is not None:
            if now - self._costs_at < every or self._reads_since_sample < SAMPLE_AFTER:
                return {}
        self._costs_at = now
        self._reads_since_sample = 0
        try:
            figures = costs()
        except StatError as exc:
            log.warning("cannot read the scheduler's read costs (%s): wall time used", exc)
            self._costs_failed = True
            self._costs_ok = False
            return {}
        self._costs_ok = True
        for kind, key in ((LISTING, "listing"), (SINGLES, "single")):
            if key in figures:
                budget.learn(kind, figures[key])
                budget.settle(kind, figures[key])
        return figures
