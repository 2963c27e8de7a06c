"""A primary holding two sites is killed (SIGKILL) in the middle of a burst;
the cluster promotes its replica.  The collectors and the worker pool carry
on, and the subscriber and the stream consumers of every site, those two
included, get every event once, in order, with no final lost; each site's
stream still matches its simulation's ground truth.

This test has a cluster of its own: it leaves one node dead."""

from __future__ import annotations

import pytest

from jobtap.connection import open_redis
from sim.rig.cluster import LocalCluster
from sim.rig.wait import eventually
from tests.support.multisite import (
    Audience,
    SimSite,
    WorkerPool,
    check_site,
    drained,
    wait_for_everything,
)

BEFORE, AFTER = 3, 5  # burst cycles before and after the kill


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("failover-cluster")).start()
    yield c
    c.stop()


@pytest.mark.timeout(240)
def test_primary_killed_mid_burst(cluster, redis_server, r, monkeypatch, tmp_path):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    rc = open_redis(cluster.url)
    names = cluster.shard_sites(2)
    doomed = cluster.primary_of(names[0])
    hit = [n for n in names if cluster.primary_of(n) is doomed]
    assert len(hit) == 2
    sites = [SimSite(name, rc, r, seed=30 + i, jobs=300) for i, name in enumerate(names)]
    audience = Audience(cluster.url_of(cluster.nodes[-1]), names)
    for s in sites:
        s.cycle_until_done()
    pool = WorkerPool(cluster.url, redis_server.url, n=2)
    try:
        for _ in range(BEFORE):
            for s in sites:
                s.cycle_until_done()
        eventually(lambda: drained(r, names), timeout=60, what="the pool at work")
        # every worker up before the kill: one still starting would meet a dead
        # primary in its start-up check of the cluster, and exit with a one-line error
        eventually(lambda: pool.serving(r), timeout=30, what="every worker serving")
        for s in sites:  # this cycle's chunks are being applied when the primary dies
            s.cycle_until_done()
        cluster.kill(doomed)
        for _ in range(AFTER):
            for s in sites:
                s.cycle_until_done()
        promoted = cluster.wait_failover(hit[0], doomed)
        assert cluster.primary_of(hit[1]) is promoted
        wait_for_everything(rc, r, sites, audience, timeout=90)
        assert pool.alive()
    finally:
        errors = pool.stop()
        audience.close()
    figures = {s.name: check_site(rc, s, audience) for s in sites}
    rc.close()
    assert all(f["finished"] > 10 for f in figures.values()), figures
    assert not any("Traceback" in e for e in errors), errors
