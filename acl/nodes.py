"""The Redis servers that keep the ACL users: one plain Redis, or every node of a
Redis Cluster, primaries and replicas alike.

Redis keeps ACL users per server: ``ACL SETUSER`` is neither replicated to
replicas nor spread over the cluster bus, and a subscriber or a reader may be
sent to any node of its site's shard.  So ``jobtap acl`` finds every node from
the one it was given (``CLUSTER NODES``) and applies each change to all of them,
logging in to each as the same admin user; a node it cannot reach, or that
refuses, is reported by address rather than skipped in silence.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from redis.cluster import RedisCluster

from jobtap.cluster import is_cluster
from jobtap.connection import clone, cluster_from

STANDALONE, PRIMARY, REPLICA = "standalone", "primary", "replica"
# Errors that mean "this node did not take it" rather than "the request is wrong".
NODE_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError)


@dataclass
class AclNode:
    """One server with ACL users of its own; ``r`` is None when it could not be
    reached (``error`` says why)."""

    address: str
    role: str
    r: redis.Redis | None
    error: str | None = None


@dataclass(frozen=True)
class Peer:
    """A node as ``CLUSTER NODES`` lists it."""

    host: str
    port: int
    role: str
    myself: bool
    failing: bool


def address_of(r: redis.Redis) -> str:
    kw = r.connection_pool.connection_kwargs
    return f"{kw.get('host', 'localhost')}:{kw.get('port', 6379)}"


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def peers(r: redis.Redis) -> list[Peer]:
    """Every node of the cluster ``r`` belongs to, itself included.  Nodes the
    cluster has no address for yet (``noaddr``, ``handshake``) are left out."""
    out = []
    for line in _s(r.execute_command("CLUSTER", "NODES")).splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        flags = set(fields[2].split(","))
        if flags & {"noaddr", "handshake"}:
            continue
        hostport = fields[1].split("@", 1)[0]
        host, _, port = hostport.rpartition(":")
        role = PRIMARY if "master" in flags else REPLICA
        failing = bool(flags & {"fail", "fail?"})
        out.append(Peer(host, int(port), role, "myself" in flags, failing))
    return out


def acl_nodes(r: redis.Redis, *, timeout: float = 5.0) -> list[AclNode]:
    """The servers to administer, ``r``'s own first: just it on a plain Redis,
    every node of the cluster otherwise, each logged in like ``r``."""
    if not is_cluster(r):
        return [AclNode(address_of(r), STANDALONE, r)]
    found = peers(r)
    me = next(p for p in found if p.myself)
    nodes = [AclNode(address_of(r), me.role, r)]
    for p in found:
        if p.myself:
            continue
        address = f"{p.host}:{p.port}"
        client = clone(  # logged in like r, over TLS if r is
            r, host=p.host, port=p.port, socket_connect_timeout=timeout, socket_timeout=timeout
        )
        try:
            client.ping()
        except NODE_ERRORS as exc:
            client.close()
            why = f"{exc} (the cluster marks it as failing)" if p.failing else str(exc)
            nodes.append(AclNode(address, p.role, None, why))
            continue
        nodes.append(AclNode(address, p.role, client))
    return nodes


def data_client(r: redis.Redis) -> redis.Redis | RedisCluster:
    """A client of the data behind ``r`` (which may be one node of a cluster),
    logged in like ``r``: for reading the sites' owner indexes."""
    if not is_cluster(r):
        return r
    return cluster_from(r)
