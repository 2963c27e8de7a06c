"""The whole path on the simulated cluster, checked against its ground truth:
sim -> collector -> rq -> workers -> Redis streams, across a collector restart,
a worker killed mid-batch and failed/garbled stats."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from sim.rig.pipeline import check_against_truth, drain
from sim.rig.wait import eventually

SITE = "e2e"
K = SiteKeys(SITE)
TICK = 300.0


def kill_worker_mid_batch(redis_server, r, attempts: int = 5) -> bool:
    """Start a real `jobtap worker` on the queued backlog and SIGKILL it while it
    holds a chunk; return True once that happened."""
    wip = f"rq:wip:{K.rq_queue('state')}"
    for _ in range(attempts):
        if r.llen(f"rq:queue:{K.rq_queue('state')}") == 0:
            return False
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobtap.cli", "worker", "--redis", redis_server.url,
             "--site", SITE, "--log-level", "WARNING"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

        def caught_or_gone(proc: subprocess.Popen = proc) -> str | None:
            if r.zcard(wip):
                proc.send_signal(signal.SIGKILL)  # at once: the chunk takes milliseconds
                return "caught"
            return "gone" if proc.poll() is not None else None

        outcome = eventually(caught_or_gone, timeout=20, interval=0.0005, what="a chunk taken")
        proc.kill()
        proc.wait()
        if outcome == "caught" and r.zcard(wip):
            return True
    return False


@pytest.mark.timeout(240)
def test_sim_end_to_end_against_ground_truth(redis_server, r):
    backend = SimBackend(seed=5, nodes=40, jobs=600, tick=0)
    sim = backend.simulation
    stat_times: list[float] = []

    def cycle(svc: CollectorService, *, advance: bool = True) -> None:
        if advance:
            sim.advance(TICK)
        stat_times.append(sim.now)
        svc.run_one()

    # Every cycle a full stat: this test is about full stats and their faults
    # (tests/collector/test_tiers.py runs the probe tiers against the truth).
    svc = CollectorService(
        Collector(backend, r, site=SITE, nodes_every=3, reconcile_every=0), interval=0
    )
    for i in range(10):
        cycle(svc)
        if i % 2:
            drain(r, SITE)  # two cycles' chunks at a time: any order must do
    drain(r, SITE)
    before = r.xlen(K.events)

    # A new collector process (same Redis) on an unchanged cluster: nothing to say.
    svc.release_lock()
    col = Collector(backend, r, site=SITE, nodes_every=3, reconcile_every=0)
    svc = CollectorService(col, interval=0)
    cycle(svc, advance=False)
    drain(r, SITE)
    assert r.xlen(K.events) == before

    # Stats that fail or lie change nothing and end nothing.
    for fault in ("fail", "empty", "short", "history_fail"):
        backend.fault(fault)
        cycle(svc)
    drain(r, SITE)

    # Pile up small chunks and kill a real worker while it holds one.
    col.shipper.chunk_size = 2
    for _ in range(3):
        cycle(svc)
    assert kill_worker_mid_batch(redis_server, r), "never caught the worker inside a chunk"
    drain(r, SITE)  # hands back the dead worker's chunk and finishes the backlog
    assert r.zcard(f"rq:wip:{K.rq_queue('state')}") == 0
    col.shipper.chunk_size = 1000

    for _ in range(8):
        cycle(svc)
    drain(r, SITE)
    assert len(stat_times) >= 20

    by_job, checked = check_against_truth(r, SITE, sim, stat_times)
    print(f"checked {checked} finished jobs of {len(by_job)} jobs")
    assert len(by_job) >= 500
    assert checked >= 100
    # every live job in Redis is in its user's set; finished ones are not
    live = sim.live_ids()
    for jid in list(live)[:50]:
        user = sim.truth[jid].user
        if by_job.get(jid):
            assert r.sismember(K.user_jobs(user), jid)


def test_collector_refuses_a_second_collector_for_the_site(r):
    from jobtap.collector.service import AlreadyRunning

    a = CollectorService(Collector(SimBackend(jobs=10, nodes=4), r, site=SITE), interval=1)
    b = CollectorService(Collector(SimBackend(jobs=10, nodes=4), r, site=SITE), interval=1)
    a.acquire_lock()
    with pytest.raises(AlreadyRunning, match="another collector"):
        b.acquire_lock()
    a.release_lock()
    b.acquire_lock()


def test_redis_restart_mid_run_resyncs_without_backwards_steps(redis_server, r):
    backend = SimBackend(seed=2, nodes=20, jobs=200, tick=TICK)
    svc = CollectorService(Collector(backend, r, site=SITE), interval=0)
    assert svc.run_one()
    drain(r, SITE)
    first_cycle = int(r.hget(K.meta, "cycle"))
    redis_server.stop()
    assert not svc.run_one()  # Redis away: a failed cycle, nothing else
    redis_server.start()
    r2 = redis_server.client()
    assert svc.run_one()  # empty Redis: everything is shipped again
    drain(r2, SITE)
    live = backend.simulation.live_count
    assert r2.hlen(K.owner) >= live * 0.9
    assert int(r2.hget(K.meta, "cycle")) > first_cycle  # cycle numbers kept growing
