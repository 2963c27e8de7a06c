"""Six simulated sites on one Redis Cluster (two per shard), each with its
real collector, one pool of two real workers for all of them (rq on a plain
Redis), an SDK client subscribed to every job of every site and a consumer of
each site's stream: every site's stream matches its simulation's ground truth,
and the subscriber and the consumers got exactly the streams' events."""

from __future__ import annotations

import pytest

from tests.support.multisite import Audience, SimSite, WorkerPool, check_site, wait_for_everything

CYCLES = 8


@pytest.mark.timeout(180)
def test_six_sites_one_cluster_one_worker_pool(clean_cluster, rc, redis_server, r, monkeypatch,
                                               tmp_path):  # fmt: skip
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    names = clean_cluster.shard_sites(2)
    assert len({clean_cluster.primary_of(n).port for n in names}) == 3
    sites = [SimSite(name, rc, r, seed=10 + i) for i, name in enumerate(names)]
    audience = Audience(clean_cluster.url, names)
    for s in sites:
        s.cycle_until_done()  # every site has queues: --all-sites finds them
    pool = WorkerPool(clean_cluster.url, redis_server.url, n=2)
    try:
        for _ in range(CYCLES):
            for s in sites:
                s.cycle_until_done()
        wait_for_everything(rc, r, sites, audience)
        assert pool.alive()
    finally:
        errors = pool.stop()
        audience.close()
    figures = {s.name: check_site(rc, s, audience) for s in sites}
    assert all(f["finished"] > 10 for f in figures.values()), figures
    assert not any("Traceback" in e for e in errors), errors
