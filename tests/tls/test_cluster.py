"""A Redis Cluster over TLS (``tls-cluster yes``, ``tls-replication yes``, client
certificates required): two simulated sites on two shards, their collectors,
a real ``jobtap worker --all-sites`` (rq on a TLS Redis of its own), an SDK
client subscribed to every job (sharded subscriptions on the replicas) and a
consumer of each stream; `jobtap poke` through the cluster's redirection;
`jobtap acl sync` reaching every node over TLS.  Everything is checked
against the sites' streams and ground truth."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from jobtap.cli import poke
from jobtap.cli.acl import acl as acl_cli
from jobtap.connection import open_redis
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from sim.rig.cluster import LocalCluster
from tests.support.multisite import Audience, SimSite, WorkerPool, check_site, wait_for_everything

CYCLES = 3
ADMIN = ("admin", "admin-secret")


@pytest.fixture
def tls_cluster(tmp_path, pki):
    cluster = LocalCluster(tmp_path / "cluster", tls=pki.server_files("yes"), auth=ADMIN,
                           node_args=["--repl-diskless-sync-delay", "0"]).start()  # fmt: skip
    yield cluster
    cluster.stop()


@pytest.mark.timeout(120)
def test_two_sites_over_a_tls_cluster(tls_cluster, pki, tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    queues_server = RedisServer(tmp_path / "rq", tls=pki.server_files("yes")).start()
    rc = open_redis(tls_cluster.url)
    r = queues_server.client()
    names = tls_cluster.spread_sites(2)
    sites = [SimSite(name, rc, r, seed=20 + i, jobs=80, nodes=8) for i, name in enumerate(names)]
    audience = Audience(tls_cluster.url, names)
    pool = None
    try:
        for s in sites:
            s.cycle_until_done()
        pool = WorkerPool(tls_cluster.url, queues_server.url, n=1)
        for _ in range(CYCLES):
            for s in sites:
                s.cycle_until_done()
        wait_for_everything(rc, r, sites, audience)
        assert pool.alive()
        # a poke given another shard's node is redirected (MOVED) over TLS
        other = next(
            n for n in tls_cluster.primaries() if n is not tls_cluster.primary_of(names[0])
        )
        url = tls_cluster.url_of(other)
        assert poke.main(["--redis", url, "--site", names[0], "--strict", "1"]) == 0
        assert rc.xlen(SiteKeys(names[0]).pokes) == 1
        # jobtap acl finds every node (CLUSTER NODES) and logs in to each over TLS
        users = tmp_path / "users"
        users.write_text("alice\n")
        args = ["sync", "--redis", tls_cluster.url, "--users-file", str(users),
                "--secrets-dir", str(tmp_path)]  # fmt: skip
        for name in names:
            args += ["--site", name]
        done = CliRunner().invoke(acl_cli, args)
        assert done.exit_code == 0, done.output
        for node in tls_cluster.nodes:
            with node.client(decode_responses=True) as c:
                assert c.acl_getuser("writer") and c.acl_getuser("alice"), node.address
        figures = {s.name: check_site(rc, s, audience) for s in sites}
        assert all(f["events"] > 0 for f in figures.values()), figures
    finally:
        errors = pool.stop() if pool is not None else []
        audience.close()
        rc.close()
        queues_server.stop()
    assert not any("Traceback" in e for e in errors), errors
