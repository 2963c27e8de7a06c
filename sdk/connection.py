"""Where a client connects: resolving URL, site and credentials, creating Redis
clients, translating Redis errors into :mod:`jobtap.errors`, and the reconnect
policy (tenacity: exponential backoff with jitter and a cap).

Resolution order, first found wins:

- URL: the argument, ``$JOBTAP_REDIS``, the credential file's ``url``,
  ``redis://127.0.0.1:6379/0``;
- site: the argument, ``$JOBTAP_SITE``, the credential file's ``site``, ``default``;
- user name and password: the arguments, the credential file (read only when
  neither was given, or when ``credentials=`` names a file), the URL.

The same ``redis://`` URL serves a plain Redis and a Redis Cluster (any one node
of it): :func:`open_redis` asks the server (``INFO cluster``) and hands back
redis-py's :class:`~redis.cluster.RedisCluster` when it is a cluster node.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential,
    wait_random,
)
from tenacity.stop import stop_base

from . import credentials as creds_mod
from .errors import (
    AuthenticationFailed,
    ConfigError,
    JobtapError,
    PermissionDenied,
    RedisUnavailable,
)
from .keys import BadName, SiteKeys

log = logging.getLogger("jobtap.sdk")

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_SITE = "default"
# Errors after which reconnecting makes sense.
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, OSError, RedisUnavailable)


@dataclass(frozen=True)
class SiteConfig:
    site: str
    url: str
    username: str | None = None
    password: str | None = None

    @property
    def server(self) -> tuple[str, str | None, str | None]:
        """Sites with equal ``server`` share connections (and one pub/sub link)."""
        return (self.url, self.username, self.password)


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<bad url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def resolve(
    redis_url: str | None = None,
    *,
    site: str | None = None,
    username: str | None = None,
    password: str | None = None,
    credentials: str | os.PathLike[str] | None = None,
    sites: Mapping[str, Any] | None = None,
) -> tuple[list[SiteConfig], str]:
    """Work out every site's connection settings; return them and the default site.

    ``sites`` maps a site name to ``None`` (use the client's URL), a URL, or a
    mapping with ``url``, ``username`` and ``password``.
    """
    cred = None
    if credentials is not None or (username is None and password is None):
        cred = creds_mod.load(credentials, required=credentials is not None)
    url = redis_url or os.environ.get("JOBTAP_REDIS") or (cred and cred.url) or DEFAULT_URL
    user = username if username is not None else (cred.username if cred else None)
    pw = password if password is not None else (cred.password if cred else None)
    default_site = site or os.environ.get("JOBTAP_SITE") or (cred and cred.site) or DEFAULT_SITE
    configs: list[SiteConfig] = []
    if sites:
        for name, spec in sites.items():
            if spec is None:
                configs.append(SiteConfig(name, url, user, pw))
            elif isinstance(spec, str):
                configs.append(SiteConfig(name, spec, user, pw))
            elif isinstance(spec, Mapping):
                unknown = set(spec) - {"url", "username", "password"}
                if unknown:
                    raise ConfigError(f"site {name!r}: unknown settings {sorted(unknown)}")
                configs.append(
                    SiteConfig(
                        name,
                        spec.get("url") or url,
                        spec.get("username", user),
                        spec.get("password", pw),
                    )
                )
            else:
                raise ConfigError(f"site {name!r}: expected a URL or a mapping, not {spec!r}")
        if site is None:
            default_site = configs[0].site
        elif site not in {c.site for c in configs}:
            raise ConfigError(f"site {site!r} is not one of {[c.site for c in configs]}")
    else:
        configs.append(SiteConfig(default_site, url, user, pw))
    for c in configs:
        try:
            SiteKeys(c.site)
        except BadName as exc:
            raise ConfigError(str(exc)) from None
        if not c.url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"not a Redis URL: {safe_url(c.url)!r}")
    return configs, default_site


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
    try:
        client = redis.Redis.from_url(cfg.url, **kw)
    except ValueError as exc:
        raise ConfigError(f"bad Redis URL {safe_url(cfg.url)!r}: {exc}") from None
    if node is not None:  # nothing has connected yet: the pool's connections go there
        client.connection_pool.connection_kwargs.update(host=node[0], port=node[1])
    return client


def _readonly_on_connect(connection: Any) -> None:
    connection.on_connect()
    connection.send_command("READONLY")
    reply = connection.read_response()
    if reply not in (b"OK", "OK"):
        raise redis.ConnectionError(f"READONLY refused: {reply!r}")


AnyRedis = redis.Redis | RedisCluster
"""A client of the data: one Redis, or a Redis Cluster."""


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
    return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}"


def cluster_client(url: str, **kw: Any) -> RedisCluster:
    """redis-py's cluster client, starting from the node at ``url``.

    Keyword arguments are those of a node's connections (timeouts, keepalive,
    user name and password...); ``retry`` sets how many times a command is
    retried across a failover or a slot move (redirections are always
    followed)."""
    try:
        return RedisCluster.from_url(url, **kw)
    except ValueError as exc:
        raise ConfigError(f"bad Redis URL {safe_url(url)!r}: {exc}") from None
    except redis.exceptions.RedisClusterException as exc:
        raise RedisUnavailable(f"Redis Cluster at {safe_url(url)}: {exc}") from exc


def open_redis(url: str, **kw: Any) -> AnyRedis:
    """A client of the Redis at ``url``: a plain one, or redis-py's
    :class:`~redis.cluster.RedisCluster` if the server says it is a cluster node.

    This connects (one ``INFO cluster``); connection errors propagate as
    redis-py errors.  A cluster URL may not name a database other than 0."""
    try:
        plain = redis.Redis.from_url(url, **kw)
    except ValueError as exc:
        raise ConfigError(f"bad Redis URL {safe_url(url)!r}: {exc}") from None
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


def translate_error(exc: BaseException, url: str) -> JobtapError:
    """The SDK error for a redis-py (or socket) error."""
    where = safe_url(url)
    if isinstance(exc, JobtapError):
        return exc
    if isinstance(exc, redis.AuthenticationError | redis.AuthenticationWrongNumberOfArgsError):
        return AuthenticationFailed(f"Redis at {where} refused the credentials: {exc}")
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return PermissionDenied(f"Redis at {where}: permission denied: {exc}")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return RedisUnavailable(f"cannot reach Redis at {where}: {exc}")
    return JobtapError(f"Redis at {where}: {exc}")


@contextmanager
def translated(url: str) -> Iterator[None]:
    """Turn redis-py errors raised inside the block into :mod:`jobtap.errors`."""
    try:
        yield
    except redis.RedisError as exc:
        raise translate_error(exc, url) from exc


class _StopWhen(stop_base):
    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()


def reconnecting(
    stop: threading.Event,
    *,
    initial: float = 0.05,
    cap: float = 5.0,
    deadline: float | None = None,
    on_retry: Callable[[RetryCallState], None] | None = None,
) -> Retrying:
    """The reconnect policy: retry transient errors with exponential backoff and
    jitter, up to ``cap`` seconds between attempts; give up when ``stop`` is set or
    after ``deadline`` seconds (never by default)."""
    stopper: stop_base = _StopWhen(stop)
    stopper = stopper | (stop_after_delay(deadline) if deadline is not None else stop_never)

    def sleep(seconds: float) -> None:  # wakes up at once when stopping
        stop.wait(seconds)

    return Retrying(
        # A refused login is no passing fault: the user was revoked or the
        # password changed.  Retrying would hide that forever.
        retry=retry_if_exception_type(TRANSIENT)
        & retry_if_not_exception_type(redis.AuthenticationError),
        wait=wait_exponential(multiplier=initial, max=cap) + wait_random(0, initial),
        stop=stopper,
        sleep=sleep,
        before_sleep=on_retry,
        reraise=True,
    )


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
