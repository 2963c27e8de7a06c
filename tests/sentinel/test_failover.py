"""The queue Redis under Sentinel: its primary is killed (SIGKILL) in the
middle of a burst and the Sentinels promote the replica.  The collector (its
shipments acknowledged by the replica, WAIT 1) and the workers (real ``jobtap
worker`` processes given the ``redis+sentinel://`` URL) carry on, and every
change reaches the data Redis: the site's stream matches the simulation's
ground truth, each job's versions 1, 2, 3... with no gap and no repeat, the
subscriber and the stream consumer got each event once.

``JOBTAP_FAILOVER_FIGURES=1`` prints the figures (docs/performance.md, "Queue
failover")."""

from __future__ import annotations

import os
import re
import time

import pytest
import redis

from jobtap.contract.epoch import EpochGuard
from jobtap.keys import SiteKeys
from jobtap.sentinel import wait_replicas
from sim.rig.pipeline import site_events
from sim.rig.wait import eventually
from tests.support.multisite import (
    Audience,
    SimSite,
    WorkerPool,
    check_site,
    drained,
    wait_for_everything,
)

BEFORE, AFTER = 3, 4  # burst cycles before and after the kill


# what the loss of the primary raises, and nothing else
LOST_PRIMARY = (
    "redis.exceptions.ConnectionError",
    "redis.exceptions.TimeoutError",
    "redis.sentinel.MasterNotFoundError",
    "ConnectionResetError",
    "ConnectionRefusedError",
    "BrokenPipeError",
    "TimeoutError",
)


def unexpected_errors(stderrs: list[str]) -> list[str]:
    """The exceptions in the workers' tracebacks that the primary's loss does
    not explain."""
    found = re.findall(r"^([A-Za-z_][\w.]*(?:Error|Exception)\b.*)$", "\n".join(stderrs), re.M)
    return [line for line in found if not line.startswith(LOST_PRIMARY)]


def drained_now(queues, names) -> bool:
    """Whether no chunk waits or runs; False while the queue Redis is away."""
    try:
        return drained(queues, names)
    except redis.RedisError:
        return False


@pytest.mark.timeout(90)
def test_queue_primary_killed_mid_burst(sentinel, queues, redis_server, r, monkeypatch, tmp_path):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    t0 = time.monotonic()
    assert wait_replicas(queues) == 1  # a Sentinel URL: each shipment waits for a replica
    site = SimSite("hpc1", r, queues, seed=41, jobs=250)
    names = [site.name]
    audience = Audience(redis_server.url, names)
    site.cycle_until_done()
    epoch = EpochGuard(r).ensure(SiteKeys(site.name), 0).epoch
    pool = WorkerPool(redis_server.url, sentinel.url, n=2)
    try:
        for _ in range(BEFORE):
            site.cycle_until_done()
        eventually(lambda: drained_now(queues, names), timeout=30, what="the pool at work")
        # every worker up before the kill: one still starting would meet a dead
        # primary in its start-up check, and exit with a one-line error
        eventually(lambda: pool.serving(queues), timeout=30, what="every worker serving")
        site.cycle_until_done()  # this cycle's chunks are being applied when the primary dies
        doomed = sentinel.kill_primary()
        killed_at = time.monotonic()
        failed_before = site.failed
        for _ in range(AFTER):
            site.cycle_until_done()
        promoted = sentinel.wait_failover(doomed)
        assert promoted is not doomed
        eventually(lambda: drained_now(queues, names), timeout=30, interval=0.1, what="drained")
        wait_for_everything(r, queues, [site], audience, timeout=30)
        assert pool.alive()
        recovered = time.monotonic() - killed_at
    finally:
        errors = pool.stop()
        audience.close()
    figures = check_site(r, site, audience)
    # the data Redis lost nothing: one epoch, versions counted on from 1 without a gap
    assert len({e.get("epoch") for e in site_events(r, site.name)}) == 1
    assert EpochGuard(r).ensure(SiteKeys(site.name), 0).epoch == epoch
    assert site.failed > failed_before, "no cycle met the failover"
    assert figures["finished"] > 10, figures
    # rq's loop quits on the lost primary, with a traceback; the worker starts
    # a new one (workers/service.py): nothing else may have gone wrong
    assert not unexpected_errors(errors), unexpected_errors(errors)
    if os.environ.get("JOBTAP_FAILOVER_FIGURES"):
        print(
            f"\nqueue failover: {figures['events']} changes applied, 0 lost, "
            f"{figures['jobs']} jobs ({figures['finished']} finished), "
            f"{site.failed - failed_before} cycles failed during the failover, "
            f"all applied {recovered:.1f} s after the kill, test {time.monotonic() - t0:.1f} s"
        )
