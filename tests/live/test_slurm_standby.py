"""A standby collector on the real Slurm (deploy/slurm/start.sh): two real
``jobtap collector --backend slurm`` processes for one site, a real ``jobtap
worker``, bursts of real jobs.  The active one is SIGSTOPped in the middle of
the first burst (the standby takes over within the lease) and resumed (it
writes nothing and steps down); the new active one is SIGKILLed in the middle
of the second burst (the first, a standby again, takes over).  Every job then
has versions 1, 2, 3..., exactly one final, its last event, and no event id
carries two contents.  The scenario is bounded: under 60 s once Slurm is up."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from jobtap.cli.status import status
from jobtap.contract.lease import describe
from sim.rig.epochs import Written
from sim.rig.pipeline import drain, site_events
from sim.rig.slurm import SITE, K, cluster, sbatch
from sim.rig.standby import proc_state
from sim.rig.wait import eventually

LEASE = 3.0


def _collector(url: str, workdir: Path, name: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = workdir / f"{name}.log"
    cmd = [sys.executable, "-m", "jobtap.cli", "collector", "--backend", "slurm",
           "--redis", url, "--site", SITE, "--interval", "1", "--lease", str(LEASE),
           "--reconcile-every", "0", "--state-dir", str(workdir / name)]  # fmt: skip
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=out, env=cluster().env()), log


def _holder_pid(r: redis.Redis) -> int | None:
    holder = describe(r, K).get("holder") or ""
    pid = holder.split(":")[1] if holder.count(":") == 2 else ""
    return int(pid) if pid.isdigit() else None


@pytest.mark.timeout(600)  # the Slurm fixture may wait for another session's turn
def test_standby_collector_on_real_slurm(clean, redis_server, tmp_path):
    r = redis_server.client()
    url = redis_server.url
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobtap.cli", "worker", "--redis", url, "--site", SITE],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    a, log_a = _collector(url, tmp_path, "a")
    procs = [a]
    t0 = time.monotonic()
    try:
        eventually(lambda: _holder_pid(r) == a.pid, timeout=30, what="a holding the lease")
        b, log_b = _collector(url, tmp_path, "b")
        procs.append(b)
        eventually(lambda: describe(r, K)["standbys"], timeout=30, what="b a standby")
        shown = CliRunner().invoke(status, ["--redis", url, "--site", SITE]).output
        assert f":{a.pid}:" in shown.split("standby")[0] and f":{b.pid}:" in shown, shown
        generation = describe(r, K)["generation"]

        first = sbatch("--array=1-8", "--wrap", "sleep 2", "-J", "burst1", minutes=1)
        time.sleep(1.5)  # into the burst (the scenario, not a wait for an outcome)
        a.send_signal(signal.SIGSTOP)
        eventually(lambda: proc_state(a.pid) == "T", timeout=5)
        stopped = time.monotonic()
        eventually(lambda: _holder_pid(r) == b.pid, timeout=LEASE + 5, interval=0.01)
        took_stop = time.monotonic() - stopped
        assert describe(r, K)["generation"] == generation + 1
        a.send_signal(signal.SIGCONT)
        eventually(lambda: "stepping down" in log_a.read_text(), timeout=15,
                   what="a stepping down after SIGCONT")  # fmt: skip
        assert _holder_pid(r) == b.pid
        eventually(lambda: any(s["holder"].split(":")[1] == str(a.pid)
                               for s in describe(r, K)["standbys"]), timeout=15)  # fmt: skip

        second = sbatch("--array=1-8", "--wrap", "sleep 2", "-J", "burst2", minutes=1)
        time.sleep(1.5)
        b.send_signal(signal.SIGKILL)
        b.wait(10)
        killed = time.monotonic()
        eventually(lambda: _holder_pid(r) == a.pid, timeout=LEASE + 5, interval=0.01)
        took_kill = time.monotonic() - killed
        assert describe(r, K)["generation"] == generation + 2
        print(f"takeover after SIGSTOP {took_stop:.2f} s, after SIGKILL {took_kill:.2f} s "
              f"(lease {LEASE:g} s; a dead process of this host goes at once)")  # fmt: skip
        assert took_stop <= LEASE + 1.5 and took_kill <= LEASE + 1.5

        jobs = [f"{arr}_{i}" for arr in (first, second) for i in range(1, 9)]

        def all_final() -> bool:
            drain(r, SITE)
            finals = {e["object_id"] for e in site_events(r, SITE) if e["type"] == "final"}
            return set(jobs) <= finals

        eventually(all_final, timeout=40, interval=0.5, what="every job's final")
        assert time.monotonic() - t0 < 60, "the scenario must stay under 60 s"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        drain(r, SITE)
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(20)
        except subprocess.TimeoutExpired:
            worker.kill()
    written = Written()
    written.gather(r, K.events)  # raises on an id with two contents
    assert not written.twice()
    written.check_versions()
    events = site_events(r, SITE)
    for jid in jobs:
        mine = [e for e in events if e["object_id"] == jid]
        assert [e["version"] for e in mine] == list(range(1, len(mine) + 1)), jid
        types = [e["type"] for e in mine]
        assert types.count("final") == 1 and types[-1] == "final", (jid, types)
        assert mine[-1]["record"]["state"] == "completed", (jid, mine[-1]["record"]["state"])
    print(f"{len(written.ids)} events, {len(jobs)} jobs each with one final, in "
          f"{time.monotonic() - t0:.1f} s")  # fmt: skip
