"""The Slurm backend against each real Slurm of the machine (22.05 and 24.11,
tests/live/conftest.py): real jobs submitted with sbatch, the real collector
(Collector + CollectorService.run_one), a real redis-server and a real rq worker.

The whole module is skipped, with the reason, only when Slurm cannot be started
here (not root, no apt, start.sh failing: its last lines are in the message).
Slurm is left running after the session if it was already running before it
(``JOBTAP_SLURM_KEEP=1`` keeps it in any case).  There is one Slurm per host, so
sessions that run these tests at the same time take turns (a lock file).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from jobtap.collector.backends.base import StatError
from jobtap.collector.cycle import CycleFailed
from jobtap.collector.plan import RECONCILE
from jobtap.schema import from_hash
from sim.rig.pipeline import drain, meta
from sim.rig.slurm import (
    KILLED_BY_SIGTERM,
    SITE,
    Harness,
    K,
    _cmd,
    assert_lifecycle,
    sbatch,
    sbatch_sleeper,
    squeue_ids,
)
from sim.rig.wait import eventually

pytestmark = pytest.mark.timeout(900)  # the first test also waits for the lock


def test_real_jobs_reach_one_exact_final(slurm, clean, r, tmp_path):
    """sbatch real jobs (success, exit 3, cancelled pending and running, held then
    released, an array of 4, one pending for resources): the site stream shows the
    right sequence of normalised states and a single exact final for each."""
    h = Harness(r)
    ok = sbatch("--wrap", "sleep 3", "-J", "ok")
    fail = sbatch("--wrap", "sleep 3; exit 3", "-J", "fail3")
    crun, crun_started = sbatch_sleeper(tmp_path, "-J", "cancel_running")
    # Released, it gets a priority below the big job's: its short limit lets the
    # backfill scheduler run it while the big job waits.
    held = sbatch("-H", "--wrap", "sleep 3", "-J", "held", minutes=1)
    cpend = sbatch(f"--dependency=afterok:{crun}", "--wrap", "true", "-J", "cancel_pending")
    arr = sbatch("--array=1-4", "--wrap", "sleep 3", "-J", "arr")
    tasks = [f"{arr}_{i}" for i in range(1, 5)]
    h.until("cancel_running job running", lambda: h.seen(crun, "running"))
    big = sbatch("-n", "16", "--wrap", "sleep 2", "-J", "big")  # needs every CPU

    def big_waits_for_resources() -> bool:
        return any(
            e["record"]["state"] == "queued" and e["record"]["reason"] == "Resources"
            for e in h.events(big)
        )

    # The reason moves no state: from 23.11 the state probe does not name the job
    # for it, and the record comes with the next reconciliation (due within 60 s).
    # Once slurmctld says Resources, the test makes the next cycle that one.
    eventually(
        lambda: _cmd("squeue", "-h", "-j", big, "-o", "%r").strip() == "Resources",
        timeout=60, interval=0.4, what="slurmctld saying the big job waits for Resources",
    )  # fmt: skip
    h.reconcile_next()
    h.until("big job pending for Resources", big_waits_for_resources)
    h.until("held job held", lambda: h.seen(held, "held"))
    h.until("cancel_pending job queued", lambda: h.seen(cpend, "queued"))
    h.until("short jobs finished", lambda: all(h.final(j) for j in (ok, fail, *tasks)))
    assert h.final(held) is None and h.final(big) is None

    _cmd("scancel", cpend)
    _cmd("scontrol", "release", held)
    h.until("cancel_pending final", lambda: h.final(cpend) is not None)
    h.until("held job released and done", lambda: h.final(held) is not None)
    assert h.final(big) is None  # still waiting: cancel_running holds a CPU
    crun_started()
    _cmd("scancel", crun)
    h.until("cancel_running final", lambda: h.final(crun) is not None)
    h.until("big job done", lambda: h.final(big) is not None)
    for _ in range(3):  # a few more cycles: nothing may follow a final
        assert h.cycle()  # drained: what the cycle shipped is applied when it returns
        time.sleep(0.3)  # slurmctld's time between two cycles (the scenario, not a wait)

    assert_lifecycle(h, ok, final=("completed", 0), must_see=("running",), reason=None)
    assert_lifecycle(h, fail, final=("failed", 3), must_see=("running",), reason="NonZeroExitCode")
    assert_lifecycle(h, crun, final=("cancelled", KILLED_BY_SIGTERM), must_see=("running",))
    states = assert_lifecycle(h, cpend, final=("cancelled", None), must_see=("queued",))
    assert "running" not in states
    assert h.events(cpend)[0]["record"]["reason"] == "Dependency"
    states = assert_lifecycle(h, held, final=("completed", 0), must_see=("held", "running"))
    assert states[0] == "held" and h.events(held)[0]["record"]["reason"] == "JobHeldUser"
    assert_lifecycle(h, big, final=("completed", 0), must_see=("queued", "running"))
    for index, task in enumerate(tasks, start=1):
        assert_lifecycle(h, task, final=("completed", 0), must_see=("running",))
        record = h.final(task)
        assert (record["array_parent"], record["array_index"]) == (arr, index)
    # the records agree with the stream, and the big job ran on all four nodes
    stored = from_hash(r.hgetall(K.job("root", fail)))
    assert (stored["state"], stored["exit_status"]) == ("failed", 3)
    assert sorted(h.final(big)["allocated"]) == list(slurm.nodes)
    assert h.final(big)["requested"]["ncpus"] == 16
    # nodes and the partition have records of their own
    for node in slurm.nodes:
        assert from_hash(r.hgetall(K.node(node)))["state"] in ("free", "busy")
    queue = from_hash(r.hgetall(K.queue("debug")))
    assert queue["state"] == "open" and queue["resources"]["available"]["cpus"] == 16


def test_job_purged_between_two_cycles_gets_its_final_from_history(clean, r, tmp_path):
    """A job that ends and leaves squeue (MinJobAge) between two cycles still gets
    its exact final state and exit status, from sacct."""
    h = Harness(r)
    fail = sbatch("--wrap", "sleep 3; exit 7", "-J", "purged_fail")
    crun, crun_started = sbatch_sleeper(tmp_path, "-J", "purged_cancel")
    arr = sbatch("--array=2", "--wrap", "sleep 3; exit 5", "-J", "purged_task")
    task = f"{arr}_2"
    h.until("jobs running", lambda: all(h.seen(j, "running") for j in (fail, crun, task)))
    crun_started()
    _cmd("scancel", crun)
    # No cycle now: wait for slurmctld to purge all three (bounded by MinJobAge and
    # its purge pass, about 20 s here).
    eventually(
        lambda: not squeue_ids() & {fail, crun, task},
        timeout=120,
        interval=1,
        what="slurmctld purging the finished jobs",
    )
    assert h.cycle()
    assert_lifecycle(h, fail, final=("failed", 7), reason="NonZeroExitCode")
    assert_lifecycle(h, crun, final=("cancelled", KILLED_BY_SIGTERM), reason="cancelled by root")
    assert_lifecycle(h, task, final=("failed", 5), reason="NonZeroExitCode")
    for job_id in (fail, crun, task):
        native = h.final(job_id)["native"]
        assert isinstance(native["state"], dict), "the final record must come from sacct"
        assert h.states(job_id)[-2:] == ["running", h.final(job_id)["state"]]
    assert h.final(fail)["end_time"] is not None and h.final(fail)["allocated"]
    m = meta(r, SITE)
    assert m.get("count_finalised") == "3", sorted(m.items())


def _node_events(h: Harness, node: str) -> list[dict]:
    return h.events(node, kind="node")


def test_drained_and_downed_nodes_give_node_events(slurm, clean, r):
    """``scontrol update nodename=... state=drain|down reason=...`` and the node
    coming back: each is a node event with the state and the reason."""
    n3, n4 = slurm.nodes[2], slurm.nodes[3]
    h = Harness(r)
    job = sbatch("-w", n3, "--wrap", "sleep 120", "-J", "on_n3")
    h.until(f"job running on {n3}", lambda: h.seen(job, "running"))
    h.until(f"{n3} busy", lambda: any(e["record"]["state"] == "busy" for e in _node_events(h, n3)))
    try:
        _cmd("scontrol", "update", f"nodename={n3}", "state=drain", "reason=jobtap test: bad disk")
        _cmd("scontrol", "update", f"nodename={n4}", "state=down", "reason=jobtap test: dead")

        def bad(node: str, state: str) -> bool:
            return any(e["record"]["state"] == state for e in _node_events(h, node))

        h.until(f"{n3} drain event", lambda: bad(n3, "drain"), timeout=30)
        h.until(f"{n4} down event", lambda: bad(n4, "down"), timeout=30)
        drained = next(e for e in _node_events(h, n3) if e["record"]["state"] == "drain")
        assert drained["type"] == "state" and drained["changes"]["state"] == ["busy", "drain"]
        assert drained["record"]["reason"] == "jobtap test: bad disk"
        # draining: a job runs there (23.02's JSON says ALLOCATED for a node some of whose
        # CPUs are allocated, the others MIXED: tests/fixtures/slurm/23.02/scontrol-show-nodes.json)
        assert drained["record"]["native_state"] in ("MIXED+DRAIN", "ALLOCATED+DRAIN")
        assert job in drained["record"]["jobs"]
        down = next(e for e in _node_events(h, n4) if e["record"]["state"] == "down")
        assert down["record"]["reason"] == "jobtap test: dead"
        # a bad node does not end the job running there
        assert h.final(job) is None
    finally:
        for node in (n3, n4):
            _cmd("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    h.until(
        f"{n3} and {n4} back",
        lambda: (
            _node_events(h, n3)[-1]["record"]["state"] == "busy"
            and _node_events(h, n4)[-1]["record"]["state"] == "free"
        ),
        timeout=30,
    )
    back = _node_events(h, n3)[-1]
    assert back["changes"]["state"] == ["drain", "busy"] and back["record"]["reason"] is None


def test_drained_node_gives_an_update_event_on_the_job_running_there(slurm, clean, r):
    """Draining the node of a running job gives that job an ``update`` event whose
    reason names the node (collector/cycle.py; the signal big-job users act on)."""
    n2 = slurm.nodes[1]
    h = Harness(r)
    job = sbatch("-w", n2, "--wrap", "sleep 120", "-J", "on_n2")
    h.until(f"job running on {n2}", lambda: h.seen(job, "running"))
    try:
        _cmd("scontrol", "update", f"nodename={n2}", "state=drain", "reason=jobtap test: fan")

        def flagged() -> bool:
            return any(
                e["type"] == "update" and n2 in (e["record"]["reason"] or "") for e in h.events(job)
            )

        h.until(f"update event naming {n2} on the job", flagged, timeout=20)
    finally:
        _cmd("scontrol", "update", f"nodename={n2}", "state=resume", check=False)
    event = next(
        e for e in h.events(job) if e["type"] == "update" and n2 in (e["record"]["reason"] or "")
    )
    assert event["record"]["state"] == "running" and "reason" in event["changes"]
    assert h.final(job) is None


def test_partition_state_changes_are_queue_events(clean, r):
    h = Harness(r)
    h.until("queue debug open", lambda: bool(h.events("debug", kind="queue")))
    try:
        _cmd("scontrol", "update", "partitionname=debug", "state=drain")
        h.until(
            "queue debug closed",
            lambda: h.events("debug", kind="queue")[-1]["record"]["state"] == "closed",
            timeout=20,
        )
    finally:
        _cmd("scontrol", "update", "partitionname=debug", "state=up", check=False)
    h.until(
        "queue debug open again",
        lambda: h.events("debug", kind="queue")[-1]["record"]["state"] == "open",
        timeout=20,
    )
    closed = [e for e in h.events("debug", kind="queue") if e["record"]["state"] == "closed"]
    assert closed[0]["record"]["native_state"] == "DRAIN"


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (nobody may reap a daemon here)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, IndexError):
        return False
    return fields[0] != "Z"


def test_slurmctld_stopped_mid_run_fails_cycles_without_false_finals(slurm, clean, r, tmp_path):
    """slurmctld going away: failed cycles that change nothing (the probe's
    squeue exits 1; 22.05's squeue --json would still exit 0, with an empty job
    list and an error); it comes back: events resume, and the jobs that ran on
    meanwhile are still the same jobs."""
    h = Harness(r, timeout=30)
    run, run_started = sbatch_sleeper(tmp_path, "-J", "survivor")
    held = sbatch("-H", "--wrap", "true", "-J", "held_survivor")
    h.until("jobs seen", lambda: h.seen(run, "running") and h.seen(held, "held"))
    before = r.xlen(K.events)
    pid = slurm.slurmctld_pid()
    os.kill(pid, signal.SIGTERM)
    try:
        eventually(lambda: not _running(pid), timeout=30, interval=0.2, what="slurmctld stopped")
        for n in (1, 2):
            assert not h.cycle()
            m = meta(r, SITE)
            assert m["status"] == "failing" and m["consecutive_failures"] == str(n)
            assert "Unable to contact slurm controller" in m["last_error"], m["last_error"]
        with pytest.raises(CycleFailed, match="Unable to contact"):  # a reconciliation too
            h.run_cycle(tier=RECONCILE)
        # its full stat: 22.05's squeue --json exits 0 with an error in its JSON,
        # 24.11's exits 1; either way a failed stat, not an empty list
        with pytest.raises(StatError, match="squeue (reported errors|exited with status 1)"):
            h.backend.stat_jobs()
        drain(r, SITE)
        assert r.xlen(K.events) == before  # no event at all, and certainly no final
    finally:
        proc = slurm.start()
        assert proc.returncode == 0, proc.stdout + proc.stderr
    h.until("a good cycle", lambda: meta(r, SITE)["status"] == "ok", timeout=60)
    assert meta(r, SITE)["consecutive_failures"] == "0"
    assert h.final(run) is None and h.final(held) is None
    assert from_hash(r.hgetall(K.job("root", run)))["state"] == "running"
    run_started()
    _cmd("scancel", run, held)
    h.until("finals after the restart", lambda: h.final(run) and h.final(held))
    assert_lifecycle(h, run, final=("cancelled", KILLED_BY_SIGTERM), must_see=("running",))
    assert_lifecycle(h, held, final=("cancelled", None), must_see=("held",))


def test_status_and_doctor_say_which_slurm_and_how_it_is_read(slurm, clean, r, redis_server):
    """The collector keeps what the backend says of Slurm in meta: jobtap
    status and jobtap doctor show the release, the JSON version and the paths."""
    from click.testing import CliRunner

    from jobtap.cli.doctor import doctor
    from jobtap.cli.status import status

    h = Harness(r)
    assert h.cycle()
    version = _cmd("sinfo", "--version").split()[-1]
    common = ["--redis", redis_server.url, "--site", SITE]
    out = CliRunner().invoke(status, common).output
    scheduler = next(line for line in out.splitlines() if line.strip().startswith("scheduler"))
    assert f"Slurm {version}, JSON v0.0." in scheduler, out
    reads = next(line for line in out.splitlines() if line.strip().startswith("reads"))
    assert "squeue --json --all --local --states=all" in reads and "single reads:" in reads, out
    out = CliRunner().invoke(doctor, common).output
    assert f"Slurm {version}" in out, out
