"""One ``redis://`` URL for a plain Redis and for a Redis Cluster: jobtap asks
the server (``INFO cluster``) and takes redis-py's cluster client when it is a
cluster node, whichever node the URL names (a replica too)."""

from __future__ import annotations

import logging

import pytest
import redis
from redis.cluster import RedisCluster

from jobtap.cluster import is_cluster
from jobtap.connection import open_redis
from jobtap.errors import ConfigError
from jobtap.keys import SiteKeys
from sim.rig.cluster import site_slot
from tests.support.acl import ADMIN_PW, AclServer


def test_any_node_url_gives_a_cluster_client(clean_cluster):
    sites = clean_cluster.shard_sites(1)
    for node in clean_cluster.nodes:  # primaries and replicas alike
        r = open_redis(clean_cluster.url_of(node), decode_responses=True)
        try:
            assert isinstance(r, RedisCluster)
            for site in sites:
                k = SiteKeys(site)
                r.hset(k.meta, "from", node.port)
                assert r.hget(k.meta, "from") == str(node.port)
        finally:
            r.close()
    # the sites really are on three different shards
    assert len({clean_cluster.primary_of(s).port for s in sites}) == 3


def test_a_site_lives_in_one_slot(rc):
    k = SiteKeys("hpc1")
    keys = [k.events, k.owner, k.meta, k.job("alice", "1.pbs"), k.user_channel("alice"), k.pokes]
    assert {rc.keyslot(key) for key in keys} == {site_slot("hpc1")}


def test_plain_redis_gives_a_plain_client(redis_server):
    r = open_redis(redis_server.url)
    try:
        assert type(r) is redis.Redis and not is_cluster(r)
    finally:
        r.close()


def test_a_cluster_has_no_database_but_0(clean_cluster):
    with pytest.raises(ConfigError, match="use database 0"):
        open_redis(clean_cluster.url.replace("/0", "/3"))


def test_unreachable_is_a_connection_error():
    from jobtap.sim.localredis import free_port

    with pytest.raises(redis.ConnectionError):
        open_redis(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)


def test_a_user_refused_info_is_taken_for_plain_redis(tmp_path, caplog):
    """ACL rules made before jobtap knew clusters refuse INFO: the client keeps
    working on a plain Redis as before, and says what to do."""
    server = AclServer(tmp_path / "redis").start()
    try:
        with server.client() as admin:
            admin.execute_command("ACL", "SETUSER", "old", "on", ">pw", "-@all", "+ping", "~*")
        with caplog.at_level(logging.WARNING, logger="jobtap.sdk"):
            r = open_redis(server.url_as("old", "pw"))
        assert type(r) is redis.Redis and r.ping()
        assert "jobtap acl sync" in caplog.text
        r.close()
        with pytest.raises(redis.AuthenticationError):
            open_redis(server.url_as("admin", ADMIN_PW + "x"))
    finally:
        server.stop()
