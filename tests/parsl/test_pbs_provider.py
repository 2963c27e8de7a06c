"""``jobtap.parsl.PBSProProvider`` through the PBS stand-ins (a live one-host
server, sim/standins/pbs_server.py, behind ``qsub``/``qdel``/``qstat``), with
jobtap's real collector and worker on a real redis-server, as the PSI/J PBS
executor is tested: blocks end with their real state from jobtap and no
``qstat`` runs; with Redis away, Parsl's own ``qstat -x`` gives the finals."""

from __future__ import annotations

import subprocess

from parsl.jobs.states import JobState

from jobtap.parsl import PBSProProvider
from jobtap.sim.localredis import free_port
from sim.rig.cmdlog import CommandLog
from sim.rig.wait import eventually
from tests.parsl.conftest import SITE


def provider(tmp_path, **jobtap) -> PBSProProvider:
    p = PBSProProvider(init_blocks=0, walltime="00:05:00", **jobtap)
    p.script_dir = str(tmp_path / "scripts")
    (tmp_path / "scripts").mkdir(exist_ok=True)
    return p


def until_exists(path, then: str = "true") -> str:
    return f"for i in $(seq 600); do [ -e {path} ] && break; sleep 0.05; done; {then}"


def test_blocks_end_with_their_real_state_and_no_qstat(jobtap_pbs, tmp_path, monkeypatch):
    commands = CommandLog(tmp_path / "cmds", ("qstat",)).install(monkeypatch)
    p = provider(tmp_path, jobtap_redis=jobtap_pbs)
    go = tmp_path / "go"
    ok = p.submit(until_exists(go), 1)
    bad = p.submit(until_exists(go, "exit 3"), 1)
    killed = p.submit("sleep 60", 1)
    ours = p.submit("sleep 60", 1)
    ids = [ok, bad, killed, ours]
    assert not any(s.terminal for s in p.status(ids))
    eventually(
        lambda: all(s.state == JobState.RUNNING for s in p.status(ids)),
        timeout=30,
        interval=0.1,
        what="every block running",
    )
    go.touch()
    subprocess.run(["qdel", killed], check=True, capture_output=True)  # someone else's qdel
    p.cancel([ours])

    def ended():
        statuses = p.status(ids)
        assert all(s.terminal for s in statuses), [str(s) for s in statuses]
        return True

    eventually(ended, timeout=30, interval=0.1)
    done, failed, cancelled, cancelled_here = p.status(ids)
    assert (done.state, done.exit_code) == (JobState.COMPLETED, 0)
    assert (failed.state, failed.exit_code) == (JobState.FAILED, 3)
    assert cancelled.state == JobState.CANCELLED  # the stock provider: COMPLETED
    assert cancelled_here.state == JobState.CANCELLED
    assert commands.calls() == [] and p.stock_queries == 0


def test_redis_away_asks_qstat_and_a_missing_block_is_not_completed(pbs, tmp_path, monkeypatch):
    commands = CommandLog(tmp_path / "cmds", ("qstat",)).install(monkeypatch)
    url = f"redis://127.0.0.1:{free_port()}/0?site={SITE}"
    p = provider(tmp_path, jobtap_redis=url, jobtap_fallback_interval=0.2)
    go = tmp_path / "go"
    ok = p.submit(until_exists(go), 1)
    assert p.status([ok])[0].state in (JobState.PENDING, JobState.RUNNING)
    assert commands.names() == ["qstat"]
    go.touch()
    eventually(
        lambda: p.status([ok])[0].state == JobState.COMPLETED,
        timeout=30,
        interval=0.2,
        what="qstat -x's F",
    )
    # a block the server never heard of keeps its status (the stock provider: COMPLETED)
    p.resources["999.vm"] = {
        "job_id": "999.vm",
        "status": p.resources[ok]["status"].__class__(JobState.PENDING),
        "job_stdout_path": None,
        "job_stderr_path": None,
    }
    assert p.status(["999.vm"])[0].state == JobState.PENDING
