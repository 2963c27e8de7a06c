"""The observation plan's tiers on the simulated cluster: probe cycles stat only
what changed, a reconciliation catches what the probe cannot see, a probe that
fails or prints garbage changes nothing, and everything is checked against the
simulation's ground truth.

The plan's clock is the simulation's, so "every 600 s" means simulated seconds.
Nothing here waits on time: every cycle runs synchronously and ``drain`` applies
what it shipped with a real rq worker before anything is asserted."""

from __future__ import annotations

import pytest

from jobtap.collector.backends.base import PokedReads
from jobtap.collector.cycle import Collector, CycleFailed
from jobtap.collector.follow.budget import LISTING, SINGLES, ReadBudget
from jobtap.collector.plan import PROBE, PUSHED, RECONCILE, ObservationPlan
from jobtap.collector.service import CollectorService
from jobtap.events import changes_of
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from sim.rig.pipeline import check_against_truth, drain, meta, site_events

SITE = "tiers"
K = SiteKeys(SITE)


class Clock:
    """The plan's clock, moved by hand."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def collector(r, backend: SimBackend, clock=None, **kw) -> Collector:
    """A collector on ``backend`` whose plan runs on ``clock`` (default: the
    simulation's).  The simulation first runs a little, so that its warm
    start (every job stamped at the same second) is older than the overlap."""
    sim = backend.simulation
    sim.advance(10)
    kw.setdefault("reconcile_every", 600)
    return Collector(
        backend, r, site=SITE, nodes_every=10**6, clock=clock or (lambda: sim.now), **kw
    )


def job_events(r, job_id: str) -> list[dict]:
    return [e for e in site_events(r, SITE) if e["object_id"] == job_id]


def queued_jobs(backend: SimBackend, n: int) -> list[str]:
    """``n`` queued jobs that are not arrays (stable for a few simulated seconds)."""
    live = backend.simulation.live_jobs()
    ids = [j for j, rec in live.items() if rec["job_state"] == "Q" and "[" not in j]
    assert len(ids) >= n
    return ids[:n]


def test_probe_cycles_stat_only_what_changed(r):
    backend = SimBackend(seed=3, nodes=20, jobs=400, tick=30)
    col = collector(r, backend)
    first = col.run_cycle()
    assert first.tier == RECONCILE and first.counts["jobs"] >= 300
    drain(r, SITE)
    reports = [col.run_cycle() for _ in range(8)]  # 240 simulated seconds
    drain(r, SITE)
    assert [rep.tier for rep in reports] == [PROBE] * 8
    live = backend.simulation.live_count
    for rep in reports:
        # one qselect and at most one qstat of the named jobs, never the full list
        assert rep.costs["probe"][0] == 1
        assert rep.costs.get("stat", [0])[0] <= 1
        assert "jobs" not in rep.counts
        assert rep.counts["targeted"] < live / 2
    assert sum(rep.counts["changed"] for rep in reports) > 0
    assert not any("vanished_no_history" in rep.counts for rep in reports)  # records only
    assert any(e["type"] == "final" for e in site_events(r, SITE)[first.counts["changed"] :])


def test_tiers_against_ground_truth(r):
    """Probe cycles with a reconciliation every ten, some probes failing, lying
    or blind: the stream still says exactly what the jobs did."""
    backend = SimBackend(seed=7, nodes=30, jobs=500, tick=120)
    sim = backend.simulation
    svc = CollectorService(collector(r, backend, reconcile_every=1200), interval=0)
    stat_times = []
    tiers = []
    faults = {7: "probe_fail", 12: "probe_garbage", 17: "probe_blind", 23: "fail"}
    for i in range(40):
        if i in faults:
            backend.fault(faults[i])
        ok = svc.run_one()
        assert ok == (faults.get(i) not in ("probe_fail", "probe_garbage", "fail")), i
        if ok:
            stat_times.append(sim.now)
            tiers.append(meta(r, SITE)["last_tier"])
        if i % 3 == 2:
            drain(r, SITE)
    svc.collector.run_cycle(tier=RECONCILE)  # the last stat sees everything
    stat_times.append(sim.now)
    drain(r, SITE)
    by_job, checked = check_against_truth(r, SITE, sim, stat_times)
    assert checked >= 80, checked
    assert tiers.count(PROBE) >= 30 and tiers.count(RECONCILE) >= 3, tiers
    m = meta(r, SITE)
    assert int(m["cycles_probe"]) == tiers.count(PROBE)
    assert int(m["cycles_failed"]) == 3


def test_a_change_the_probe_cannot_see_is_found_by_the_next_reconciliation(r):
    backend = SimBackend(seed=4, nodes=10, jobs=150, tick=0)
    sim = backend.simulation
    clock = Clock()
    col = collector(r, backend, clock=clock)
    col.run_cycle()
    drain(r, SITE)
    hidden, marker = queued_jobs(backend, 2)
    sim.advance(2)
    sim.alter(hidden, "comment", "changed without moving mtime", moves_mtime=False)
    sim.alter(marker, "comment", "a change qselect sees")
    clock.t += 5
    rep = col.run_cycle()
    drain(r, SITE)
    assert rep.tier == PROBE
    # the marker's change, made after the hidden one, arrived; the hidden one did not
    assert [changes_of(e).get("comment") for e in job_events(r, marker)][-1][1] == (
        "a change qselect sees"
    )
    assert [e["type"] for e in job_events(r, hidden)] == ["new"]
    clock.t += 600
    rep = col.run_cycle()
    drain(r, SITE)
    assert rep.tier == RECONCILE
    last = job_events(r, hidden)[-1]
    assert last["type"] == "update"
    assert changes_of(last)["comment"][1] == "changed without moving mtime"


def test_a_clock_skew_past_the_overlap_is_caught_by_the_reconciliation(r):
    """The collector's clock runs 30 s ahead of the server's, the overlap is
    2 s: a change made just after a probe falls outside the next probe's
    window, and the reconciliation ships it."""
    backend = SimBackend(seed=8, nodes=10, jobs=150, tick=0, clock_skew=30, overlap=2)
    sim = backend.simulation
    clock = Clock()
    col = collector(r, backend, clock=clock)
    col.run_cycle()
    drain(r, SITE)
    (job,) = queued_jobs(backend, 1)
    sim.advance(1)
    sim.alter(job, "Job_Name", "renamed")
    sim.advance(4)
    clock.t += 5
    rep = col.run_cycle()
    drain(r, SITE)
    assert rep.tier == PROBE and job not in col.plan.signatures
    assert rep.counts["targeted"] == 0 and rep.counts.get("chunks", 0) == 0
    assert [e["type"] for e in job_events(r, job)] == ["new"]
    clock.t += 600
    assert col.run_cycle().tier == RECONCILE
    drain(r, SITE)
    assert job_events(r, job)[-1]["record"]["name"] == "renamed"


@pytest.mark.parametrize("fault", ["probe_fail", "probe_garbage", "fail"])
def test_a_failed_probe_or_targeted_stat_changes_nothing_and_finalises_nothing(r, fault):
    """A probe that fails or prints garbage, or a targeted stat that fails,
    fails the cycle: nothing is shipped, nothing is remembered, and the next
    probe finds the same changes (jobs that ended included)."""
    backend = SimBackend(seed=6, nodes=10, jobs=200, tick=0)
    sim = backend.simulation
    col = collector(r, backend, clock=Clock())
    col.run_cycle()
    drain(r, SITE)
    before = r.xlen(K.events)
    since, seen = col.plan.since, dict(col.ledger.of("job"))
    ended = sum(sim.stats[state] for state in ("completed", "failed", "cancelled"))
    for _ in range(40):  # jobs start, get held... until one has ended too
        sim.advance(15)
        if sum(sim.stats[state] for state in ("completed", "failed", "cancelled")) > ended:
            break
    backend.fault(fault)
    with pytest.raises(CycleFailed):
        col.run_cycle()
    drain(r, SITE)
    assert r.xlen(K.events) == before
    assert col.plan.since == since and col.ledger.of("job") == seen
    rep = col.run_cycle()
    drain(r, SITE)
    assert rep.tier == PROBE and rep.counts["changed"] > 0
    finals = [e for e in site_events(r, SITE)[before:] if e["type"] == "final"]
    assert finals, "the jobs that ended meanwhile were found by the next probe"


def test_a_probe_naming_too_many_jobs_becomes_a_reconciliation(r):
    backend = SimBackend(seed=9, nodes=10, jobs=200, tick=0)
    col = collector(r, backend, clock=Clock(), max_targeted=5)
    col.run_cycle()
    drain(r, SITE)
    backend.simulation.advance(900)
    rep = col.run_cycle()
    assert rep.tier == RECONCILE and rep.counts["escalated"] == 1
    assert rep.counts["jobs"] == backend.simulation.live_count


def test_follow_mode_refreshes_poked_jobs_without_a_full_listing(r):
    backend = SimBackend(seed=10, nodes=10, jobs=100, tick=0)
    col = collector(r, backend)
    col.run_cycle()
    drain(r, SITE)
    (job,) = queued_jobs(backend, 1)
    backend.simulation.alter(job, "comment", "poked")
    rep = col.refresh([job])
    drain(r, SITE)
    assert rep.costs["stat"][0] == 1 and rep.counts["changed"] == 1
    assert changes_of(job_events(r, job)[-1])["comment"][1] == "poked"


def test_meta_and_status_say_which_tier_ran_and_what_it_cost(r, redis_server):
    from click.testing import CliRunner

    from jobtap.cli.status import status

    backend = SimBackend(seed=11, nodes=10, jobs=100, tick=30, measure=True)
    svc = CollectorService(collector(r, backend), interval=5, backend_name="sim")
    svc.write_meta_start()
    for _ in range(3):
        assert svc.run_one()
    m = meta(r, SITE)
    assert m["last_tier"] == PROBE and m["cycles_reconcile"] == "1" and m["cycles_probe"] == "2"
    assert int(m["reconcile_last_bytes"]) > int(m["probe_last_bytes"]) > 0
    out = CliRunner().invoke(status, ["--redis", redis_server.url, "--site", SITE]).output
    probe_line = next(line for line in out.splitlines() if "probe" in line)
    reconcile_line = next(line for line in out.splitlines() if "reconcile" in line)
    assert "*probe" in probe_line and "every 5s" in probe_line and "(2 cycles)" in probe_line
    assert "every 600.0s" in reconcile_line and "commands" in reconcile_line


def test_a_pushed_plan_reconciles_at_start_then_every_reconcile_every():
    clock = Clock()
    plan = ObservationPlan(reconcile_every=60, pushed=True, clock=clock)
    tiers = []
    for _ in range(14):  # a cycle every 5 s; a reconciliation commits when it ships
        tier = plan.tier()
        tiers.append(tier)
        if tier == RECONCILE:
            plan.commit_reconcile(None, clock.t)
        clock.t += 5
    assert tiers == [RECONCILE] + [PUSHED] * 11 + [RECONCILE, PUSHED]
    assert ObservationPlan(reconcile_every=0, pushed=True).tier() == RECONCILE
    assert not ObservationPlan(reconcile_every=0, pushed=True).pushed


def test_a_pushed_plan_lists_no_job_between_reconciliations(r, redis_server):
    """Follow mode on a scheduler whose probe costs it a full stat (Slurm):
    between two reconciliations a cycle runs no job command at all; a poked
    job's change comes by the refresh, an unpoked one's by the next
    reconciliation; meta and ``jobtap status`` say so."""
    from click.testing import CliRunner

    from jobtap.cli.status import status

    backend = SimBackend(seed=12, nodes=10, jobs=100, tick=0, measure=True)
    clock = Clock()
    svc = CollectorService(
        collector(r, backend, clock=clock, pushed=True), interval=5, backend_name="sim"
    )
    svc.write_meta_start()
    assert svc.run_one()
    drain(r, SITE)
    poked, unpoked = queued_jobs(backend, 2)
    backend.simulation.alter(unpoked, "comment", "no hook saw this")
    backend.simulation.alter(poked, "comment", "poked")
    clock.t += 5
    assert svc.run_one()
    m = meta(r, SITE)
    assert (m["last_tier"], m["pushed_last_commands"], m["pushed_last_jobs"]) == (PUSHED, "0", "0")
    svc.collector.refresh([poked])
    drain(r, SITE)  # everything shipped so far is applied
    assert changes_of(job_events(r, poked)[-1])["comment"][1] == "poked"
    assert [e["type"] for e in job_events(r, unpoked)] == ["new"]
    out = CliRunner().invoke(status, ["--redis", redis_server.url, "--site", SITE]).output
    pushed_line = next(line for line in out.splitlines() if "pushed" in line)
    assert "*pushed" in pushed_line and "no job listing" in pushed_line, out
    assert "(1 cycle)" in pushed_line and not any("probe " in line for line in out.splitlines())

    clock.t += 600
    assert svc.run_one()
    drain(r, SITE)
    assert meta(r, SITE)["last_tier"] == RECONCILE
    assert changes_of(job_events(r, unpoked)[-1])["comment"][1] == "no hook saw this"


def test_without_its_probe_command_the_collector_stats_every_job(tmp_path, monkeypatch, r):
    """PBS without qselect: the first probe cycle says so once (a warning in
    meta) and becomes a full stat; every later cycle is one too."""
    from sim.rig.paths import fixtures_dir
    from sim.rig.pipeline import FakePBS

    pbs = FakePBS(tmp_path, fixtures_dir() / "pbs", monkeypatch)
    pbs.set("10-busy")
    col = Collector(pbs.backend(qselect=str(tmp_path / "no-qselect")), r, site=SITE)
    svc = CollectorService(col, interval=5, backend_name="pbs")
    assert svc.run_one() and svc.run_one()
    m = meta(r, SITE)
    assert m["last_tier"] == RECONCILE and m["cycles_reconcile"] == "2"
    assert "no probe" in m["last_warning"] and "command not found" in m["last_warning"]
    assert svc.run_one() and meta(r, SITE)["last_warning"] == ""  # said once
    assert meta(r, SITE)["cycles_reconcile"] == "3"


# Follow mode's read budget (plan.ReadBudget) ----------------------------------------
def test_the_read_budget_reads_the_cheaper_way_within_one_listing_an_interval():
    """Per interval, reading poked jobs costs at most one listing: the
    cheaper of single reads and one listing, at once if its cost is in the
    bucket, else after a wait (never longer than an interval) while pokes
    gather; never bounded below ``floor`` of the scheduler's time."""
    clock = Clock()
    budget = ReadBudget(interval=2.0, clock=clock)
    assert budget.choose(500) == (SINGLES, 0.0)  # nothing measured yet: not bounded
    budget.learn(LISTING, 0.010)
    budget.learn(SINGLES, 0.003, jobs=3)  # 1 ms a job; the bucket holds 10 ms
    assert budget.choose(3) == (SINGLES, 0.0)
    budget.spend(SINGLES, 3)  # 7 ms left
    how, wait = budget.choose(9)  # 9 ms of single reads: not yet
    assert how == SINGLES and wait == pytest.approx((9 - 7) / 10 * 2)
    clock.t += wait
    assert budget.choose(9) == (SINGLES, 0.0)
    budget.spend(SINGLES, 9)
    clock.t += 2.0  # full again
    assert budget.choose(50) == (LISTING, 0.0)  # 50 ms of singles: one listing instead
    budget.spend(LISTING, 50)
    how, wait = budget.choose(50)
    assert how == LISTING and wait == pytest.approx(2.0)  # one interval, at most
    how, wait = budget.choose(1)
    assert how == SINGLES and wait == pytest.approx(1 / 10 * 2)
    # Without single reads (no slurmrestd) every read is a listing, bounded the same.
    assert budget.choose(1, singly=False)[0] == LISTING
    # A queue whose listing costs next to nothing: bounded at 0.1% of the
    # scheduler's time (30 ms an interval of 30 s), and listed, the cheaper way.
    tiny = ReadBudget(interval=30.0, clock=clock)
    tiny.learn(LISTING, 0.0002)
    tiny.learn(SINGLES, 0.0003)
    assert tiny.capacity == pytest.approx(0.030)
    for _ in range(8):
        how, wait = tiny.choose(1)
        assert (how, wait) == (LISTING, 0.0)
        tiny.spend(how, 1)


def test_the_read_budget_bounds_a_burst_to_one_listing_an_interval():
    """A burst of pokes, ten a second for a minute, served as the collector's
    loop serves them (hold while the budget says so, gathering the pokes):
    what the reads cost stays within one listing's worth per interval plus
    the bucket, and no poke waits longer than an interval plus a step."""
    clock = Clock()
    budget = ReadBudget(interval=2.0, clock=clock)
    budget.learn(LISTING, 0.005)
    budget.learn(SINGLES, 0.0005)  # a listing is worth 10 single reads
    pending: list[float] = []  # when each pending poke arrived
    spent, waits, listings = 0.0, [], 0
    step = 0.05
    while clock.t < 60:
        pending += [clock.t] * (1 if round(clock.t / step) % 2 else 0)  # 10 pokes a second
        if pending and budget.choose(len(pending))[1] == 0:
            how, _ = budget.choose(len(pending))
            spent += budget.cost(how, len(pending))
            listings += how == LISTING
            budget.spend(how, len(pending))
            waits += [clock.t - t for t in pending]
            pending = []
        clock.t += step
    assert spent <= 0.005 * (60 / 2 + 1)
    assert max(waits) <= 2.0 + step
    assert listings >= 20  # the burst is read by listings, not one job at a time


def test_the_read_budget_settles_each_read_at_what_it_cost():
    """A read is taken from the bucket at its expected price and settled at the
    measured one: a burst's listing that cost five quiet ones leaves the
    bucket in debt (five intervals' worth at most) and the next read waits
    for the debt first; reads that cost less than expected give the rest
    back; a reconciliation's listing is taken from the same bucket."""
    clock = Clock()
    budget = ReadBudget(interval=2.0, clock=clock)
    budget.learn(LISTING, 0.010)
    budget.learn(SINGLES, 0.001)
    assert budget.choose(50) == (LISTING, 0.0)
    budget.spend(LISTING, 50)  # 10 ms expected: the bucket is empty
    budget.settle(LISTING, 0.050)  # it cost 50: 40 ms of debt
    how, wait = budget.choose(50)
    assert how == LISTING and wait == pytest.approx(10.0)  # the debt, then the listing
    budget.settle(LISTING, 0.050)  # nothing left to settle: no change
    assert budget.choose(50)[1] == pytest.approx(10.0)
    clock.t += 10.0
    assert budget.choose(50) == (LISTING, 0.0)
    budget.spend(SINGLES, 3)  # 3 ms expected, 7 left
    assert budget.choose(9)[1] > 0
    budget.settle(SINGLES, 0.0002)  # 0.6 ms: 2.4 given back, 9.4 left
    assert budget.choose(9) == (SINGLES, 0.0)
    budget.charge(0.008)  # a reconciliation's listing: 1.4 left
    assert budget.choose(1) == (SINGLES, 0.0)
    assert budget.choose(9)[1] > 0
    budget.charge(1.0)  # a listing that stalled: five intervals of debt, no more
    assert budget.choose(1)[1] == pytest.approx((0.001 + 0.050) * 2 / 0.010)


def test_the_read_budget_holds_what_a_scheduled_listing_costs():
    """The bucket holds what a listing made on a schedule costs (a
    reconciliation's, as a poller's): the dearer listings follow mode makes
    amid a burst raise the price it expects of a listing, not the bucket, so
    its own reads cannot widen their bound."""
    budget = ReadBudget(interval=2.0, clock=Clock())
    budget.learn(LISTING, 0.010)
    assert budget.capacity == pytest.approx(0.010)  # no scheduled one yet: any listing's
    budget.learn_scheduled(0.010)
    for _ in range(10):
        budget.learn(LISTING, 0.060)  # follow mode's own, amid a burst
    assert budget.listing == pytest.approx(0.060, rel=0.05)
    assert budget.capacity == pytest.approx(0.010)
    budget.learn_scheduled(0.060)  # a reconciliation in a long burst pays it too
    assert budget.capacity == pytest.approx(0.010 + 0.3 * 0.050)


class PricedSim(SimBackend):
    """The simulated cluster with a scheduler that says what each kind of read
    cost it since it was last asked (as Slurm's ``sdiag``): ``prices``, set by
    the test, is what the next call says."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.prices: dict[str, float] = {}
        self.asked = 0

    def poked_reads(self) -> PokedReads:
        return PokedReads(costs=self.read_costs)

    def read_costs(self) -> dict[str, float]:
        self.asked += 1
        return dict(self.prices)


def test_follow_mode_pays_a_listing_at_what_it_cost_and_the_reconciliation_too(r):
    """With the scheduler's own figures: the reconciliation's listing is taken
    from follow mode's bucket; a listing made for poked jobs is settled at
    once from a fresh sample, so after one that cost five times the last
    reconciliation's, the next poked job waits longer than an interval; a
    wait decided with nothing left to settle asks the scheduler nothing."""
    backend = PricedSim(seed=11, nodes=10, jobs=100, tick=0)
    clock = Clock()
    col = collector(r, backend, clock=clock, pushed=True)
    budget = col.reads.budget
    budget.interval = 2.0
    backend.prices = {"listing": 0.010, "single": 0.001}
    col.run_cycle()  # a reconciliation, its listing priced at 10 ms and paid
    drain(r, SITE)
    assert budget.listing == pytest.approx(0.010) and backend.asked == 1
    jobs = queued_jobs(backend, 30)
    assert col.reads.delay(jobs[:1]) > 0  # the reconciliation took this interval's worth
    clock.t += 2.0
    assert col.reads.delay(jobs) == 0.0  # full again: 30 jobs read by one listing, now
    for job in jobs:
        backend.simulation.alter(job, "comment", "poked")
    backend.prices = {"listing": 0.050}  # a listing amid a burst of starts
    rep = col.refresh(jobs)
    assert rep.counts["read_listing"] == 1 and backend.asked == 2  # sampled right after
    wait = col.reads.delay(jobs[:1])
    assert wait > budget.interval  # the debt first, then the read
    assert col.reads.delay(jobs[:1]) == pytest.approx(wait) and backend.asked == 2
    drain(r, SITE)
    for job in jobs:
        assert [changes_of(e).get("comment") for e in job_events(r, job)][-1][1] == "poked"


class CountingSim(SimBackend):
    """The simulated cluster, counting full listings and targeted stats."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.calls = {"stat_jobs": 0, "stat_some": 0}

    def stat_jobs(self):
        self.calls["stat_jobs"] += 1
        return super().stat_jobs()

    def stat_some(self, job_ids):
        self.calls["stat_some"] += 1
        return super().stat_some(job_ids)


def test_a_pushed_refresh_reads_a_burst_of_poked_jobs_from_one_listing(r):
    """The collector's refresh follows the budget: a few poked jobs are read
    on their own, a burst of them from one listing, each shipped once either
    way; a plan that is not pushed keeps reading poked jobs on their own."""
    backend = CountingSim(seed=10, nodes=10, jobs=100, tick=0)
    clock = Clock()
    col = collector(r, backend, clock=clock, pushed=True)
    col.run_cycle()  # a reconciliation: the first listing measured
    drain(r, SITE)
    budget = col.reads.budget
    assert budget.listing is not None and budget.reference is not None
    budget.single_share = 0.0  # priced as measured
    budget.reference = 1.0  # the bucket holds one listing
    budget.listing, budget.single = 1.0, 0.1  # a listing is worth ten single reads
    jobs = queued_jobs(backend, 30)
    for job in jobs:
        backend.simulation.alter(job, "comment", "poked")
    backend.calls.update(stat_jobs=0, stat_some=0)
    rep = col.refresh(jobs[:3])
    assert rep.counts["read_singles"] == 1 and backend.calls == {"stat_jobs": 0, "stat_some": 1}
    clock.t += 100  # the bucket is full again
    budget.listing, budget.single = 1.0, 0.1
    rep = col.refresh(jobs[3:])
    assert rep.counts["read_listing"] == 1 and backend.calls == {"stat_jobs": 1, "stat_some": 1}
    assert rep.counts["changed"] == 27
    budget.listing, budget.single = 1.0, 0.1
    assert col.reads.delay(jobs) > 0  # spent: the next pokes wait
    drain(r, SITE)
    for job in jobs:
        assert [changes_of(e).get("comment") for e in job_events(r, job)][-1][1] == "poked"
    polled = collector(r, CountingSim(seed=10, nodes=10, jobs=100, tick=0), pushed=False)
    assert polled.reads.delay(jobs) == 0.0


def test_a_single_read_is_priced_at_least_a_share_of_a_listing():
    """Reads that follow a job's start or end cost the scheduler more than
    their average: priced at half a listing at least, two poked jobs are read
    by one listing, one on its own."""
    budget = ReadBudget(interval=2.0, single_share=0.5, clock=Clock())
    budget.learn(LISTING, 0.010)
    budget.learn(SINGLES, 0.0005)
    assert budget.cost(SINGLES, 1) == pytest.approx(0.005)
    assert budget.choose(1) == (SINGLES, 0.0)
    assert budget.cheaper(3) == LISTING
