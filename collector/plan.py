"""The observation plan: which tier a collector cycle runs, and what the probe
tier remembers between cycles.

Three tiers, each a separate step that the cycle (``cycle.py``) composes:

1. **probe**: every interval, the backend's cheap probe of what changed
   (:class:`~jobtap.collector.backends.base.Probe`);
2. **targeted stat**: full records of just the jobs the probe names
   (``backend.stat_some``): changed ones, new ones, and active ones a listing
   probe no longer lists;
3. **reconciliation**: the full stat of every job (the first version's whole
   cycle), at start, every ``reconcile_every`` seconds, and whenever a probe
   names more jobs than a targeted stat is worth.

A plan may be **pushed** instead of probing: the cycles between two
reconciliations then stat no jobs at all (only the jobs on nodes that just
went bad or came back), because follow mode's pokes bring each job's changes.
That is the plan for a scheduler whose probe costs it as much as a full stat:
Slurm 22.05 answers any ``squeue`` listing, text or JSON, with the one
REQUEST_JOB_INFO that packs every job, so a probe every interval saves the
client's work but none of slurmctld's (docs/performance.md).  The slurmctld
hook pokes each job as it starts and ends; what no hook sees (a submission, a
hold, an edited limit) waits for the next reconciliation.

The plan only decides what is stat'ed.  Fingerprints, normalisation, shipping,
versions and events are the same whichever tier saw a change, so a change seen
by a probe is not shipped again by the next reconciliation.  What a probe
cannot see (an attribute that does not move PBS's ``mtime``, a clock skew past
the overlap, a field outside Slurm's probe line) is found by the next
reconciliation.

A probe never decides anything by itself: it only names jobs.  A job is
finalised from a record that says it ended (targeted stat or history), or, for
"vanished without history", by a reconciliation and its shrink guard; a probe
that fails raises and changes nothing.

What the plan remembers (the ``since`` of the next probe, the signatures of a
listing probe, when the last reconciliation ran) is committed only after the
cycle's chunks are shipped, like the ledger: a cycle that fails at any step
leaves the next probe to find the same changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from jobtap.schema import TERMINAL

from .backends.base import Native, Probe
from .ledger import Seen

RECONCILE = "reconcile"
PROBE = "probe"
PUSHED = "pushed"
TIERS = (RECONCILE, PROBE, PUSHED)


def _active(seen: Seen | None) -> bool:
    """Worth a stat: not known yet, or known and not finalised."""
    return seen is None or seen.state not in TERMINAL


@dataclass
class ProbeJobs:
    """What a probe cycle stats: ``ids`` through the backend's targeted stat,
    and the ``records`` the probe already carries."""

    ids: list[str]
    records: dict[str, Native]

    def __len__(self) -> int:
        return len(self.ids) + len(self.records)


class ObservationPlan:
    """Chooses each cycle's tier and remembers what the probe needs.

    ``reconcile_every``: seconds between full reconciliations (0: every cycle
    is one, the probe is never used).  ``probing``: whether the backend has a
    probe at all.  ``pushed``: between reconciliations, rely on pokes and stat
    no jobs (the probe is then not used).  ``max_targeted``: a probe that
    names more jobs than this, or more than ``max_share`` of the active jobs
    the collector knows, turns the cycle into a reconciliation (one full stat
    costs less than that many targeted ones, and a probe gone wrong must not
    fan out into a stat per job).  ``clock``: seconds, monotonic.
    """

    def __init__(
        self,
        *,
        reconcile_every: float = 60.0,
        probing: bool = True,
        pushed: bool = False,
        max_targeted: int = 5000,
        max_share: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if reconcile_every < 0:
            raise ValueError("reconcile_every must be >= 0")
        self.reconcile_every = float(reconcile_every)
        self.probing = bool(probing) and reconcile_every > 0
        self.pushed = bool(pushed) and reconcile_every > 0
        self.max_targeted = int(max_targeted)
        self.max_share = float(max_share)
        self.clock = clock
        self.last_reconcile: float | None = None
        self.since: float | None = None
        self.signatures: dict[str, str] = {}

    def reset(self) -> None:
        """Forget everything: the next cycle reconciles (a (re)start, or Redis
        lost the site's data)."""
        self.last_reconcile = None
        self.since = None
        self.signatures = {}

    # -- choosing --------------------------------------------------------------------
    def tier(self) -> str:
        """The tier the next cycle runs."""
        if self.last_reconcile is None or not (self.pushed or self.probing):
            return RECONCILE
        if self.clock() - self.last_reconcile >= self.reconcile_every:
            return RECONCILE
        return PUSHED if self.pushed else PROBE

    def probe_since(self, tier: str) -> float | None:
        """What to pass to ``backend.probe``: a reconciliation asks for a fresh
        baseline (None), a probe cycle for what changed since the last one."""
        return self.since if tier == PROBE else None

    def probe_jobs(self, probe: Probe, seen: dict[str, Seen]) -> ProbeJobs:
        """The jobs a probe cycle must stat, in the order the probe named them.

        Jobs the collector has already finalised are left out (nothing is
        applied after a final).  A listing probe adds the jobs whose signature
        moved, the new ones, and the active jobs it no longer lists (gone from
        the live list: the targeted stat looks them up in history)."""
        records = {j: r for j, r in probe.records.items() if _active(seen.get(j))}
        if probe.complete:
            known = self.signatures
            ids = [
                j
                for j, sig in probe.named.items()
                if j not in records and known.get(j) != sig and _active(seen.get(j))
            ]
            listed = probe.named
            ids += [
                j
                for j, s in seen.items()
                if j not in listed and j not in records and s.state not in TERMINAL
            ]
        else:
            ids = [j for j in probe.named if j not in records and _active(seen.get(j))]
        return ProbeJobs(ids, records)

    def too_many(self, jobs: ProbeJobs, seen: dict[str, Seen]) -> bool:
        """Whether a full stat is the better way to get these records."""
        n = len(jobs)
        if n > self.max_targeted:
            return True
        active = sum(1 for s in seen.values() if s.state not in TERMINAL)
        return active >= 10 and n > self.max_share * active

    # -- remembering (only once the cycle's chunks are shipped) ----------------------
    def commit_probe(self, probe: Probe, asked: list[str], found: set[str]) -> None:
        """A probe cycle shipped: move ``since`` on; remember the listing's
        signatures, except for the jobs that were asked for and not found
        (they are asked for again next time)."""
        if probe.until is not None:
            self.since = probe.until
        if probe.complete:
            missing = set(asked) - found
            self.signatures = {j: s for j, s in probe.named.items() if j not in missing}

    def commit_reconcile(self, probe: Probe | None, started: float) -> None:
        """A reconciliation that started at ``started`` (``clock()``) shipped:
        its probe, taken before the full stat, is the next probe's baseline."""
        self.last_reconcile = started
        self.since = probe.until if probe is not None else None
        self.signatures = dict(probe.named) if probe is not None and probe.complete else {}
