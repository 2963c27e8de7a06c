"""The collector's tiers on each real Slurm of the machine (22.05, 24.11): the
probe (one compact ``squeue`` line per job, or from 23.11 ``squeue
--only-job-state``), records of just the jobs whose line or state moved
(``slurmrestd``, one single-job RPC each), ``squeue --json`` only for the
reconciliation; checked with slurmctld's own counters (``sdiag``).

Slurm: the ``slurm`` and ``clean`` fixtures of tests/live/conftest.py."""

from __future__ import annotations

import pytest

from jobtap.collector.cycle import CycleReport
from jobtap.collector.plan import PROBE, RECONCILE
from sim.rig.pipeline import drain, meta
from sim.rig.slurm import SITE, Harness, _cmd, cluster, sbatch, sdiag_rpcs
from sim.rig.wait import eventually

pytestmark = pytest.mark.timeout(900)  # the first test may wait for the lock

FULL = "REQUEST_JOB_INFO"  # the RPC that packs every job (squeue, squeue --json)
SINGLE = "REQUEST_JOB_INFO_SINGLE"  # one job (slurmrestd's GET /job/ID)
STATES = "REQUEST_JOB_STATE"  # ids and states of every job (squeue --only-job-state, 23.11+)


def squeue_states(ids: list[str]) -> dict[str, str]:
    out = _cmd("squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T")
    return dict(line.split() for line in out.splitlines() if line.strip())


def probe_cycle(h: Harness, r) -> tuple[CycleReport, dict[str, tuple[int, int]]]:
    """One probe cycle, drained, and slurmctld's RPCs during it (``sdiag``)."""
    _cmd("sdiag", "--reset")
    report = h.run_cycle(with_nodes=False)
    rpcs = sdiag_rpcs()
    drain(r, SITE)
    assert report.tier == PROBE
    return report, rpcs


def test_short_jobs_between_two_probes_get_one_new_and_one_final(clean, r):
    """Jobs submitted, run and ended between two probes: each gets exactly one
    new and one final, with its exit status, through a probe cycle."""
    h = Harness(r)
    assert h.cycle() and meta(r, SITE)["last_tier"] == RECONCILE
    expect = {
        sbatch("--wrap", "true"): ("completed", 0),
        sbatch("--wrap", "sleep 1"): ("completed", 0),
        sbatch("--wrap", "exit 3"): ("failed", 3),
        sbatch("--wrap", "sleep 1; exit 7"): ("failed", 7),
        sbatch("--wrap", "kill -9 $$"): ("failed", 265),
    }
    ids = list(expect)

    def all_ended() -> bool:
        states = squeue_states(ids)
        return len(states) == len(ids) and set(states.values()) <= {"COMPLETED", "FAILED"}

    eventually(all_ended, timeout=60)
    assert h.cycle() and meta(r, SITE)["last_tier"] == PROBE
    for _ in range(2):
        assert h.cycle()
    h.run_cycle(tier=RECONCILE)  # nothing more, whatever the tier
    drain(r, SITE)
    for job_id, (state, status) in expect.items():
        events = h.events(job_id)
        assert [(e["type"], e["version"]) for e in events] == [("new", 1), ("final", 2)], job_id
        record = events[-1]["record"]
        assert (record["state"], record["exit_status"]) == (state, status), job_id


def test_probe_cycles_stat_only_the_jobs_that_moved(clean, r):
    """With the line probe, a probe cycle costs slurmctld one full listing (the
    probe) and one single-job RPC per changed job (or one more listing, if
    cheaper); the records it ships are those of a full stat, so the next
    reconciliation finds nothing to ship."""
    h = Harness(r, state_probe=False)
    held = [sbatch("-H", "--wrap", "true", "-J", "held") for _ in range(6)]
    running = sbatch("--wrap", "sleep 300", "-J", "long")
    array = sbatch("--array=1-3%1", "--wrap", "sleep 300", "-J", "arr")
    # Everything that will start on its own has started before the reconciliation
    # (the array's first task splits off as job ARRAY_1 when it starts, which a
    # loaded slurmctld may do a scheduling pass later): the probe then names only
    # what the test changes.
    started = {running: "RUNNING", f"{array}_1": "RUNNING"}
    eventually(lambda: squeue_states(list(started)) == started, timeout=30, what="jobs started")
    assert h.cycle()  # the reconciliation
    _cmd("scontrol", "release", held[0])
    _cmd("scontrol", "update", f"jobid={held[1]}", "timelimit=7")
    report, rpcs = probe_cycle(h, r)
    assert report.counts["targeted"] == 2 and report.counts["changed"] == 2, report.counts
    # The probe's listing, then the two jobs one by one, or one more listing when
    # slurmctld's figures say that costs less (a queue of a dozen jobs: it may).
    if report.counts.get("read_listing"):
        assert rpcs[FULL][0] == 2 and SINGLE not in rpcs, rpcs
    else:
        assert rpcs[FULL][0] == 1 and rpcs[SINGLE][0] == 2, rpcs
    assert h.events(held[1])[-1]["record"]["requested"]["walltime"] == "00:07:00"
    assert h.run_cycle(with_nodes=False, tier=RECONCILE).tier == RECONCILE
    drain(r, SITE)
    # What the probe cycle shipped, the reconciliation does not ship again (other
    # changes it may see: the earlier tests' jobs finishing, held[0] starting, and
    # the array's pending tasks, whose reason a scheduling pass may revise: 23.02
    # did once between the two cycles).
    for job_id in (*held[2:], running, f"{array}_1"):
        assert [e["type"] for e in h.events(job_id)] == ["new"], job_id
    assert [e["type"] for e in h.events(held[1])] == ["new", "update"]


def test_the_state_probe_reads_only_jobs_whose_state_moved(clean, r):
    """From 23.11 the probe is ``squeue --only-job-state``: a probe cycle costs
    slurmctld one REQUEST_JOB_STATE and the read of the job whose state moved
    (cancelled); a held job's new time limit, which moves no state, comes
    with the next reconciliation.  Before 23.11 the same cycle is the line
    probe's: a listing, which sees the limit at once."""
    states = cluster().release >= "23.11"
    h = Harness(r)
    held = [sbatch("-H", "--wrap", "true", "-J", "held") for _ in range(3)]
    assert h.cycle()  # the reconciliation
    probe = "--only-job-state" if states else "lines"
    assert f"probe: {h.backend.squeue} {probe}" in h.backend.describe()["scheduler_paths"]
    _cmd("scancel", held[0])
    eventually(lambda: squeue_states(held[:1]) == {held[0]: "CANCELLED"}, timeout=30)
    _cmd("scontrol", "update", f"jobid={held[1]}", "timelimit=7")
    report, rpcs = probe_cycle(h, r)
    assert [e["type"] for e in h.events(held[0])] == ["new", "final"]
    assert h.events(held[0])[-1]["record"]["state"] == "cancelled"
    if states:
        assert rpcs[STATES][0] == 1, rpcs
        # the cancelled job read on its own, or one listing where slurmctld's figures
        # say that costs less (a queue of a few jobs: it may). From 24.05 that
        # listing is `squeue --json --jobs=ID`, which for a single id squeue asks
        # slurmctld as one job's read (slurm_load_job: REQUEST_JOB_INFO_SINGLE)
        whole = report.counts.get("read_listing") and cluster().release < "24.05"
        assert rpcs.get(FULL, (0,))[0] == (1 if whole else 0), rpcs
        # no state moved: neither the new limit nor a reason a scheduling pass may
        # have revised since the reconciliation (24.11 does, for held jobs) is read
        assert [e["type"] for e in h.events(held[1])] == ["new"]
        assert [e["type"] for e in h.events(held[2])] == ["new"]
        assert h.run_cycle(with_nodes=False, tier=RECONCILE).tier == RECONCILE
        drain(r, SITE)
    else:
        assert STATES not in rpcs and rpcs[FULL][0] >= 1, rpcs
    assert [e["type"] for e in h.events(held[1])] == ["new", "update"]
    assert h.events(held[1])[-1]["record"]["requested"]["walltime"] == "00:07:00"


def test_follow_refresh_lists_no_job(clean, r):
    """Follow mode's targeted refresh of poked jobs: single-job RPCs, or one
    listing when slurmctld's own figures say three single reads cost more
    (22.05's squeue --json cannot do fewer than every job), never both."""
    h = Harness(r)
    ids = [sbatch("-H", "--wrap", "true") for _ in range(3)]
    assert h.cycle()
    _cmd("scontrol", "update", f"jobid={ids[0]}", "timelimit=9")
    _cmd("sdiag", "--reset")
    report = h.refresh(ids)
    rpcs = sdiag_rpcs()
    drain(r, SITE)
    # ids[0] changed (its walltime, below); a scheduling pass may also have revised
    # the other two since the cycle (24.11 did once: their reason, once evaluated)
    assert 1 <= report.counts["changed"] <= 3, report.counts
    if report.counts.get("read_listing"):  # slurmctld's figures: one listing costs less
        assert rpcs[FULL][0] == 1 and SINGLE not in rpcs, rpcs
    else:
        assert FULL not in rpcs and rpcs[SINGLE][0] == 3, rpcs
    assert h.events(ids[0])[-1]["record"]["requested"]["walltime"] == "00:09:00"


def test_a_listing_for_poked_jobs_gives_the_records_of_the_full_listing(clean, r):
    """Follow mode's listing for poked jobs (``listing_of``; from 24.05
    ``squeue --json --jobs``, before it the full listing): for each job asked
    for (array tasks, a heterogeneous job's components, a held job), the
    record the full listing gives, whatever else the pokes named (ids that are
    no job ids); from 24.05 no job that was not asked for; a job slurmctld
    does not know, asked for alone, is not listed."""
    backend = cluster().backend()
    arr = sbatch("--array=1-3", "--wrap", "sleep 60")
    het = sbatch("-n1", "--wrap", "sleep 60", ":", "-n1", "--wrap", "sleep 60")
    held = sbatch("-H", "--wrap", "true")
    other = sbatch("--wrap", "sleep 60")

    def all_running() -> dict:
        jobs = backend.stat_jobs()
        running = [j for j, n in jobs.items() if "RUNNING" in str(n.get("job_state"))]
        return jobs if len(running) == 6 else {}  # 3 tasks, 2 components, other

    full = eventually(all_running, timeout=60, interval=0.5)
    asked = [j for j in full if j.partition("_")[0] in (arr, het, held)]
    asked += [j for j, n in full.items() if str(het) in str(n.get("het_job_id"))]
    asked = list(dict.fromkeys(asked))
    assert len(asked) == 6, sorted(full)  # 3 tasks, 2 components, the held job

    def between_two_equal_full_listings() -> tuple[dict, dict] | None:
        """The listing for the asked jobs, made between two full listings that
        agree on them: a job that has just started still changes (its
        CONFIGURING flag, its accrue and end times), and a listing made while it
        did may rightly differ from one made a moment before."""
        before = {j: backend.stat_jobs().get(j) for j in asked}
        got = backend.listing_of([*asked, "abc", ""])  # a poke names what its sender wrote
        after = {j: backend.stat_jobs().get(j) for j in asked}
        return (before, got) if before == after else None

    full_then, got = eventually(between_two_equal_full_listings, timeout=30, interval=0.5)
    assert {j: got.get(j) for j in asked} == full_then
    assert (other in got) is not backend.slurm_format().json_filters
    unknown = str(int(other) + 1000)
    assert unknown not in backend.listing_of([unknown])
