"""The apply step on a Redis Cluster: each site's batches run as one script on
the primary that holds the site's slot, events go out on sharded channels
(SPUBLISH: only the site's shard carries them, its replicas included), and a
chunk is done once a replica has it."""

from __future__ import annotations

import logging

import redis

from jobtap.contract.chunk import STATE, Chunk, upsert
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier
from jobtap.workers.service import run_worker
from sim.rig.pipeline import site_events
from sim.rig.records import job_record
from tests.workers.test_multisite import ship

AT = "2026-11-21T15:00:00+00:00"


def job_chunk(site: str, cycle: int, jid: str, user: str = "alice", state: str = "queued"):
    rec = job_record(jid, user, state, site)
    return Chunk(site, cycle, AT, "job", [upsert(jid, "fp", rec)])


def subscriber(node, command: str, channel: str, readonly: bool = False) -> redis.Connection:
    conn = redis.Connection(host="127.0.0.1", port=node.port, protocol=2, socket_timeout=5)
    conn.connect()
    if readonly:
        conn.send_command("READONLY")
        assert conn.read_response() == b"OK"
    conn.send_command(command, channel)
    assert conn.read_response()[0].decode() == command.lower()
    return conn


def test_sites_on_three_shards_each_stay_on_theirs(clean_cluster, rc):
    sites = clean_cluster.shard_sites(1)
    applier = Applier(rc)
    for i, site in enumerate(sites):
        for cycle in (1, 2, 3):
            state = ("queued", "running", "completed")[cycle - 1]
            applier.apply(job_chunk(site, cycle, f"{i}.pbs", state=state))
    for site in sites:
        events = [(e["type"], e["version"]) for e in site_events(rc, site)]
        assert events == [("new", 1), ("state", 2), ("final", 3)], site
        node = clean_cluster.primary_of(site)
        with node.client() as direct:  # the keys are on that node, not spread around
            assert direct.exists(SiteKeys(site).events, SiteKeys(site).owner) == 2


def test_a_chunk_is_on_a_replica_when_apply_returns(clean_cluster, rc):
    site = clean_cluster.shard_sites(1)[1]
    replica = clean_cluster.replicas_of(clean_cluster.primary_of(site))[0]
    applier = Applier(rc)
    with replica.client() as r:
        r.execute_command("READONLY")
        for cycle in range(1, 6):
            applier.apply(job_chunk(site, cycle, f"{cycle}.pbs"))
            # no waiting here: WAIT made the primary hand it to the replica first
            assert r.xlen(SiteKeys(site).events) == cycle


def test_events_are_published_on_the_sites_shard_only(clean_cluster, rc):
    site = clean_cluster.shard_sites(1)[0]
    k = SiteKeys(site)
    primary = clean_cluster.primary_of(site)
    replica = clean_cluster.replicas_of(primary)[0]
    elsewhere = next(n for n in clean_cluster.primaries() if n is not primary)
    on_primary = subscriber(primary, "SSUBSCRIBE", k.user_channel("alice"))
    on_replica = subscriber(replica, "SSUBSCRIBE", k.all_channel, readonly=True)
    # a classic subscriber elsewhere would see a classic PUBLISH (the cluster
    # broadcasts those to every node) but never a sharded one
    classic = subscriber(elsewhere, "SUBSCRIBE", k.user_channel("alice"))
    Applier(rc).apply(job_chunk(site, 1, "1.pbs"))
    for conn in (on_primary, on_replica):
        kind, channel, data = conn.read_response()
        assert kind == b"smessage" and b'"object_id":"1.pbs"' in data
    rc.publish(k.user_channel("alice"), b"marker")  # a classic PUBLISH, after the event
    assert classic.read_response() == [b"message", k.user_channel("alice").encode(), b"marker"]
    for conn in (on_primary, on_replica, classic):
        conn.disconnect()


def test_a_worker_pool_on_a_plain_queue_redis_serves_every_shard(clean_cluster, rc, r):
    sites = clean_cluster.shard_sites(2)
    for i, site in enumerate(sites):
        ship(r, site, STATE, 1, f"{i}.pbs")
    level = logging.getLogger().level
    assert run_worker(r, rc, None, burst=True)  # every site with queues
    logging.getLogger().setLevel(level)
    for i, site in enumerate(sites):
        assert [e["object_id"] for e in site_events(rc, site)] == [f"{i}.pbs"], site
