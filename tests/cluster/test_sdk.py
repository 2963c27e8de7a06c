"""The SDK on a Redis Cluster, from the URL of any one node: reading sites that
live on different shards, subscribing to them from one client (sharded
channels, on a replica of each site's shard), the stream, and a site whose
slot is moved to another shard under a live subscription."""

from __future__ import annotations

import pytest

import jobtap
from jobtap.entries import STREAM
from jobtap.keys import SiteKeys
from sim.rig.cluster import site_slot
from tests.support.sdk import Recorder, Writer


@pytest.fixture
def sites(clean_cluster, monkeypatch, tmp_path):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    return clean_cluster.shard_sites(1)  # one site on each of the three shards


@pytest.fixture
def writers(rc, sites):
    return {site: Writer(rc, site=site) for site in sites}


def client_of(cluster, sites, node=None) -> jobtap.Client:
    url = cluster.url_of(node or cluster.nodes[-1])  # a replica's URL: any node will do
    return jobtap.Client(url, sites=dict.fromkeys(sites))


def shard_subscribers(cluster, channel: str) -> dict[int, int]:
    """Sharded subscribers of ``channel`` on each node that has any."""
    out = {}
    for node in cluster.live():
        with node.client() as c:
            _, n = c.execute_command("PUBSUB", "SHARDNUMSUB", channel)
        if n:
            out[node.port] = n
    return out


def test_reads_across_shards_from_any_node(clean_cluster, sites, writers):
    for i, site in enumerate(sites):
        writers[site].job(f"{i}.pbs", "alice", state="running")
        writers[site].node("n1")
    with client_of(clean_cluster, sites) as client:
        for i, site in enumerate(sites):
            job = client.job(f"{i}.pbs")
            assert job is not None and job.site == site and job.state == "running"
        assert sorted(j.id for j in client.jobs(user="alice")) == ["0.pbs", "1.pbs", "2.pbs"]
        assert len(client.nodes()) == 3


def test_one_client_subscribes_to_sites_on_three_shards(clean_cluster, sites, writers):
    for site in sites:
        writers[site].job("1.pbs", "alice")
    rec = Recorder()
    with client_of(clean_cluster, sites) as client:
        with client.subscribe(rec, user="alice"):
            rec.wait_count(3)  # the three initial records
            for site in sites:
                for state in ("running", "exiting"):
                    writers[site].job("1.pbs", state=state)
                writers[site].finish("1.pbs")
            rec.wait_count(3 + 9)
            for site in sites:
                mine = [c for c in rec.changes if c.site == site]
                assert [c.version for c in mine] == [1, 2, 3, 4], site
                assert [c.type for c in mine][-1] == "final"
                # one sharded subscriber, on a replica of the site's shard
                primary = clean_cluster.primary_of(site)
                replicas = {n.port for n in clean_cluster.replicas_of(primary)}
                where = shard_subscribers(clean_cluster, SiteKeys(site).user_channel("alice"))
                assert list(where.values()) == [1] and set(where) <= replicas, (site, where)


def test_the_stream_of_a_site_on_the_cluster(clean_cluster, sites, writers, rc):
    site = sites[2]
    for n in range(5):
        writers[site].job(f"{n}.pbs", "bob")
    # the site stream names bob's stream, on the site's slot (jobtap.entries)
    named = {f.get(STREAM) for _, f in rc.xrange(SiteKeys(site).events)}
    assert named == {SiteKeys(site).user_events("bob").encode()}
    with client_of(clean_cluster, sites) as client:
        stream = client.stream(site=site, since="0", idle_timeout=1.0)
        assert [c.object_id for c in stream] == [f"{n}.pbs" for n in range(5)]


def test_a_slot_moved_under_a_subscription_loses_nothing(clean_cluster, sites, writers):
    site = sites[0]
    w = writers[site]
    w.job("1.pbs", "alice")
    rec = Recorder()
    with client_of(clean_cluster, sites) as client:
        with client.subscribe(rec, user="alice", site=site):
            rec.wait_count(1)
            for n in range(2, 6):
                w.job("1.pbs", comment=f"before {n}")
            source = clean_cluster.primary_of(site)
            target = next(p for p in clean_cluster.primaries() if p is not source)
            clean_cluster.migrate_slot(site_slot(site), target)
            assert clean_cluster.primary_of(site) is target
            for n in range(6, 11):
                w.job("1.pbs", comment=f"after {n}")  # the apply step follows the slot
            w.finish("1.pbs")
            rec.wait_for(lambda cs: any(c.type == "final" for c in cs))
            # The slot's new node has another run_id: the apply step begins a new
            # site epoch there (jobtap.contract.epoch; a move loses nothing, but the
            # server cannot tell it from a failover that did), and versions count
            # from 1 again in it.  Per epoch: every version once, in order.
            by_epoch: dict[str, list[int]] = {}
            for c in rec.changes:
                by_epoch.setdefault(c.epoch, []).append(c.version)
            assert list(by_epoch.values()) == [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6]], by_epoch
            assert [c.type for c in rec.changes].count("final") == 1
            assert rec.changes[-1].type == "final"
            # the subscription now listens on the slot's new shard
            where = shard_subscribers(clean_cluster, SiteKeys(site).user_channel("alice"))
            shard = {target.port} | {n.port for n in clean_cluster.replicas_of(target)}
            assert set(where) <= shard and list(where.values()) == [1], where


def test_subscribers_on_the_primaries_when_asked(clean_cluster, sites, writers, monkeypatch):
    monkeypatch.setenv("JOBTAP_SUBSCRIBE_ON", "primary")
    site = sites[1]
    writers[site].job("1.pbs", "alice")
    rec = Recorder()
    with client_of(clean_cluster, sites) as client, client.subscribe(rec, user="alice", site=site):
        rec.wait_count(1)
        writers[site].job("1.pbs", state="running")
        rec.wait_count(2)
        where = shard_subscribers(clean_cluster, SiteKeys(site).user_channel("alice"))
        assert where == {clean_cluster.primary_of(site).port: 1}
