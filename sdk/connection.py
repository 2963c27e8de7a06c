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

Every client jobtap makes comes from here (:func:`redis_from_url`,
:func:`cluster_client`, :func:`clone`), so ``redis://``, ``unix://`` and
``rediss://`` work everywhere alike.  A ``rediss://`` URL takes redis-py's TLS
query parameters (``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
``ssl_cert_reqs``, ``ssl_check_hostname``...); the server's certificate is
verified unless ``ssl_cert_reqs=none``.  The TLS handshake is bounded by the
connect timeout, and a failed one is reported in one line
(:class:`~jobtap.errors.TLSFailed`): wrong CA, expired certificate, missing
client certificate, plain text to a TLS port, TLS to a plain port.
"""

from __future__ import annotations

import copy
import inspect
import logging
import os
import re
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.connection import Connection, SSLConnection
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection
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
    TLSFailed,
)
from .keys import BadName, SiteKeys

log = logging.getLogger("jobtap.sdk")

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_SITE = "default"
CONNECT_TIMEOUT = 5.0
"""Seconds for a TCP connect, and again for a TLS handshake, unless told otherwise."""
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_ca_path")
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
    if "sentinel_password=" in parts.query:  # a Sentinel URL's second password
        query = re.sub(r"(^|&)(sentinel_password=)[^&]*", r"\1\2***", parts.query)
        parts = parts._replace(query=query)
        url = urlunsplit(parts)
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


class TLSConnection(SSLConnection):
    """redis-py's TLS connection, with the handshake bounded by the connect
    timeout: a TLS client on a plain port would otherwise wait for a server
    hello that never comes (the server waits for a line end in the hello)."""

    def _connect(self) -> Any:
        sock = Connection._connect(self)  # TCP only; its timeout is socket_timeout now
        sock.settimeout(self.socket_connect_timeout or CONNECT_TIMEOUT)
        try:
            tls = self._wrap_socket_with_ssl(sock)  # type: ignore[no-untyped-call]
        except TimeoutError:
            sock.close()
            # not a timeout to redis-py (which would try again): a failed handshake
            raise ssl.SSLError(
                f"no TLS handshake within {self.socket_connect_timeout or CONNECT_TIMEOUT:g} s "
                "(a plain-text port? then use redis://)"
            ) from None
        except BaseException:
            sock.close()
            raise
        tls.settimeout(self.socket_timeout)
        return tls


def is_tls_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps) a failed TLS handshake or certificate check."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ssl.SSLError | TLSFailed):
            return True
        e = e.__cause__ or e.__context__
    return False


class _TLSRetry(Retry):
    """A retry policy that does not try a failed TLS handshake again at once:
    a wrong CA or a plain-text port stays so, and each attempt could cost a
    connect timeout.  The caller's own loop (with backoff and a log line)
    decides when to try again."""

    def call_with_retry(
        self,
        do: Callable[[], Any],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> Any:
        def retryable(error: Exception) -> bool:
            return not is_tls_failure(error) and (is_retryable is None or is_retryable(error))

        return super().call_with_retry(do, fail, retryable, with_failure_count)


def _tls_retry(retry: Retry | None) -> Retry:
    if retry is None:  # redis-py's default
        retry = inspect.signature(redis.Redis.__init__).parameters["retry"].default
    if isinstance(retry, _TLSRetry):
        return retry
    tls = copy.copy(retry)
    tls.__class__ = _TLSRetry
    return tls


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
            out["retry"] = _tls_retry(out.get("retry"))
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


def is_tls(r: redis.Redis) -> bool:
    """Whether ``r``'s connections are TLS ones."""
    return issubclass(r.connection_pool.connection_class, SSLConnection)


# -- Redis under Sentinel ---------------------------------------------------------------------
SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")
SENTINEL_PORT = 26379
SENTINEL_FORM = "redis+sentinel://[user[:password]@]host:port[,host:port...]/SERVICE[/DB]"
SENTINEL_PARAMS = ("sentinel_username", "sentinel_password", "sentinel_password_file")
_SSL_PARAMS = (*TLS_FILES, "ssl_cert_reqs", "ssl_check_hostname")


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` names a Redis by its Sentinels (``redis+sentinel://``)."""
    return url.startswith(SENTINEL_SCHEMES)


@dataclass(frozen=True)
class SentinelURL:
    """What a ``redis+sentinel://`` URL says: the Sentinels to ask, the service
    (``sentinel monitor SERVICE ...``), the database, the primary's login, the
    Sentinels' own login and the TLS settings of both (``rediss+sentinel://``)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    tls: dict[str, Any] | None = None


def parse_sentinel_url(url: str) -> SentinelURL:
    """Parse ``redis+sentinel://[user[:password]@]host:port[,host:port...]/SERVICE[/DB]``
    (query: ``ssl_*`` for ``rediss+sentinel://``, ``sentinel_username``,
    ``sentinel_password`` or ``sentinel_password_file``), or raise a one-line
    :class:`~jobtap.errors.ConfigError`."""

    def bad(why: str) -> ConfigError:
        return ConfigError(f"bad Sentinel URL {safe_url(url)!r}: {why} (expected {SENTINEL_FORM})")

    tls = url.startswith("rediss+sentinel://")
    rest = url.split("://", 1)[1]
    rest, _, query_text = rest.partition("?")
    rest = rest.split("#", 1)[0]
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if colon else None
    sentinels: list[tuple[str, int]] = []
    for item in hosts.split(","):
        item = item.strip()
        if not item:
            raise bad("no Sentinel host" if not sentinels else "an empty host in the list")
        if item.startswith("["):  # [IPv6]:port
            host, _, port_text = item[1:].partition("]")
            port_text = port_text.removeprefix(":")
        else:
            host, _, port_text = item.partition(":")
        try:
            port = int(port_text) if port_text else SENTINEL_PORT
        except ValueError:
            raise bad(f"port {port_text!r} of {item!r} is not a number") from None
        if not host or not 0 < port < 65536:
            raise bad(f"{item!r} is not host:port")
        sentinels.append((host, port))
    parts = [unquote(p) for p in path.split("/")] if path else []
    if parts and parts[-1] == "":
        parts.pop()
    if not parts or not parts[0]:
        raise bad("no service name (the name Sentinel monitors, e.g. /mymaster)")
    if len(parts) > 2:
        raise bad(f"{path!r}: only /SERVICE or /SERVICE/DB")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit():
            raise bad(f"database {parts[1]!r} is not a number")
        db = int(parts[1])
    try:
        query = dict(parse_qsl(query_text, strict_parsing=bool(query_text)))
    except ValueError as exc:
        raise bad(f"query: {exc}") from None
    unknown = sorted(set(query) - {*SENTINEL_PARAMS, *_SSL_PARAMS})
    if unknown:
        raise bad(f"unknown parameter {', '.join(unknown)}")
    ssl_given = sorted(k for k in query if k.startswith("ssl_"))
    if ssl_given and not tls:
        raise ConfigError(
            f"{safe_url(url)}: {', '.join(ssl_given)} given for a plain-text URL "
            "(use rediss+sentinel://)"
        )
    settings: dict[str, Any] | None = None
    if tls:
        settings = {"ssl": True}
        for name in _SSL_PARAMS:
            if name not in query:
                continue
            value: Any = query[name]
            if name in TLS_FILES and not os.path.exists(value):
                raise ConfigError(f"{safe_url(url)}: {name} {value}: no such file")
            if name == "ssl_check_hostname":
                value = value.lower() not in ("0", "false", "no", "off")
            settings[name] = value
    sentinel_password = query.get("sentinel_password")
    secret_file = query.get("sentinel_password_file")
    if secret_file:
        if sentinel_password is not None:
            raise bad("sentinel_password and sentinel_password_file both given")
        try:
            with open(secret_file, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError as exc:
            raise ConfigError(
                f"{safe_url(url)}: sentinel_password_file {secret_file}: {exc.strerror or exc}"
            ) from None
        sentinel_password = lines[0].strip() if lines and lines[0].strip() else None
        if sentinel_password is None:
            raise ConfigError(f"{safe_url(url)}: sentinel_password_file {secret_file} is empty")
    return SentinelURL(
        tuple(sentinels),
        parts[0],
        db,
        username,
        password,
        query.get("sentinel_username"),
        sentinel_password,
        settings,
    )


class _SentinelTLSConnection(SentinelManagedConnection, TLSConnection):
    """A connection to the primary that the Sentinels name, over TLS with the
    handshake bounded by the connect timeout (see :class:`TLSConnection`)."""


def sentinel_from_url(url: str, **kw: Any) -> redis.Redis:
    """A client of the primary of the service that the Sentinels at ``url``
    monitor (``redis+sentinel://``, see :func:`parse_sentinel_url`); nothing
    connects yet.  Each new connection asks the Sentinels where the primary
    is, so after a failover the client reaches the promoted replica: a command
    that meets the dead primary (a connection error) or a demoted one
    (``READONLY``) fails, and the next one goes to the new primary.

    ``kw``: redis-py's settings for the primary's connections; the Sentinels'
    take the same timeouts and keepalive, the URL's TLS settings and their
    own login (``sentinel_username``, ``sentinel_password(_file)``)."""
    spec = parse_sentinel_url(url)
    options = dict(kw)
    options.setdefault("socket_connect_timeout", CONNECT_TIMEOUT)
    options["db"] = spec.db
    if spec.username is not None:
        options.setdefault("username", spec.username)
    if spec.password is not None:
        options.setdefault("password", spec.password)
    to_sentinels = {k: v for k, v in options.items() if k.startswith("socket_")}
    if spec.sentinel_username is not None:
        to_sentinels["username"] = spec.sentinel_username
    if spec.sentinel_password is not None:
        to_sentinels["password"] = spec.sentinel_password
    if spec.tls is not None:
        to_sentinels.update(spec.tls)
        options.update({k: v for k, v in spec.tls.items() if k != "ssl"})
        options["connection_class"] = _SentinelTLSConnection
        options["retry"] = _tls_retry(options.get("retry"))
    sentinel = Sentinel(list(spec.sentinels), sentinel_kwargs=to_sentinels)
    client: redis.Redis = sentinel.master_for(spec.service, **options)
    return client


def is_sentinel(r: Any) -> bool:
    """Whether ``r`` reaches its Redis through Sentinels (it has replicas)."""
    return isinstance(getattr(r, "connection_pool", None), SentinelConnectionPool)


def sentinel_service(r: redis.Redis) -> str | None:
    """The Sentinel service name of ``r``'s primary, or None."""
    pool = r.connection_pool
    return pool.service_name if isinstance(pool, SentinelConnectionPool) else None


_WAIT_REPLICAS = "_jobtap_wait_replicas"


def set_wait_replicas(r: redis.Redis, n: int | None) -> None:
    """How many replicas must have a write to ``r`` before it counts as done
    (``WAIT n``); None: the default of :func:`wait_replicas`."""
    setattr(r, _WAIT_REPLICAS, n)


def wait_replicas(r: redis.Redis) -> int:
    """How many replicas must acknowledge a write to ``r``: as set with
    :func:`set_wait_replicas`, else 1 for a Redis under Sentinel, 0 otherwise."""
    n = getattr(r, _WAIT_REPLICAS, None)
    if n is not None:
        return int(n)
    return 1 if is_sentinel(r) else 0


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
    scheme = "rediss" if is_tls(r) else "redis"
    return f"{scheme}://{kw.get('host', '?')}:{kw.get('port', '?')}"


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


def _verify_message(exc: BaseException) -> str | None:
    """Why the server's certificate was refused, if it was."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:  # redis-py wraps the ssl error
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            return str(e.verify_message or e.reason or e)
        e = e.__cause__ or e.__context__
    text = str(exc)
    marker = "certificate verify failed: "
    if marker in text:
        return text.split(marker, 1)[1].split(" (_ssl.c", 1)[0].rstrip(".")
    return None


def tls_problem(exc: BaseException, url: str) -> str | None:
    """What went wrong with TLS, in a few words on one line, if that is what
    ``exc`` (a redis-py or socket error met while talking to ``url``) says;
    else None."""
    problem = _tls_problem(exc, url)
    return " ".join(problem.split()) if problem is not None else None


def _tls_problem(exc: BaseException, url: str) -> str | None:
    why = _verify_message(exc)
    if why is not None:
        if "expired" in why:
            return f"the server's certificate has expired ({why})"
        if "mismatch" in why or "hostname" in why.lower():
            return f"the server's certificate is not for this host name ({why})"
        return f"the server's certificate is not trusted: {why} (check ssl_ca_certs)"
    text = str(exc)
    low = text.lower()
    if "no tls handshake" in low:
        found = re.search(r"no TLS handshake within ([0-9.]+) s", text)
        within = f" within {found.group(1)} s" if found else ""
        return f"no TLS handshake{within} (a plain-text port? then use redis://)"
    if "certificate required" in low or "certificate_required" in low:
        return "the server wants a client certificate (give ssl_certfile and ssl_keyfile)"
    if "alert certificate expired" in low or "certificate_expired" in low:
        return "the server refused the client certificate: it has expired"
    if "alert unknown ca" in low or "alert bad certificate" in low or "unknown_ca" in low:
        return "the server refused the client certificate (not signed by a CA it trusts)"
    tls_url = url.startswith("rediss://")
    if tls_url and ("wrong version number" in low or "record layer failure" in low
                    or "packet length too long" in low or "http request" in low):  # fmt: skip
        return "the server does not speak TLS (a plain-text port? then use redis://)"
    if tls_url and "eof occurred in violation" in low:  # closed on us just after the handshake
        if "ssl_certfile" in url:
            return "the server closed the connection: did it refuse the client certificate?"
        return (
            "the server closed the connection: does it want a client certificate? (give "
            "ssl_certfile and ssl_keyfile)"
        )
    if tls_url and "[ssl" in low:
        return text.split(". ", 1)[-1].rstrip(".")
    return None


def describe_error(exc: BaseException, url: str) -> str:
    """One line saying why Redis at ``url`` could not be used."""
    where = safe_url(url)
    if isinstance(exc, JobtapError):
        return str(exc)
    problem = tls_problem(exc, url)
    if problem is not None:
        return f"TLS with Redis at {where}: {problem}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    low = text.lower()
    if url.startswith("redis://") and (
        "reset by peer" in low or "closed by server" in low or "connection closed" in low
    ):
        return (
            f"cannot reach Redis at {where}: {text} (a TLS port? then use rediss:// and "
            "ssl_ca_certs)"
        )
    return f"cannot reach Redis at {where}: {text}"


def translate_error(exc: BaseException, url: str) -> JobtapError:
    """The SDK error for a redis-py (or socket) error."""
    where = safe_url(url)
    if isinstance(exc, JobtapError):
        return exc
    problem = tls_problem(exc, url)
    if problem is not None:
        return TLSFailed(f"TLS with Redis at {where}: {problem}")
    if isinstance(exc, redis.AuthenticationError | redis.AuthenticationWrongNumberOfArgsError):
        return AuthenticationFailed(f"Redis at {where} refused the credentials: {exc}")
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return PermissionDenied(f"Redis at {where}: permission denied: {exc}")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return RedisUnavailable(describe_error(exc, url))
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
