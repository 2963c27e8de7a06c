"""Redis Cluster: whether a server is a cluster node, and how jobtap publishes
on one.  The same ``redis://`` URL serves a plain Redis and a Redis Cluster (any
one node of it); :func:`jobtap.connection.open_redis` makes the client."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis
from redis.cluster import RedisCluster

from .tls import is_tls
from .urls import safe_url

if TYPE_CHECKING:
    from .connection import AnyRedis

log = logging.getLogger("jobtap.sdk")


def is_cluster(r: redis.Redis) -> bool:
    """Whether ``r`` talks to a node of a Redis Cluster (``INFO cluster``).

    A user whose ACL refuses ``INFO cluster`` (rules made before jobtap knew
    clusters) is taken to be on a plain Redis, as before; ``jobtap acl sync``
    grants it.  Connection errors propagate."""
    try:
        info = r.info("cluster")
    except redis.exceptions.NoPermissionError:
        log.warning(
            "jobtap: the Redis user may not run INFO cluster: taking %s for a plain Redis "
            "(run jobtap acl sync to grant it)",
            safe_url(_url_of(r)),
        )
        return False
    return str(info.get("cluster_enabled", 0)) == "1"


def publish_command(r: AnyRedis) -> str:
    """How jobtap publishes on ``r``: ``PUBLISH``, or on a Redis Cluster
    ``SPUBLISH`` (a sharded channel stays on the shard of its ``{site}`` slot
    instead of being broadcast to every node)."""
    return "SPUBLISH" if isinstance(r, RedisCluster) else "PUBLISH"


def _url_of(r: redis.Redis) -> str:
    kw = r.connection_pool.connection_kwargs
    scheme = "rediss" if is_tls(r) else "redis"
    return f"{scheme}://{kw.get('host', '?')}:{kw.get('port', '?')}"
