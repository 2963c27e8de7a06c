"""Follow mode's read budget: what reading poked jobs may cost the scheduler."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

SINGLES = "singles"
LISTING = "listing"
# The least a single read is priced at, as a share of a listing.  On Slurm 22.05 with
# 2,000 jobs queued, a read through slurmrestd (REQUEST_JOB_INFO_SINGLE and its
# REQUEST_FED_INFO) cost slurmctld 0.4 ms at one job a second, a twelfth of a 5 ms
# listing (docs/performance.md, "Slurm follow mode across churn rates"); half a
# listing, the price until then (set when each poke started a Python process and
# reads cost up to a third of a listing), made two pokes a listing and held pokes
# back for the budget.
SINGLE_SHARE = 0.1


class ReadBudget:
    """Follow mode's bound on what reading poked jobs costs the scheduler: per
    ``interval``, at most ``share`` of one full listing made on a schedule (a
    reconciliation's: what a poller's listing every interval costs), the
    collector's own reconciliations included, but never less than ``floor``
    of the scheduler's time (0.1%: below that nothing is worth a delay; it
    matters only for queues of a few hundred jobs or fewer, whose listing
    costs slurmctld well under a millisecond).

    A token bucket in seconds of the scheduler's time that holds that much
    and refills at that much per interval.  For ``n`` poked jobs the plan
    takes the cheaper way to read them, one by one or one listing that
    refreshes every poked job, and reads at once if its cost is in the
    bucket; otherwise the pokes wait until it is, and whatever is poked
    meanwhile is read with them: pokes coalesce across jobs, not only per
    job.  So a burst costs at most a poller's listings, and a quiet time
    costs the single reads of the few jobs that changed.

    What a read costs is learnt from what it took: an exponentially weighted
    mean (``weight`` for the newest measurement) of the scheduler's own
    figures where the backend gives them (``PokedReads.costs``), else of
    the wall time of the commands.  A single read is priced at no less than
    ``single_share`` of a listing (:data:`SINGLE_SHARE` in a plan): until the
    first single reads are measured the price guards against a listing's worth
    of them in one go.  Until a listing was measured, nothing is bounded (every
    read is a single one, as before).

    A read is taken from the bucket at its expected price when it is made
    (:meth:`spend`) and settled at what it cost once that is measured
    (:meth:`settle`); a reconciliation's listing is taken at what it cost
    (:meth:`charge`).  Reads made as slurmctld handles a burst of starts and
    ends wait for its locks: on 24.11 with 2,000 jobs queued a listing then
    cost it 30-70 ms against 7-15 on a schedule, a single read 2-16 ms
    against 0.1, and each read follow mode added made the others dearer.  So
    the bucket holds a scheduled listing's price, not the price follow
    mode's own listings pay, and it may go into debt by up to ``max_debt``
    intervals' worth, which the next reads wait out (a slurmctld that
    stalled one listing for seconds must not stop follow mode for minutes)."""

    def __init__(
        self,
        *,
        interval: float = 5.0,
        share: float = 1.0,
        floor: float = 0.001,
        single_share: float = 0.0,
        weight: float = 0.3,
        max_debt: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval = float(interval)
        self.share = float(share)
        self.floor = float(floor)
        self.single_share = float(single_share)
        self.weight = float(weight)
        self.max_debt = float(max_debt)
        self.clock = clock
        self.single: float | None = None  # per job read on its own
        self.listing: float | None = None  # per full listing
        # Per listing made on a schedule (a reconciliation's), as a poller's are:
        # what the bucket holds.  Follow mode lists as the scheduler handles the
        # starts and ends it was poked about, and its own reads make those
        # listings dearer; the bucket must not grow with them.
        self.reference: float | None = None
        self.tokens = 0.0
        self.stamp: float | None = None
        # Reads taken from the bucket at their expected price and not yet
        # settled at what they cost: kind -> (jobs or listings, seconds taken).
        self.unsettled: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def learn(self, kind: str, seconds: float, jobs: int = 1) -> None:
        """A read of ``kind`` took ``seconds`` (for ``jobs`` jobs, if single)."""
        if seconds < 0:
            return
        per = seconds / max(1, jobs) if kind == SINGLES else seconds
        if kind == SINGLES:
            self.single = self._mean(self.single, per)
        else:
            self.listing = self._mean(self.listing, per)

    def learn_scheduled(self, seconds: float) -> None:
        """A listing made on a schedule (a reconciliation's) cost ``seconds``:
        what the bucket holds (its price is learnt apart, with :meth:`learn`)."""
        if seconds >= 0:
            self.reference = self._mean(self.reference, seconds)

    def _mean(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.weight * (new - old)

    @property
    def capacity(self) -> float:
        """What the bucket holds: one interval's worth, a scheduled listing's
        (until one was measured, any listing's)."""
        price = self.reference or self.listing
        if not price:
            return float("inf")
        return max(self.share * price, self.floor * self.interval)

    def _refill(self) -> None:
        now = self.clock()
        cap = self.capacity
        if cap == float("inf"):
            self.tokens = 0.0
        elif self.stamp is None:
            self.tokens = cap
        else:
            self.tokens = min(cap, self.tokens + (now - self.stamp) * cap / self.interval)
        self.stamp = now

    def cost(self, how: str, n: int) -> float:
        """What reading ``n`` jobs ``how`` is expected to cost."""
        if how == LISTING:
            return self.listing or 0.0
        return n * max(self.single or 0.0, self.single_share * (self.listing or 0.0))

    def cheaper(self, n: int, *, singly: bool = True) -> str:
        """The cheaper way to read ``n`` jobs: one by one unless one listing is
        expected to cost less (or the backend cannot read them one by one)."""
        if not singly:
            return LISTING
        if self.listing is None or self.single is None:
            return SINGLES
        return LISTING if self.cost(SINGLES, n) > self.listing else SINGLES

    def choose(self, n: int, *, singly: bool = True) -> tuple[str, float]:
        """How to read ``n`` poked jobs (the cheaper way), and how long to
        wait first for the bucket to hold its cost (0.0: read now)."""
        how = self.cheaper(n, singly=singly)
        if self.listing is None or n <= 0:
            return how, 0.0
        with self._lock:
            self._refill()
            tokens = self.tokens
        cap = self.capacity
        # A read never needs more than one interval's worth; in debt it waits
        # for the debt to be paid first.
        cost = min(self.cost(how, n), cap)
        if cost <= tokens:
            return how, 0.0
        return how, (cost - tokens) * self.interval / cap

    def spend(self, how: str, n: int) -> None:
        """A read of ``n`` jobs ``how`` is made: take its expected cost from
        the bucket; :meth:`settle` corrects it."""
        if self.listing is None:
            return
        cost = self.cost(how, n)
        self._take(cost)
        with self._lock:
            count, taken = self.unsettled.get(how, (0, 0.0))
            self.unsettled[how] = (count + (n if how == SINGLES else 1), taken + cost)

    def settle(self, how: str, price: float) -> None:
        """The reads of kind ``how`` spent since the last settling cost
        ``price`` each (per job read on its own, per listing): give back what
        was taken beyond that, or take the rest, down to ``max_debt``
        intervals' worth of debt."""
        with self._lock:
            count, taken = self.unsettled.pop(how, (0, 0.0))
        if count and self.listing is not None and price >= 0:
            self._take(count * price - taken)

    def charge(self, seconds: float) -> None:
        """A read outside follow mode that the bound covers (a reconciliation's
        listing) cost ``seconds``: take it from the bucket."""
        if self.listing is not None and seconds > 0:
            self._take(seconds)

    def unsettled_reads(self) -> bool:
        """Whether reads were spent at an expected price not yet settled."""
        return bool(self.unsettled)

    def _take(self, seconds: float) -> None:
        with self._lock:  # follow mode's reads beside a cycle, and the cycle's listing
            self._refill()
            cap = self.capacity
            self.tokens = max(-self.max_debt * cap, min(cap, self.tokens - seconds))
