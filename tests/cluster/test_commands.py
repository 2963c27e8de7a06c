"""``jobtap`` commands given the URL of any one node of a Redis Cluster:
``poke`` follows the cluster's redirections to the node holding the site, the
services refuse to put rq's queues on a cluster, ``status`` reads the site from
wherever it lives."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from jobtap.cli.app import main as jobtap
from jobtap.cli.poke import poke, redirection
from jobtap.keys import SiteKeys
from sim.rig.wait import eventually


def test_poke_through_any_node_lands_in_the_sites_stream(clean_cluster, rc):
    site = clean_cluster.shard_sites(1)[2]
    for node in clean_cluster.nodes:  # five of six answer MOVED: the poke follows
        poke(clean_cluster.url_of(node), site, [f"{node.port}.pbs"])
    pokes = rc.xrange(SiteKeys(site).pokes)
    assert sorted(f[b"ids"].decode() for _, f in pokes) == sorted(
        f"{n.port}.pbs" for n in clean_cluster.nodes
    )


def test_redirections_are_read_and_nothing_else():
    assert redirection("MOVED 3999 127.0.0.1:6381") == ("MOVED", "127.0.0.1", 6381)
    assert redirection("ASK 3999 10.0.0.2:7000") == ("ASK", "10.0.0.2", 7000)
    assert redirection("MOVED 3999 :7000") == ("MOVED", "127.0.0.1", 7000)
    for message in ("ERR unknown command", "MOVED", "MOVED 1 nowhere", "NOPERM no"):
        assert redirection(message) is None, message


@pytest.mark.parametrize("command", ["worker", "collector", "status", "doctor"])
def test_rq_is_never_put_on_the_cluster(clean_cluster, redis_server, command):
    extra = {"worker": ["--burst"], "collector": ["--backend", "sim"]}.get(command, [])
    runner = CliRunner()
    result = runner.invoke(jobtap, [command, "--redis", clean_cluster.url, *extra])
    assert result.exit_code == 1
    assert "rq needs a plain Redis for its queues: give --queue-redis" in result.output
    result = runner.invoke(
        jobtap,
        [command, "--redis", redis_server.url, "--queue-redis", clean_cluster.url, *extra],
    )
    assert result.exit_code == 1
    assert "is a Redis Cluster: rq needs a plain Redis" in result.output


def test_status_reads_a_site_on_the_cluster(clean_cluster, rc, redis_server):
    site = clean_cluster.shard_sites(1)[1]
    rc.hset(SiteKeys(site).meta, mapping={"status": "running", "cycle": "7"})
    result = CliRunner().invoke(
        jobtap,
        ["status", "--redis", clean_cluster.url, "--queue-redis", redis_server.url,
         "--site", site, "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert '"cycle": "7"' in result.output or '"cycle":"7"' in result.output


def test_top_hears_the_collectors_health_on_the_sites_shard(clean_cluster, rc, r, monkeypatch,
                                                            tmp_path):  # fmt: skip
    """The collector SPUBLISHes its health after each cycle; ``jobtap top``'s
    feed SSUBSCRIBEs to it through redis-py's cluster pub/sub."""
    from jobtap.cli.top import Board, HealthFeed
    from jobtap.urls import resolve
    from tests.support.multisite import SimSite

    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    site = clean_cluster.shard_sites(1)[0]
    sim = SimSite(site, rc, r, seed=3, jobs=20, nodes=4)
    sim.cycle_until_done()
    configs, _ = resolve(clean_cluster.url, site=site)
    board = Board()
    feed = HealthFeed(configs[0], SiteKeys(site), board)
    feed.start()
    try:
        eventually(lambda: board.health.get("status") == "ok", what="the health in meta")
        first = int(board.health["last_cycle"])

        def heard_a_later_cycle() -> bool:
            sim.cycle_until_done()  # published after the feed subscribed, sooner or later
            return int(board.health.get("last_cycle", 0)) > first

        eventually(heard_a_later_cycle, what="a cycle's health on the channel")
    finally:
        feed.stop()
        feed.join(5)
