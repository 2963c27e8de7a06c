"""The Slurm backend against a real Slurm 22.05 (Debian packages, started by
deploy/slurm/start.sh): real jobs submitted with sbatch, the real collector
(Collector + CollectorService.run_one), a real redis-server and a real rq worker.

The whole module is skipped, with the reason, only when Slurm cannot be started
here (not root, no apt, start.sh failing: its last lines are in the message).
Slurm is left running after the session if it was already running before it
(``JOBTAP_SLURM_KEEP=1`` keeps it in any case).  There is one Slurm per host, so
sessions that run these tests at the same time take turns (a lock file).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import ROOT, drain, meta, site_events

from jobtap.collector.backends.slurm import SlurmBackend
from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.schema import TERMINAL, from_hash

SITE = "slurm1"
K = SiteKeys(SITE)
START = ROOT / "deploy" / "slurm" / "start.sh"
STOP = ROOT / "deploy" / "slurm" / "stop.sh"
STATE_DIR = Path(os.environ.get("JOBTAP_SLURM_DIR", "/var/lib/jobtap-slurm"))
NODES = ("n1", "n2", "n3", "n4")
# Where a state sits on a job's way; a job's observed states never go back.
RANK = {"queued": 0, "held": 0, "waiting": 0, "running": 1, "suspended": 1, "exiting": 2}
RANK.update(dict.fromkeys(TERMINAL, 3))
LOCK = Path(os.environ.get("JOBTAP_SLURM_LOCK", "/tmp/jobtap-slurm.lock"))
LOCK_WAIT = 420  # seconds to wait for another session's turn

pytestmark = pytest.mark.timeout(900)  # the first test also waits for the lock


# Slurm -----------------------------------------------------------------------------
def _cmd(*argv: str, timeout: float = 30, check: bool = True) -> str:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def _start_slurm() -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(START)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def cannot_run(reason: str) -> None:
    """Skip with the reason; in CI (where these tests must run) fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"Slurm tests must run in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm():
    """A running single-host Slurm, or a skip that says why there is none."""
    if os.geteuid() != 0:
        pytest.skip("Slurm tests need root: deploy/slurm/start.sh installs and starts daemons")
    if not Path("/usr/bin/apt-get").exists() and not Path("/usr/sbin/slurmctld").exists():
        pytest.skip("Slurm tests need Debian 12 (apt-get) or Slurm 22.05 installed")
    lock = open(LOCK, "a")  # held for the whole session
    t0 = time.monotonic()
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() - t0 > LOCK_WAIT:
                lock.close()
                cannot_run(f"another session has held the Slurm lock {LOCK} for {LOCK_WAIT}s")
            time.sleep(1)
    if time.monotonic() - t0 > 1:
        print(f"\nwaited {time.monotonic() - t0:.0f}s for another session's Slurm tests")
    t0 = time.monotonic()
    try:
        proc = _start_slurm()
    except subprocess.TimeoutExpired:
        lock.close()
        cannot_run("deploy/slurm/start.sh did not finish within 300 s")
    if proc.returncode != 0:
        lock.close()
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        cannot_run(f"Slurm could not start (deploy/slurm/start.sh exit {proc.returncode}): {tail}")
    started_here = "already running" not in proc.stdout
    print(f"\nSlurm ready in {time.monotonic() - t0:.1f}s: {proc.stdout.strip().splitlines()[-1]}")
    try:
        yield
    finally:
        if started_here and not os.environ.get("JOBTAP_SLURM_KEEP"):
            subprocess.run(["bash", str(STOP)], capture_output=True, timeout=120)
        lock.close()


def squeue_ids() -> set[str]:
    """Ids of every job slurmctld still lists (finished ones too, until MinJobAge)."""
    return set(SlurmBackend(timeout=30).stat_jobs())


def cancel_everything(wait: float = 30) -> None:
    """Cancel all jobs, resume every node, and wait until no job holds a CPU."""
    active = _cmd("squeue", "-h", "-t", "PD,R,S,CG,CF", "-o", "%A").split()
    if active:
        _cmd("scancel", *sorted(set(active)), check=False)
    for node in NODES:
        state = _cmd("sinfo", "-h", "-n", node, "-o", "%T", check=False).strip()
        if state and state not in ("idle", "mixed", "allocated", "completing"):
            _cmd("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    _cmd("scontrol", "update", "partitionname=debug", "state=up", check=False)
    deadline = time.monotonic() + wait
    while _cmd("squeue", "-h", "-t", "R,S,CG,CF", "-o", "%A").split():
        if time.monotonic() > deadline:
            raise AssertionError("jobs still hold CPUs after scancel")
        time.sleep(0.3)


@pytest.fixture
def clean(slurm):
    cancel_everything()
    yield
    cancel_everything()


def sbatch(*args: str, minutes: int = 5) -> str:
    """Submit ``sbatch ARGS`` (output to /dev/null) and return the job id."""
    out = _cmd(
        "sbatch", "--parsable", "-t", str(minutes), "-o", "/dev/null", "-e", "/dev/null",
        "-D", "/tmp", *args,
    )  # fmt: skip
    return out.strip().split(";")[0]


# The collector ---------------------------------------------------------------------
class Harness:
    """The real collector on the real Slurm, each cycle drained by a real rq worker."""

    def __init__(self, r, *, timeout: float = 30.0):
        self.r = r
        self.backend = SlurmBackend(timeout=timeout)
        self.collector = Collector(self.backend, r, site=SITE, nodes_every=1)
        self.service = CollectorService(self.collector, interval=0.5, backend_name="slurm")

    def cycle(self) -> bool:
        ok = self.service.run_one()
        drain(self.r, SITE)
        return ok

    def until(self, what: str, done: Callable[[], bool], timeout: float = 60) -> None:
        """Run cycles until ``done()``; fail with the job events seen if it takes too long."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.cycle(), f"cycle failed: {meta(self.r, SITE).get('last_error')}"
            if done():
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout}s; job events: {self.summary()}")
            time.sleep(0.4)

    def events(self, object_id: str | None = None, kind: str = "job") -> list[dict]:
        return [
            e
            for e in site_events(self.r, SITE)
            if e["kind"] == kind and (object_id is None or e["object_id"] == object_id)
        ]

    def states(self, job_id: str) -> list[str]:
        """The job's observed states, consecutive repeats folded."""
        out: list[str] = []
        for e in self.events(job_id):
            state = e["record"]["state"]
            if not out or out[-1] != state:
                out.append(state)
        return out

    def seen(self, job_id: str, state: str) -> bool:
        return state in self.states(job_id)

    def final(self, job_id: str) -> dict | None:
        finals = [e for e in self.events(job_id) if e["type"] == "final"]
        return finals[-1]["record"] if finals else None

    def summary(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for e in self.events():
            rec = e["record"]
            out.setdefault(e["object_id"], []).append(
                (e["type"], rec["state"], rec["exit_status"], rec["reason"])
            )
        return out


def assert_lifecycle(
    h: Harness,
    job_id: str,
    *,
    final: tuple[str, int | None],
    must_see: tuple[str, ...] = (),
    reason: str | None = "any",
) -> list[str]:
    """One job's events: versions 1, 2, 3...; states that never go back; the
    states ``must_see`` among them; exactly one ``final``, the last event, with
    the expected state and exit status (and reason, unless "any")."""
    events = h.events(job_id)
    assert events, f"no event for job {job_id}"
    assert [e["version"] for e in events] == list(range(1, len(events) + 1)), job_id
    assert events[0]["type"] == "new", (job_id, events[0]["type"])
    types = [e["type"] for e in events]
    assert types.count("final") == 1 and types[-1] == "final", (job_id, types)
    states = h.states(job_id)
    ranks = [RANK[s] for s in states]
    assert ranks == sorted(ranks), f"job {job_id} went back: {states}"
    for state in must_see:
        assert state in states, f"job {job_id}: {state} not observed in {states}"
    record = events[-1]["record"]
    assert (record["state"], record["exit_status"]) == final, (job_id, states, record["reason"])
    if reason != "any":
        assert record["reason"] == reason, (job_id, record["reason"])
    return states


# The tests -------------------------------------------------------------------------
def test_real_jobs_reach_one_exact_final(clean, r):
    """sbatch real jobs (success, exit 3, cancelled pending and running, held then
    released, an array of 4, one pending for resources): the site stream shows the
    right sequence of normalised states and a single exact final for each."""
    h = Harness(r)
    ok = sbatch("--wrap", "sleep 3", "-J", "ok")
    fail = sbatch("--wrap", "sleep 3; exit 3", "-J", "fail3")
    crun = sbatch("--wrap", "sleep 300", "-J", "cancel_running")
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
    _cmd("scancel", crun)
    h.until("cancel_running final", lambda: h.final(crun) is not None)
    h.until("big job done", lambda: h.final(big) is not None)
    for _ in range(3):  # a few more cycles: nothing may follow a final
        assert h.cycle()
        time.sleep(0.3)

    assert_lifecycle(h, ok, final=("completed", 0), must_see=("running",), reason=None)
    assert_lifecycle(h, fail, final=("failed", 3), must_see=("running",), reason="NonZeroExitCode")
    assert_lifecycle(h, crun, final=("cancelled", 271), must_see=("running",))
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
    assert sorted(h.final(big)["allocated"]) == list(NODES)
    assert h.final(big)["requested"]["ncpus"] == 16
    # nodes and the partition have records of their own
    for node in NODES:
        assert from_hash(r.hgetall(K.node(node)))["state"] in ("free", "busy")
    queue = from_hash(r.hgetall(K.queue("debug")))
    assert queue["state"] == "open" and queue["resources"]["available"]["cpus"] == 16


def test_job_purged_between_two_cycles_gets_its_final_from_history(clean, r):
    """A job that ends and leaves squeue (MinJobAge) between two cycles still gets
    its exact final state and exit status, from sacct."""
    h = Harness(r)
    fail = sbatch("--wrap", "sleep 3; exit 7", "-J", "purged_fail")
    crun = sbatch("--wrap", "sleep 300", "-J", "purged_cancel")
    arr = sbatch("--array=2", "--wrap", "sleep 3; exit 5", "-J", "purged_task")
    task = f"{arr}_2"
    h.until("jobs running", lambda: all(h.seen(j, "running") for j in (fail, crun, task)))
    _cmd("scancel", crun)
    # No cycle now: wait for slurmctld to purge all three (bounded by MinJobAge and
    # its purge pass, about 20 s here).
    deadline = time.monotonic() + 120
    while squeue_ids() & {fail, crun, task}:
        assert time.monotonic() < deadline, "slurmctld did not purge the finished jobs"
        time.sleep(1)
    assert h.cycle()
    assert_lifecycle(h, fail, final=("failed", 7), reason="NonZeroExitCode")
    assert_lifecycle(h, crun, final=("cancelled", 271), reason="cancelled by root")
    assert_lifecycle(h, task, final=("failed", 5), reason="NonZeroExitCode")
    for job_id in (fail, crun, task):
        native = h.final(job_id)["native"]
        assert isinstance(native["state"], dict), "the final record must come from sacct"
        assert h.states(job_id)[-2:] == ["running", h.final(job_id)["state"]]
    assert h.final(fail)["end_time"] is not None and h.final(fail)["allocated"]
    assert meta(r, SITE)["count_finalised"] == "3"


def _node_events(h: Harness, node: str) -> list[dict]:
    return h.events(node, kind="node")


def test_drained_and_downed_nodes_give_node_events(clean, r):
    """``scontrol update nodename=... state=drain|down reason=...`` and the node
    coming back: each is a node event with the state and the reason."""
    h = Harness(r)
    job = sbatch("-w", "n3", "--wrap", "sleep 120", "-J", "on_n3")
    h.until("job running on n3", lambda: h.seen(job, "running"))
    h.until("n3 busy", lambda: any(e["record"]["state"] == "busy" for e in _node_events(h, "n3")))
    try:
        _cmd("scontrol", "update", "nodename=n3", "state=drain", "reason=jobtap test: bad disk")
        _cmd("scontrol", "update", "nodename=n4", "state=down", "reason=jobtap test: dead")

        def bad(node: str, state: str) -> bool:
            return any(e["record"]["state"] == state for e in _node_events(h, node))

        h.until("n3 drain event", lambda: bad("n3", "drain"), timeout=30)
        h.until("n4 down event", lambda: bad("n4", "down"), timeout=30)
        drained = next(e for e in _node_events(h, "n3") if e["record"]["state"] == "drain")
        assert drained["type"] == "state" and drained["changes"]["state"] == ["busy", "drain"]
        assert drained["record"]["reason"] == "jobtap test: bad disk"
        assert drained["record"]["native_state"] == "MIXED+DRAIN"  # draining: a job runs there
        assert job in drained["record"]["jobs"]
        down = next(e for e in _node_events(h, "n4") if e["record"]["state"] == "down")
        assert down["record"]["reason"] == "jobtap test: dead"
        # a bad node does not end the job running there
        assert h.final(job) is None
    finally:
        for node in ("n3", "n4"):
            _cmd("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    h.until(
        "n3 and n4 back",
        lambda: (
            _node_events(h, "n3")[-1]["record"]["state"] == "busy"
            and _node_events(h, "n4")[-1]["record"]["state"] == "free"
        ),
        timeout=30,
    )
    back = _node_events(h, "n3")[-1]
    assert back["changes"]["state"] == ["drain", "busy"] and back["record"]["reason"] is None


def test_drained_node_gives_an_update_event_on_the_job_running_there(clean, r):
    """Draining the node of a running job gives that job an ``update`` event whose
    reason names the node (collector/cycle.py; the signal big-job users act on)."""
    h = Harness(r)
    job = sbatch("-w", "n2", "--wrap", "sleep 120", "-J", "on_n2")
    h.until("job running on n2", lambda: h.seen(job, "running"))
    try:
        _cmd("scontrol", "update", "nodename=n2", "state=drain", "reason=jobtap test: fan")

        def flagged() -> bool:
            return any(
                e["type"] == "update" and "n2" in (e["record"]["reason"] or "")
                for e in h.events(job)
            )

        h.until("update event naming n2 on the job", flagged, timeout=20)
    finally:
        _cmd("scontrol", "update", "nodename=n2", "state=resume", check=False)
    event = next(
        e for e in h.events(job) if e["type"] == "update" and "n2" in (e["record"]["reason"] or "")
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


def _slurmctld_pid() -> int:
    return int((STATE_DIR / "run" / "slurmctld.pid").read_text().strip())


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (nobody may reap a daemon here)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, IndexError):
        return False
    return fields[0] != "Z"


def test_slurmctld_stopped_mid_run_fails_cycles_without_false_finals(clean, r):
    """slurmctld going away: failed cycles that change nothing (22.05's squeue
    still exits 0, with an empty job list and an error); it comes back: events
    resume, and the jobs that ran on meanwhile are still the same jobs."""
    h = Harness(r, timeout=30)
    run = sbatch("--wrap", "sleep 300", "-J", "survivor")
    held = sbatch("-H", "--wrap", "true", "-J", "held_survivor")
    h.until("jobs seen", lambda: h.seen(run, "running") and h.seen(held, "held"))
    before = r.xlen(K.events)
    pid = _slurmctld_pid()
    os.kill(pid, signal.SIGTERM)
    try:
        deadline = time.monotonic() + 30
        while _running(pid):
            assert time.monotonic() < deadline, "slurmctld did not stop"
            time.sleep(0.2)
        for n in (1, 2):
            assert not h.cycle()
            m = meta(r, SITE)
            assert m["status"] == "failing" and m["consecutive_failures"] == str(n)
            assert "squeue reported errors" in m["last_error"], m["last_error"]
        assert r.xlen(K.events) == before  # no event at all, and certainly no final
    finally:
        proc = _start_slurm()
        assert proc.returncode == 0, proc.stdout + proc.stderr
    h.until("a good cycle", lambda: meta(r, SITE)["status"] == "ok", timeout=60)
    assert meta(r, SITE)["consecutive_failures"] == "0"
    assert h.final(run) is None and h.final(held) is None
    assert from_hash(r.hgetall(K.job("root", run)))["state"] == "running"
    _cmd("scancel", run, held)
    h.until("finals after the restart", lambda: h.final(run) and h.final(held))
    assert_lifecycle(h, run, final=("cancelled", 271), must_see=("running",))
    assert_lifecycle(h, held, final=("cancelled", None), must_see=("held",))
