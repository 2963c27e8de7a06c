"""Redis under Sentinel: ``redis+sentinel://`` URLs, clients of the primary the
Sentinels name (found again after a failover), and how many replicas must have a
write."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

from .errors import ConfigError
from .tls import CONNECT_TIMEOUT, TLS_FILES, TLSConnection, tls_retry
from .urls import safe_url

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
        options["retry"] = tls_retry(options.get("retry"))
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
