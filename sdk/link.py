"""One pub/sub connection of the dispatcher (a *link*).

On a plain Redis a link serves every site of that server and uses classic
channels (SUBSCRIBE).  On a Redis Cluster each site gets a link of its own, on
the shard that holds the site's slot, with sharded channels (SSUBSCRIBE): the
workers SPUBLISH there, and the messages stay on that shard.  The link prefers
one of the shard's replicas (READONLY first), so subscribers spread over the
replicas and leave the primary to the writes (``JOBTAP_SUBSCRIBE_ON=primary``
listens on the primary instead: one hop less per message).

Where a site lives can change: a primary fails and its replica takes over, or
the slot is moved to another shard.  A link notices through its connection
dropping, through the server unsubscribing its channels (a node that gives a
slot away does that), or through :meth:`Link.moved`, which the dispatcher asks
every few seconds: after a failover the replica it listens to may stay up, and
messages its old primary sent just before dying may never have reached it.
Each of these makes the dispatcher reconnect, to wherever the site is now, and
catch up from the streams.
"""

from __future__ import annotations

import logging
import os
import random
import socket
from collections import deque

import redis
from redis.client import PubSub
from redis.cluster import RedisCluster

from .connection import Server, make_redis
from .keys import SiteKeys
from .replies import text
from .urls import SiteConfig

log = logging.getLogger("jobtap.sdk")


def on_replicas() -> bool:
    """Whether cluster links listen on replicas (the default) or on the
    primaries (``JOBTAP_SUBSCRIBE_ON=primary``: one hop less for each message,
    all the subscribers on the nodes that also take the writes)."""
    where = os.environ.get("JOBTAP_SUBSCRIBE_ON", "replica").strip().lower()
    if where not in ("replica", "primary"):
        log.warning("jobtap: JOBTAP_SUBSCRIBE_ON=%r: expected replica or primary", where)
    return where != "primary"


class Link:
    """One pub/sub connection: to the server of ``config``, or (``site`` given,
    ``server`` a cluster) to a node of the shard holding ``site``."""

    def __init__(
        self,
        config: SiteConfig,
        server: Server | None = None,
        site: SiteKeys | None = None,
        *,
        prefer_replica: bool | None = None,
    ):
        self.config = config
        self.server = server
        self.site = site
        self.sharded = site is not None
        self.prefer_replica = on_replicas() if prefer_replica is None else prefer_replica
        self.client: redis.Redis | None = None if self.sharded else make_redis(config, pubsub=True)
        self.pubsub: PubSub | None = None
        self.refs: dict[str, int] = {}
        self.confirmed: set[str] = set()
        self.inflight: deque[str] = deque()  # SUBSCRIBEs sent, not answered yet (in order)
        self.run_id: str | None = None
        self.node: str | None = None  # cluster: "host:port" of the node listened to
        self.primary: str | None = None  # cluster: the shard's primary when connected

    @property
    def url(self) -> str:
        return self.config.url

    @property
    def where(self) -> str:
        """For messages: the node listened to, or the URL."""
        return self.node or self.config.url

    def sock(self) -> socket.socket | None:
        conn = self.pubsub.connection if self.pubsub is not None else None
        sock: socket.socket | None = getattr(conn, "_sock", None) if conn is not None else None
        return sock

    def _server_id(self) -> str | None:
        if self.client is None:
            return None
        try:
            return text(self.client.info("server").get("run_id", "")) or None
        except redis.ResponseError:  # INFO not allowed for this user
            return None

    # -- where the site lives (cluster) ------------------------------------------------
    def _cluster(self) -> RedisCluster:
        assert self.server is not None and self.site is not None
        rc = self.server.redis
        assert isinstance(rc, RedisCluster)
        return rc

    def _shard(self, refresh: bool) -> list[tuple[str, int]]:
        """The shard holding the site: its primary, then its replicas."""
        rc = self._cluster()
        assert self.site is not None
        if refresh:
            rc.nodes_manager.initialize()
        slot = rc.keyslot(self.site.events)
        nodes = rc.nodes_manager.slots_cache.get(slot) or []
        if not nodes:
            raise redis.ConnectionError(f"no node serves slot {slot} of site {self.site.site}")
        return [(n.host, int(n.port)) for n in nodes]

    def _choose_node(self, refresh: bool) -> None:
        """Pick the node to listen to: a replica of the site's shard, else its
        primary.  ``refresh``: read the cluster's map again first (a reconnect:
        the site may have moved); the cluster client read it when it was made."""
        shard = self._shard(refresh)
        primary, replicas = shard[0], shard[1:]
        node = random.choice(replicas) if replicas and self.prefer_replica else primary
        if self.client is not None:
            self.client.close()
        self.client = make_redis(self.config, pubsub=True, node=node, readonly=node != primary)
        self.node = f"{node[0]}:{node[1]}"
        self.primary = f"{primary[0]}:{primary[1]}"

    def moved(self) -> bool:
        """Whether the site's shard has another primary than when this link
        connected (a failover, or the slot moved): asks the node it listens to."""
        if not self.sharded or self.client is None or self.primary is None:
            return False
        assert self.site is not None
        slot = self._cluster().keyslot(self.site.events)
        for start, end, primary, *_ in self.client.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return f"{text(primary[0]) or '127.0.0.1'}:{int(primary[1])}" != self.primary
        return True  # nobody serves it now, as this node sees it

    # -- the connection ---------------------------------------------------------------------
    def connect(self) -> None:
        """(Re)connect (on a cluster: to wherever the site lives now) and
        subscribe every referenced channel."""
        self.drop()
        if self.sharded:
            self._choose_node(refresh=True)
        assert self.client is not None
        self.client.ping()
        self.run_id = self._server_id()
        for channel in [c for c, n in self.refs.items() if n > 0]:
            self.subscribe(channel)

    def subscribe(self, channel: str) -> None:
        """SUBSCRIBE (SSUBSCRIBE) one channel per command, so that a refusal (an
        ACL error, which does not name the channel) is matched to its channel by
        order."""
        if self.pubsub is None:
            if self.client is None:
                self._choose_node(refresh=False)
            assert self.client is not None
            if self.run_id is None:
                self.run_id = self._server_id()
            self.pubsub = self.client.pubsub()
        self.inflight.append(channel)
        if self.sharded:
            self.pubsub.ssubscribe(channel)
        else:
            self.pubsub.subscribe(channel)

    def answered(self, channel: str) -> None:
        try:
            self.inflight.remove(channel)
        except ValueError:
            pass

    def unsubscribe(self, channel: str) -> None:
        self.confirmed.discard(channel)
        if self.pubsub is not None:
            if self.sharded:
                self.pubsub.sunsubscribe(channel)
            else:
                self.pubsub.unsubscribe(channel)

    def drop(self) -> None:
        self.confirmed.clear()
        self.inflight.clear()
        if self.pubsub is not None:
            try:
                self.pubsub.close()
            except Exception:  # the connection is gone anyway
                pass
            self.pubsub = None

    def close(self) -> None:
        self.drop()
        if self.client is not None:
            self.client.close()
