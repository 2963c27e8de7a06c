"""Where the apply step writes a site's batches: the one Redis, or on a Redis
Cluster the primary that holds the site's slot (every key of a site shares
``{site}``, so one node holds all of it and each batch stays one atomic script).

The apply step pipelines its scripts on one connection, so it talks to that
node directly, through the node client redis-py's cluster client keeps.  After
a failover or a slot move the cluster client's map is refreshed
(:meth:`Destinations.refresh`) and the chunk is applied again from the start: the
batches already written are skipped by their cycle check.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis
from hiredis import pack_command
from redis.cluster import RedisCluster
from redis.commands.core import Script

from jobtap.connection import AnyRedis, clone
from jobtap.keys import SiteKeys

log = logging.getLogger("jobtap.workers")

# What a failover or a slot move looks like from the apply step: the node is
# gone or silent, says the slot is elsewhere (MOVED/ASK), is being moved
# (TRYAGAIN), has no primary yet (CLUSTERDOWN), or is a replica now (READONLY).
CLUSTER_CHANGES = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.AskError,  # MovedError too
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.ClusterError,
    redis.exceptions.RedisClusterException,
)
WAIT_OFF_SECONDS = 10.0  # after a replica did not answer WAIT, stop asking for this long


def twin(r: redis.Redis, **overrides: object) -> redis.Redis:
    """A client of the same server with other connection settings (its own pool,
    the same connection class: TLS stays TLS)."""
    return clone(r, **overrides)


@dataclass
class Destination:
    """One server the apply step writes to.

    ``writer`` sends the scripts (one pipelined connection per chunk);
    ``reader`` reads the stored records, decoding replies in hiredis (C);
    ``replicas``: on a cluster, how many replicas the shard has: a chunk is done
    once one of them has it (``WAIT``), so that a failover keeps it."""

    writer: redis.Redis
    reader: redis.Redis
    script: Script
    replicas: int = 0
    address: str = ""
    wait_off_until: float = 0.0

    def close(self) -> None:
        self.reader.close()

    def read_hashes(self, keys: list[str]) -> list[dict[str, str]]:
        """``HGETALL`` of each of ``keys`` (``{}`` for a missing one), sent at once
        on one connection of the reader and read back reply by reply: what a
        redis-py pipeline does, without its Python work per command, which cost
        the worker more than the parsing.  One buffer, one ``sendall``: given a
        list, redis-py sends each command with a system call of its own."""
        pool = self.reader.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command([b"".join(pack_command(("HGETALL", key)) for key in keys)])
            flat = [conn.read_response() for _ in keys]  # RESP2: [field, value, ...]
        except BaseException:
            conn.disconnect()  # replies may be left unread: never reuse this socket
            raise
        finally:
            pool.release(conn)
        return [dict(zip(it, it)) for it in map(iter, flat)]

    def wait_for_a_replica(self, timeout_ms: int) -> None:
        """Block until a replica has everything written so far, or ``timeout_ms``.
        A shard whose replicas do not answer is written without waiting for a
        while (with a warning), rather than slowed down by every chunk."""
        if not self.replicas or time.monotonic() < self.wait_off_until:
            return
        if int(self.writer.execute_command("WAIT", 1, timeout_ms)) >= 1:
            return
        self.wait_off_until = time.monotonic() + WAIT_OFF_SECONDS
        log.warning(
            "no replica of %s acknowledged the last chunk within %d ms: a failover now could "
            "lose it; not waiting for replicas there for %.0f s",
            self.address,
            timeout_ms,
            WAIT_OFF_SECONDS,
        )


class Destinations:
    """The destination of each site: the one Redis, or the node that holds it."""

    def __init__(self, r: AnyRedis, script: str):
        self.redis = r
        self.text = script
        self.cluster = isinstance(r, RedisCluster)
        self._by_node: dict[str, Destination] = {}
        self._plain: Destination | None = None
        if not self.cluster:
            self._plain = self._make(r)

    def _make(self, writer: redis.Redis, replicas: int = 0, address: str = "") -> Destination:
        writer.script_load(self.text)  # batches are sent by sha without waiting for a reply
        # The reader reads whole hashes: in RESP2 a reply is a flat array, which
        # costs the worker about a third less CPU to parse than RESP3's map (the
        # same dict comes out).  RESP2 has no maintenance notifications.
        reader = twin(writer, decode_responses=True, protocol=2, maint_notifications_config=None)
        return Destination(writer, reader, writer.register_script(self.text), replicas, address)

    def for_site(self, keys: SiteKeys) -> Destination:
        if self._plain is not None:
            return self._plain
        rc = self.redis
        assert isinstance(rc, RedisCluster)
        node = rc.get_node_from_key(keys.events)
        dest = self._by_node.get(node.name)
        if dest is None:
            slot = rc.keyslot(keys.events)
            replicas = len(rc.nodes_manager.slots_cache.get(slot, [node])) - 1
            writer = rc.get_redis_connection(node)
            dest = self._by_node[node.name] = self._make(writer, replicas, node.name)
        return dest

    def refresh(self) -> None:
        """Forget the nodes and ask the cluster again who holds which slot."""
        assert isinstance(self.redis, RedisCluster)
        for dest in self._by_node.values():
            dest.close()
        self._by_node.clear()
        self.redis.nodes_manager.initialize()
