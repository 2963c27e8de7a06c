"""Where every Redis client jobtap makes comes from (:func:`redis_from_url`,
:func:`cluster_client`, :func:`clone`), so ``redis://``, ``unix://``,
``rediss://`` (:mod:`jobtap.tls`) and ``redis+sentinel://``
(:mod:`jobtap.sentinel`) work everywhere alike; and a client's sites and
their shared server.

The same ``redis://`` URL serves a plain Redis and a Redis Cluster (any one node
of it): :func:`open_redis` asks the server (``INFO cluster``) and hands back
redis-py's :class:`~redis.cluster.RedisCluster` when it is a cluster node.

Which URL, site and login a client uses is :mod:`jobtap.urls`; redis-py's errors
become :mod:`jobtap.errors` in :mod:`jobtap.redis_errors`; the reconnect policy is
:mod:`jobtap.reconnect`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from .cluster import is_cluster
from .errors import ConfigError, RedisUnavailable, TLSFailed
from .keys import SiteKeys
from .sentinel import is_sentinel_url, parse_sentinel_url, sentinel_from_url
from .tls import CONNECT_TIMEOUT, TLS_FILES, TLSConnection, is_tls, tls_problem, tls_retry
from .urls import SiteConfig, safe_url

AnyRedis = redis.Redis | RedisCluster
"""A client of the data: one Redis, or a Redis Cluster."""


def _check_url(url: str, kw: Mapping[str, Any]) -> None:
    """A ConfigError now, rather than a connection error later, for a URL that
    cannot work: not Redis, or naming TLS files that are not there."""
    if is_sentinel_url(url):
        parse_sentinel_url(url)
        return
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"not a Redis URL: {safe_url(url)!r}")
    try:
        query = dict(parse_qsl(urlsplit(url).query))
    except ValueError as exc:
        raise ConfigError(f"bad Redis URL {safe_url(url)!r}: {exc}") from None
    if not url.startswith("rediss://"):
        tls = sorted(k for k in {*query, *kw} if k.startswith("ssl_"))
        if tls:
            raise ConfigError(
                f"{safe_url(url)}: {', '.join(tls)} given for a plain-text URL (use rediss://)"
            )
        return
    for name in TLS_FILES:
        path = kw.get(name) or query.get(name)
        if path and not os.path.exists(path):
            raise ConfigError(f"{safe_url(url)}: {name} {path}: no such file")


def _options(url: str, kw: Mapping[str, Any], *, cluster: bool = False) -> dict[str, Any]:
    _check_url(url, kw)
    out = dict(kw)
    if url.startswith("unix://"):  # a unix socket's connections take no TCP settings
        for tcp_only in ("socket_keepalive", "socket_keepalive_options"):
            out.pop(tcp_only, None)
    if out.get("socket_connect_timeout") is None:
        out["socket_connect_timeout"] = CONNECT_TIMEOUT
    if url.startswith("rediss://"):
        out.setdefault("connection_class", TLSConnection)
        if not cluster:  # the cluster client retries on its own, and not its nodes
            out["retry"] = tls_retry(out.get("retry"))
    return out


def redis_from_url(url: str, **kw: Any) -> redis.Redis:
    """A client of the one Redis at ``url`` (``redis://``, ``rediss://`` with
    redis-py's ``ssl_*`` query parameters, ``unix://``); nothing connects yet.
    ``kw``: redis-py's settings (timeouts, credentials, ``decode_responses``...).
    Every plain client jobtap makes comes from here.

    A ``redis+sentinel://`` (``rediss+sentinel://``) URL gives a client of the
    primary that its Sentinels name, found again after a failover
    (:func:`sentinel_from_url`)."""
    if is_sentinel_url(url):
        return sentinel_from_url(url, **kw)
    options = _options(url, kw)
    try:
        return redis.Redis.from_url(url, **options)
    except ValueError as exc:
        raise ConfigError(f"bad Redis URL {safe_url(url)!r}: {exc}") from None


def clone(r: redis.Redis, **overrides: Any) -> redis.Redis:
    """A client of the same server as ``r`` (or, with ``host`` and ``port``,
    another node of its cluster), with the same settings (TLS, credentials,
    timeouts) but for ``overrides``, and a connection pool of its own.

    A pool made again from ``connection_kwargs`` alone would lose its
    connection class (TLS), which redis-py keeps apart: each connection would
    then fail to be made, and count against the pool's limit all the same,
    until every command failed with "Too many connections"."""
    pool = r.connection_pool
    kwargs = {**pool.connection_kwargs, **overrides}
    if isinstance(pool, SentinelConnectionPool):  # the primary its Sentinels name
        kwargs.pop("connection_pool", None)  # the old pool's proxy: the new pool makes its own
        sentinel_pool = SentinelConnectionPool(
            pool.service_name,
            pool.sentinel_manager,
            connection_class=pool.connection_class,
            max_connections=pool.max_connections,
            is_master=pool.is_master,
            check_connection=pool.check_connection,
            **kwargs,
        )
        return redis.Redis(connection_pool=sentinel_pool)
    new = type(pool)(
        connection_class=pool.connection_class, max_connections=pool.max_connections, **kwargs
    )
    return redis.Redis(connection_pool=new)


def make_redis(
    cfg: SiteConfig,
    *,
    pubsub: bool = False,
    timeout: float = 10.0,
    node: tuple[str, int] | None = None,
    readonly: bool = False,
) -> redis.Redis:
    """A Redis client for ``cfg``.  Pub/sub clients never retry by themselves: the
    dispatcher must see every disconnect to resynchronise.

    ``node``: connect to this host and port instead of the URL's (one node of a
    cluster, with the URL's credentials); ``readonly``: send READONLY on each
    new connection, which a cluster replica needs before it serves reads and
    sharded subscriptions of its primary's slots."""
    kw: dict[str, Any] = {
        "socket_connect_timeout": min(timeout, 5.0),
        "socket_keepalive": True,
        "retry": Retry(ExponentialBackoff(cap=0.25, base=0.02), 0 if pubsub else 2),
    }
    if cfg.username is not None:
        kw["username"] = cfg.username
    if cfg.password is not None:
        kw["password"] = cfg.password
    if pubsub:
        kw["health_check_interval"] = 15
    if readonly:
        kw["redis_connect_func"] = _readonly_on_connect
    client = redis_from_url(cfg.url, **kw)
    if node is not None:  # nothing has connected yet: the pool's connections go there
        client.connection_pool.connection_kwargs.update(host=node[0], port=node[1])
    return client


def _readonly_on_connect(connection: Any) -> None:
    connection.on_connect()
    connection.send_command("READONLY")
    reply = connection.read_response()
    if reply not in (b"OK", "OK"):
        raise redis.ConnectionError(f"READONLY refused: {reply!r}")


def cluster_client(url: str, **kw: Any) -> RedisCluster:
    """redis-py's cluster client, starting from the node at ``url``.

    Keyword arguments are those of a node's connections (timeouts, keepalive,
    user name and password...); ``retry`` sets how many times a command is
    retried across a failover or a slot move (redirections are always
    followed).  A ``rediss://`` URL's TLS settings hold for every node."""
    kw = _options(url, kw, cluster=True)
    start = url
    if url.startswith("rediss://"):
        # redis-py's cluster client would put its own TLS connection class
        # back over ours (from the URL's scheme): give the class, and the
        # URL's parameters with it, as a redis:// URL would be given
        start = "redis://" + url[len("rediss://") :]
    try:
        return RedisCluster.from_url(start, **kw)
    except ValueError as exc:
        raise ConfigError(f"bad Redis URL {safe_url(url)!r}: {exc}") from None
    except redis.exceptions.RedisClusterException as exc:
        problem = tls_problem(exc, url)
        if problem is not None:
            raise TLSFailed(f"TLS with Redis Cluster at {safe_url(url)}: {problem}") from exc
        raise RedisUnavailable(f"Redis Cluster at {safe_url(url)}: {exc}") from exc


def cluster_from(r: redis.Redis) -> RedisCluster:
    """redis-py's cluster client, starting from the node ``r`` talks to, logged
    in like ``r`` and with its TLS settings."""
    kw = r.connection_pool.connection_kwargs
    keep = ("username", "password", "decode_responses", "socket_timeout", "socket_connect_timeout")
    settings = {k: v for k, v in kw.items() if k in keep or k.startswith("ssl_")}
    if is_tls(r):
        settings["connection_class"] = r.connection_pool.connection_class
    host, port = kw.get("host", "localhost"), kw.get("port", 6379)
    where = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return RedisCluster.from_url(f"redis://{where}/0", **settings)


def open_redis(url: str, **kw: Any) -> AnyRedis:
    """A client of the Redis at ``url``: a plain one, or redis-py's
    :class:`~redis.cluster.RedisCluster` if the server says it is a cluster node.

    This connects (one ``INFO cluster``); connection errors propagate as
    redis-py errors.  A cluster URL may not name a database other than 0."""
    plain = redis_from_url(url, **kw)
    try:
        if not is_cluster(plain):
            return plain
    except redis.ResponseError as exc:
        plain.close()
        if "not allowed in cluster mode" in str(exc):  # SELECT of a database other than 0
            raise ConfigError(
                f"{safe_url(url)} is a Redis Cluster node: use database 0 ({exc})"
            ) from None
        raise
    except BaseException:
        plain.close()
        raise
    plain.close()
    return cluster_client(url, **kw)


class Server:
    """The data behind one URL, user and password, shared by the sites that
    name it.  Its client is made at first use (nothing connects before): a plain
    one, or redis-py's cluster client when the server says it is a cluster node.
    A failed first contact is tried again at the next use."""

    def __init__(self, config: SiteConfig, *, timeout: float = 10.0):
        self.config = config
        self.timeout = timeout
        self._client: AnyRedis | None = None
        self._lock = threading.Lock()

    @property
    def redis(self) -> AnyRedis:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._open()
                client = self._client
        return client

    @property
    def cluster(self) -> bool:
        """Whether the data is on a Redis Cluster (connects to find out)."""
        return isinstance(self.redis, RedisCluster)

    def _open(self) -> AnyRedis:
        plain = make_redis(self.config, timeout=self.timeout)
        try:
            if not is_cluster(plain):
                return plain
        except BaseException:
            plain.close()
            raise
        kwargs = plain.connection_pool.connection_kwargs
        plain.close()
        login = {k: kwargs[k] for k in ("username", "password") if kwargs.get(k) is not None}
        return cluster_client(
            self.config.url,
            socket_connect_timeout=min(self.timeout, 5.0),
            socket_keepalive=True,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 6),
            **login,
        )

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


@dataclass
class Site:
    """One site of a client: its keys and its (shared) server."""

    config: SiteConfig
    keys: SiteKeys
    server: Server

    @property
    def redis(self) -> AnyRedis:
        """The data client (connects on first use)."""
        return self.server.redis

    @property
    def name(self) -> str:
        return self.config.site

    @property
    def url(self) -> str:
        return self.config.url
