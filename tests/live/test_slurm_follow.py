"""Follow mode on each real Slurm of the machine (22.05 and 24.11,
tests/live/conftest.py): PrologSlurmctld and EpilogSlurmctld run
deploy/slurm/jobtap-slurmctld-hook.sh, which pokes the site's poke stream;
``jobtap collector --follow`` refreshes the poked jobs at once with
``SlurmBackend.stat_some`` and ships them through the same path as its full
cycles, which stay the reconciliation.

Slurm: the session's ``slurm`` fixture (tests/live/conftest.py) and the helpers
of sim/rig/slurm.py.  The hook alone needs no Slurm.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

import jobtap
from jobtap.collector.backends.base import StatError
from jobtap.collector.backends.slurm import SlurmBackend
from jobtap.collector.backends.slurm.versions import job_state_word
from jobtap.collector.cycle import Collector
from jobtap.collector.fingerprint import fingerprint
from jobtap.collector.plan import RECONCILE
from jobtap.keys import SiteKeys
from sim.rig.paths import ROOT
from sim.rig.pipeline import chunks_not_applied, drain, meta
from sim.rig.procs import stop_process
from sim.rig.slurm import (
    JOBTAP,
    KILLED_BY_SIGTERM,
    SITE,
    Harness,
    _cmd,
    assert_lifecycle,
    cluster,
    hook_settings,
    sbatch,
    sbatch_sleeper,
    sdiag_rpcs,
    squeue_ids,
    write_hook_env,
)
from sim.rig.wait import eventually
from tests.support.reaper import run_reaped

K = SiteKeys(SITE)
HOOK = ROOT / "deploy" / "slurm" / "jobtap-slurmctld-hook.sh"
POLL_INTERVAL = 30.0  # the collector's full cycles in the follow test
PUSH_WITHIN = 5.0  # seconds from a job's end to its final, at most

pytestmark = pytest.mark.timeout(900)  # the first test may wait for the lock


@pytest.fixture
def hook_env(slurm, redis_server, tmp_path):
    """Point the installed hook at this test's Redis (the file of a real set-up,
    if any, is put back afterwards).  Yields the hook's log file."""
    with hook_settings(redis_server.url, SITE, tmp_path / "hook.log") as log:
        yield log


# The hook alone (no Slurm needed) ----------------------------------------------------
def run_hook(
    env_file: Path | None, *, reap: bool = False, **slurm_env: str
) -> tuple[subprocess.CompletedProcess, float]:
    """Run the hook as slurmctld would; return how it ended and how long it took.
    With ``reap``, return only once the poke it started in the background has
    exited too (tests/support/reaper.py)."""
    env = {"PATH": "/usr/bin:/bin", **slurm_env}
    if env_file is not None:
        env["JOBTAP_HOOK_ENV"] = str(env_file)
    run = run_reaped if reap else subprocess.run
    t0 = time.monotonic()
    proc = run(
        ["bash", str(HOOK)], env=env, capture_output=True, text=True, timeout=30,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return proc, time.monotonic() - t0


def pokes(r) -> list[str]:
    return [f[b"ids"].decode() for _, f in r.xrange(K.pokes)]


def test_hook_pokes_in_the_background_and_always_exits_0(redis_server, r, tmp_path):
    """The hook exits 0 at once and pokes in the background, the array task as
    ARRAY_TASK; with no settings, odd ids or Redis away it does nothing and
    still exits 0; it never leaves the caller's pipes open (slurmctld would
    keep the job CONFIGURING or COMPLETING until they close)."""
    env_file = tmp_path / "slurm-hook.env"
    log = tmp_path / "hook.log"
    write_hook_env(env_file, redis_server.url, SITE, log)
    proc, took = run_hook(env_file, SLURM_JOB_ID="41", SLURM_SCRIPT_CONTEXT="epilog_slurmctld")
    # capture_output returned: the background poke did not hold stdout/stderr
    assert proc.returncode == 0 and proc.stdout == proc.stderr == "", proc
    assert took < 1.0, f"the hook took {took:.2f}s"
    run_hook(env_file, SLURM_JOB_ID="25", SLURM_ARRAY_JOB_ID="20", SLURM_ARRAY_TASK_ID="3")
    eventually(lambda: len(pokes(r)) == 2, timeout=20, what="both pokes")
    assert sorted(pokes(r)) == ["20_3", "41"]

    # Nothing to do: no settings file, a file without the Redis URL, an odd id.
    # Each run is reaped: a poke it started would have reached Redis by its end.
    proc, _ = run_hook(tmp_path / "missing.env", reap=True, SLURM_JOB_ID="42")
    assert proc.returncode == 0
    bare = tmp_path / "bare.env"
    bare.write_text(f"JOBTAP_SITE={SITE}\n")
    proc, _ = run_hook(bare, reap=True, SLURM_JOB_ID="43")
    assert proc.returncode == 0
    proc, _ = run_hook(env_file, reap=True, SLURM_JOB_ID="44;true")
    assert proc.returncode == 0
    # Redis away: still 0 at once; the poke's complaint goes to the hook's log.
    away = tmp_path / "away.env"
    write_hook_env(away, "redis://127.0.0.1:1/0", SITE, log)
    proc, took = run_hook(away, SLURM_JOB_ID="45")
    assert proc.returncode == 0 and took < 1.0
    eventually(lambda: "not delivered" in log.read_text(), timeout=20, what="the complaint")
    assert sorted(pokes(r)) == ["20_3", "41"]


def test_the_hook_pokes_without_python_and_falls_back_to_jobtap_poke(redis_server, r, tmp_path):
    """The hook speaks the few lines of the Redis protocol itself (bash's
    /dev/tcp: AUTH with a percent-encoded password, SELECT, XADD), so a poke
    costs no Python start-up: with a ``JOBTAP_BIN`` that does not exist, the
    pokes still arrive.  What it does not do itself (here a wrong password)
    goes to ``jobtap poke``, whose complaint reaches the hook's log."""
    password = "p@ss:w%rd"
    r.execute_command("ACL", "SETUSER", "hookpoker", "on", f">{password}", "~*", "+xadd",
                      "+select")  # fmt: skip
    base = f"127.0.0.1:{redis_server.port}"
    log = tmp_path / "hook.log"
    env_file = tmp_path / "slurm-hook.env"

    def hook(url: str, job_id: str, bin_: str, **slurm_env: str) -> None:
        env_file.write_text(f"JOBTAP_SITE={SITE}\nJOBTAP_REDIS={url}\nJOBTAP_BIN={bin_}\n"
                            f"JOBTAP_HOOK_LOG={log}\n")  # fmt: skip
        proc, _ = run_hook(env_file, reap=True, SLURM_JOB_ID=job_id, **slurm_env)
        assert proc.returncode == 0

    hook(f"redis://hookpoker:{quote(password, safe='')}@{base}/0", "51", "/nonexistent/jobtap")
    hook(f"redis://{base}/1", "52", "/nonexistent/jobtap")
    assert pokes(r) == ["51"]
    r.execute_command("SELECT", 1)
    assert pokes(r) == ["52"]
    r.execute_command("SELECT", 0)
    hook(f"redis://hookpoker:wrong@{base}/0", "53", str(JOBTAP))
    assert pokes(r) == ["51"]
    assert "not delivered" in log.read_text()
    # The epilog's poke says the job ended (the collector looks again soon at a
    # job still COMPLETING), by the fast path and by jobtap poke --ended alike.
    r.delete(K.pokes)
    hook(f"redis://{base}/0", "54", "/nonexistent/jobtap", SLURM_SCRIPT_CONTEXT="epilog_slurmctld")
    hook(f"redis://{base}/0", "55", "/nonexistent/jobtap", SLURM_SCRIPT_CONTEXT="prolog_slurmctld")
    _cmd(str(JOBTAP), "poke", "--redis", redis_server.url, "--site", SITE, "--ended", "56")
    assert [(f[b"ids"], f.get(b"ended")) for _, f in r.xrange(K.pokes)] == [
        (b"54", b"1"), (b"55", None), (b"56", b"1")
    ]  # fmt: skip


def run_like_slurmscriptd(env_file: Path, job_id: str) -> int:
    """Run the hook the way 22.05's slurmscriptd does (src/common/run_command.c):
    in a process group of its own, its output read until every copy of the
    pipe is closed, then ``killpg(SIGTERM)``, 10 ms, ``killpg(SIGKILL)``: any
    process still in the script's group when its output closes dies.  Returns
    the hook's exit status."""
    env = {"PATH": "/usr/bin:/bin", "JOBTAP_HOOK_ENV": str(env_file), "SLURM_JOB_ID": job_id}
    proc = subprocess.Popen(
        ["bash", str(HOOK)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, process_group=0,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.read()  # EOF: the script and every copy of its output closed
    for sig, pause in ((signal.SIGTERM, 0.01), (signal.SIGKILL, 0.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        time.sleep(pause)
    return proc.wait()


def test_no_poke_is_lost_when_slurmscriptd_kills_the_script_group(redis_server, r, tmp_path):
    """slurmscriptd kills the script's process group once its output closes.
    The background poke must have left that group before it lets go of the
    output (setsid first, then the redirections), or a poke that had not
    reached setsid yet dies with the group: in a 300-job burst before the
    fix, 5% of the pokes were lost that way (the prolog and epilog ran, the
    poke never started)."""
    env_file = tmp_path / "slurm-hook.env"
    write_hook_env(env_file, redis_server.url, SITE, tmp_path / "hook.log")
    runs = [str(1000 + i) for i in range(40)]
    for job_id in runs:
        assert run_like_slurmscriptd(env_file, job_id) == 0
    # Every poke that survived the kill was started before the kill; wait for
    # them, then none may be missing.
    eventually(lambda: len(pokes(r)) >= len(runs), timeout=60, what="every poke")
    assert sorted(pokes(r)) == sorted(runs)


# The backend's targeted stat ---------------------------------------------------------
NOTHING_FOUND = (  # sacct --json -j 999999 of Slurm 22.05.8 (exit status 0), less its meta
    '{"errors": [{"description": "Nothing found", "error_number": 9003, "error":'
    ' "Nothing found with query", "source": "slurmdb_jobs_get"}], "jobs": []}'
)


def fake_command(path: Path, output: str) -> str:
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")
    path.chmod(0o755)
    return str(path)


def test_ids_sacct_does_not_know_are_absent_not_a_failure(tmp_path):
    """22.05's sacct reports "Nothing found" as an error when it knows none of
    the ids: history() (and so stat_some() and a full cycle's history step)
    reads that as "none of them"; any other complaint is still a failed stat."""
    empty = '{"errors": [], "jobs": []}'
    squeue = fake_command(tmp_path / "squeue", empty)
    sacct = fake_command(tmp_path / "sacct", NOTHING_FOUND)
    backend = SlurmBackend(squeue=squeue, sacct=sacct, timeout=10)
    assert backend.history(["999999", "999999_1"]) == {}
    assert backend.stat_some(["999999"]) == {}
    other = NOTHING_FOUND.replace("9003", "9002")
    backend = SlurmBackend(squeue=squeue, sacct=fake_command(tmp_path / "sacct2", other))
    with pytest.raises(StatError, match="Nothing found"):
        backend.history(["999999"])


def test_stat_some_gives_what_a_full_stat_gives(clean, r, caplog, tmp_path):
    """``stat_some``: a running job and a running array task as ``squeue`` shows
    them, a finished job still in ``squeue`` (exit 4), a job ``squeue`` already
    purged from ``sacct`` (exit 6), unknown ids absent; the same fingerprints as
    ``stat_jobs``/``history``.  A refresh ships them, and the full cycle right
    after it ships nothing more for them."""
    backend = cluster().backend(timeout=30)
    purged = sbatch("--wrap", "exit 6", "-J", "sts_purged")
    live, live_started = sbatch_sleeper(tmp_path, "-J", "sts_live")
    arr = sbatch("--array=1-2", "--wrap", "sleep 120", "-J", "sts_arr")
    task = f"{arr}_1"
    eventually(lambda: purged not in squeue_ids(), timeout=90, interval=1, what="purged gone")
    done = sbatch("--wrap", "exit 4", "-J", "sts_done")
    states = {live: "RUNNING", task: "RUNNING", done: "FAILED"}

    def settled():
        jobs = backend.stat_jobs()
        return all(job_state_word(jobs.get(j, {}).get("job_state")) == s for j, s in states.items())

    eventually(settled, timeout=30, interval=0.2, what="jobs running and finished")
    unknown = ["999999", "999999_1", "abc", f"{arr}_77", ""]
    wanted = [live, task, done, purged, *unknown]

    some = backend.stat_some(wanted)
    full = backend.stat_jobs()
    history = backend.history([purged])
    assert set(some) == {live, task, done, purged}
    for job_id in (live, task, done):
        assert fingerprint(some[job_id]) == fingerprint(full[job_id]), job_id
    assert purged not in full and isinstance(some[purged]["state"], dict)  # from sacct
    assert fingerprint(some[purged]) == fingerprint(history[purged])
    assert backend.stat_some([]) == {} and backend.stat_some(unknown) == {}
    assert not [rec for rec in caplog.records if rec.levelname == "WARNING"], caplog.text

    # The collector: a refresh, then a full cycle, then the same refresh again.
    h = Harness(r)
    report = h.refresh(wanted)
    drain(r, SITE)
    assert report.counts["jobs"] == 4 and report.counts["changed"] == 4, report.counts
    before = {j: h.events(j) for j in (live, task, done, purged)}
    assert h.final(done)["exit_status"] == 4 and h.final(done)["state"] == "failed"
    assert h.final(purged)["exit_status"] == 6 and h.final(purged)["native"]["state"]
    assert [e["type"] for e in before[live]] == ["new"]
    assert before[task][0]["record"]["array_parent"] == arr
    assert h.cycle()
    drain(r, SITE)
    for job_id, events in before.items():
        assert h.events(job_id) == events, f"the full cycle shipped {job_id} again"
    # Poked again: nothing changed for those squeue lists.  The purged job was
    # forgotten by that cycle (finished and gone), so it is shipped once more,
    # and the worker drops it (its final went out): still no event.
    assert h.refresh([live, task, done]).counts["changed"] == 0
    h.refresh(wanted)
    drain(r, SITE)
    for job_id, events in before.items():
        assert h.events(job_id) == events, f"a second poke shipped {job_id} again"

    # The running job ends: the refresh ships its final, the next cycle nothing.
    live_started()
    _cmd("scancel", live)
    eventually(
        lambda: job_state_word(backend.stat_some([live])[live]["job_state"]) == "CANCELLED",
        timeout=30,
        interval=0.2,
        what="cancelled job settled",
    )
    assert h.refresh([live]).counts["changed"] == 1
    drain(r, SITE)
    assert h.cycle()
    assert_lifecycle(h, live, final=("cancelled", KILLED_BY_SIGTERM), reason=None)
    assert len(h.events(live)) == 2


# The whole path: Slurm's hooks, the collector, a worker, the SDK -----------------------
def test_follow_mode_ships_the_final_within_seconds_of_the_end(clean, hook_env, redis_server, r):
    """``jobtap collector --follow --interval 30`` and ``jobtap worker`` as
    processes; jobs that succeed, exit 3 and run as array tasks: each one's
    final reaches an SDK subscriber within seconds of the job's end (its script
    writes the time as its last act), long before the next cycle; then that
    cycle runs and adds nothing: one final each, the last event, versions 1, 2,
    3...  With --follow on Slurm the plan is pushed: after the first full stat,
    slurmctld answers no job listing (REQUEST_JOB_INFO) at all, only the
    reads of the refreshes."""
    url, tmp = redis_server.url, hook_env.parent
    logs = open(tmp / "services.log", "ab")
    common = ["--redis", url, "--site", SITE]
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobtap.cli", "worker", *common],
        cwd=ROOT, stdout=logs, stderr=logs, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    collector = subprocess.Popen(  # the cluster's commands first on PATH
        [sys.executable, "-m", "jobtap.cli", "collector", "--backend", "slurm", "--follow",
         "--interval", str(POLL_INTERVAL), *common],
        cwd=ROOT, stdout=logs, stderr=logs, stdin=subprocess.DEVNULL, env=cluster().env(),
    )  # fmt: skip
    finals: dict[str, tuple[float, jobtap.Change]] = {}
    got = threading.Condition()

    def on_change(change: jobtap.Change) -> None:
        if change.final:
            with got:
                finals.setdefault(change.object_id, (time.time(), change))
                got.notify_all()

    client = jobtap.Client(url, site=SITE)
    try:
        eventually(
            lambda: meta(r, SITE).get("cycles_ok") == "1", timeout=30, what="the first cycle"
        )
        first_cycle = time.monotonic()
        _cmd("sdiag", "--reset")
        client.subscribe(on_change, user="root", initial=False)
        stamp = str(tmp / "end")
        ok = sbatch("--wrap", f"sleep 2; date +%s.%N > {stamp}.ok", "-J", "follow_ok")
        fail = sbatch("--wrap", f"sleep 2; date +%s.%N > {stamp}.fail; exit 3", "-J", "follow_3")
        arr = sbatch(
            "--array=1-2", "--wrap", f"sleep 3; date +%s.%N > {stamp}.$SLURM_ARRAY_TASK_ID"
        )
        ends = {ok: f"{stamp}.ok", fail: f"{stamp}.fail", f"{arr}_1": f"{stamp}.1",
                f"{arr}_2": f"{stamp}.2"}  # fmt: skip
        with got:
            got.wait_for(lambda: set(ends) <= set(finals), timeout=POLL_INTERVAL - 8)
        assert set(ends) <= set(finals), (
            f"finals by push: {sorted(finals)} of {sorted(ends)}; services log: "
            + (tmp / "services.log").read_text()[-2000:]
        )
        pushed_by = time.monotonic()
        m = meta(r, SITE)
        assert m["cycles_ok"] == "1" and int(m["refreshes"]) >= 1, m  # pushed, not polled
        for job_id, path in ends.items():
            ended = float(Path(path).read_text())
            latency = finals[job_id][0] - ended
            assert 0 < latency < PUSH_WITHIN, f"job {job_id}: final {latency:.2f}s after its end"
        assert pushed_by - first_cycle < POLL_INTERVAL - 5

        # The next cycle runs, lists no job and ships nothing for them.
        eventually(
            lambda: meta(r, SITE).get("cycles_ok") == "2", timeout=40, what="the second cycle"
        )
        # the worker has applied whatever that cycle shipped
        eventually(lambda: chunks_not_applied(r) == 0, timeout=30, what="the chunks applied")
        m = meta(r, SITE)
        assert (m["pushed"], m["last_tier"], m["cycles_pushed"]) == ("1", "pushed", "1"), m
        rpcs = sdiag_rpcs()
        # The pushed cycle listed no job; each refresh read its poked jobs one by
        # one or from one listing, whichever costs slurmctld less (plan.ReadBudget:
        # with a handful of jobs in the queue, often the listing).
        listings = rpcs.get("REQUEST_JOB_INFO", (0, 0))[0]
        singles = rpcs.get("REQUEST_JOB_INFO_SINGLE", (0, 0))[0]
        assert listings <= int(m["refreshes"]) and listings + singles >= 1, (rpcs, m)
        assert collector.poll() is None and worker.poll() is None
    finally:
        client.close()
        stop_process(collector)
        stop_process(worker)
        logs.close()
    h = Harness(r)
    assert_lifecycle(h, ok, final=("completed", 0), must_see=("running",), reason=None)
    assert_lifecycle(h, fail, final=("failed", 3), must_see=("running",), reason="NonZeroExitCode")
    for index in (1, 2):
        assert_lifecycle(h, f"{arr}_{index}", final=("completed", 0), must_see=("running",))
    assert "not delivered" not in (hook_env.read_text() if hook_env.exists() else "")


# The completion record (JobCompLoc) ----------------------------------------------------
def test_jobcomp_pokes_a_completion_record_the_backend_ships_as_the_final(
    slurm, clean, hook_env, r
):
    """slurmctld runs the hook as JobCompLoc (jobcomp/script) once a job
    completed: its poke carries the job's completion record, which the backend
    accepts as the final of a job it listed (exit 3: failed, 3) without asking
    slurmctld, equal to what a read of the job would ship."""
    backend = cluster().backend(timeout=30)
    job = sbatch("--wrap", "sleep 1; exit 3", "-J", "jobcomp_fail")
    eventually(lambda: job in backend.stat_jobs(), timeout=30, what="the job listed")

    def recorded() -> bytes | None:
        for _, fields in r.xrange(K.pokes):
            if fields[b"ids"].decode() == job and b"record" in fields:
                return fields[b"record"]
        return None

    raw = eventually(recorded, timeout=60, interval=0.2, what="the completion poke")
    native = backend.poked_record(job, raw)
    assert native is not None, raw
    record = backend.normalise_job(job, native)

    def listed_ended() -> dict | None:  # what a read would ship (MinJobAge: still listed)
        native = backend.stat_jobs().get(job)
        ended = native is not None and job_state_word(native["job_state"]) == "FAILED"
        return backend.normalise_job(job, native) if ended else None

    final = eventually(listed_ended, timeout=30, interval=0.5, what="the listing has its end")
    assert (record["state"], record["exit_status"], record["reason"]) == (
        "failed", 3, "NonZeroExitCode",
    )  # fmt: skip
    for field in (
        "user",
        "group",
        "account",
        "queue",
        "name",
        "allocated",
        "start_time",
        "end_time",
        "requested",
        "priority",
        "comment",
        "resources_used",
    ):
        assert record[field] == final[field], (field, record[field], final[field])


# A job no poke announced -------------------------------------------------------------
def test_a_job_that_lived_between_two_reconciliations_unpoked_gets_new_and_final(
    clean, r, tmp_path
):
    """With the hook off (no settings: no poke at all), a job submitted after
    one reconciliation that runs, ends and leaves squeue (MinJobAge) before
    the next one is in no listing the collector ever makes.  The next
    reconciliation asks sacct for every job that ended since the previous one
    and ships it: ``new`` then ``final``, with its exit status."""
    with hook_settings(None, SITE, tmp_path / "hook.log"):
        backend = cluster().backend(timeout=30)
        collector = Collector(backend, r, site=SITE, pushed=True)
        collector.run_cycle(tier=RECONCILE, with_nodes=False)
        job = sbatch("--wrap", "exit 5", "-J", "unpoked")
        eventually(lambda: job not in squeue_ids(), timeout=90, interval=1, what="job purged")
        # sacct has its end (slurmctld sends it to slurmdbd as the job ends)
        eventually(
            lambda: (
                job_state_word(backend.history([job]).get(job, {}).get("state", {}).get("current"))
                == "FAILED"
            ),
            timeout=30,
            interval=0.5,
            what="sacct knows the job ended",
        )
        assert r.xlen(K.pokes) == 0
        report = collector.run_cycle(tier=RECONCILE, with_nodes=False)
        drain(r, SITE)
    assert report.counts.get("ended_unseen", 0) >= 1, report.counts
    h = Harness(r)
    assert [e["type"] for e in h.events(job)] == ["new", "final"]
    assert_lifecycle(h, job, final=("failed", 5), reason="NonZeroExitCode")


# A burst: pokes read from listings, within one listing an interval ---------------------
BURST = 100
BURST_INTERVAL = 2.0


def test_a_burst_is_read_from_listings_not_one_job_at_a_time(clean, hook_env, redis_server, r):
    """``jobtap collector --follow --interval 2`` while 100 one-second jobs are
    submitted at once: reading each poked job on its own would cost slurmctld
    many listings' worth, so the plan lists instead (within one listing's
    worth an interval, reconciliations included: plan.ReadBudget) and
    refreshes every poked job from it.  Every job still gets exactly one ``new`` and one
    ``final``, pushed: before the next reconciliation."""
    url, tmp = redis_server.url, hook_env.parent
    logs = open(tmp / "services.log", "ab")
    common = ["--redis", url, "--site", SITE]
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobtap.cli", "worker", *common],
        cwd=ROOT, stdout=logs, stderr=logs, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    collector = subprocess.Popen(  # the cluster's commands first on PATH
        [sys.executable, "-m", "jobtap.cli", "collector", "--backend", "slurm", "--follow",
         "--interval", str(BURST_INTERVAL), *common],
        cwd=ROOT, stdout=logs, stderr=logs, stdin=subprocess.DEVNULL, env=cluster().env(),
    )  # fmt: skip
    h = Harness(r)
    try:
        eventually(lambda: meta(r, SITE).get("cycles_ok"), timeout=30, what="the first cycle")
        _cmd("sdiag", "--reset")
        t0 = time.monotonic()
        jobs = [sbatch("--wrap", "sleep 1", "-J", "burst") for _ in range(BURST)]
        eventually(
            lambda: all(h.final(j) for j in jobs), timeout=120, interval=1, what="every final"
        )
        took = time.monotonic() - t0
        rpcs = sdiag_rpcs()
        m = meta(r, SITE)
        assert collector.poll() is None and worker.poll() is None
    finally:
        stop_process(collector)
        stop_process(worker)
        logs.close()
    listings = rpcs.get("REQUEST_JOB_INFO", (0, 0))[0]
    singles = rpcs.get("REQUEST_JOB_INFO_SINGLE", (0, 0))[0]
    assert singles < BURST, rpcs  # not one read per job: twice that many pokes came
    assert listings >= 1, (listings, took, rpcs, m)
    for job in jobs:
        assert [e["type"] for e in h.events(job)].count("final") == 1, h.events(job)
        assert h.events(job)[0]["type"] == "new"
        assert h.final(job)["state"] == "completed"
    assert "not delivered" not in (hook_env.read_text() if hook_env.exists() else "")
