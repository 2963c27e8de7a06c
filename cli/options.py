"""Options every ``jobtap`` command shares, and the one way commands reach Redis."""

from __future__ import annotations

import click
import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from jobtap.connection import AnyRedis, open_redis
from jobtap.errors import ConfigError, JobtapError
from jobtap.keys import BadName, check_site
from jobtap.redis_errors import describe_error, translate_error
from jobtap.sentinel import is_sentinel, set_wait_replicas
from jobtap.urls import safe_url

from .passwords import looked_at, password_file_option, with_password

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def redis_option(f):
    f = click.option(
        "--redis",
        "redis_url",
        envvar="JOBTAP_REDIS",
        default=DEFAULT_REDIS,
        show_default=True,
        callback=with_password,
        help="Redis URL of the site's data (env JOBTAP_REDIS); name only the user in it and "
        "give the password with --password-file or the environment, not in ps.",
    )(f)
    return password_file_option(f)


_META_WAIT = "jobtap.queue_wait_replicas"


def queue_redis_option(f):
    """``--queue-redis URL`` (read by :func:`connect_queues`)."""
    return click.option(
        "--queue-redis",
        envvar="JOBTAP_QUEUE_REDIS",
        default=None,
        callback=with_password,
        help="Redis URL of the rq queues (env JOBTAP_QUEUE_REDIS; default: --redis).  A plain "
        "Redis: required when --redis is a Redis Cluster, which rq cannot use.  A Redis under "
        "Sentinel: redis+sentinel://[user@]host:port[,host:port...]/SERVICE[/DB].",
    )(f)


def queue_wait_option(f):
    """``--queue-wait-replicas N`` (read by :func:`connect_queues`): only for the
    command that ships chunks (the collector); the others write nothing to wait for."""
    return click.option(
        "--queue-wait-replicas",
        type=click.IntRange(0, 16),
        envvar="JOBTAP_QUEUE_WAIT_REPLICAS",
        default=None,
        is_eager=True,
        expose_value=False,
        callback=lambda ctx, param, value: ctx.meta.__setitem__(_META_WAIT, value),
        help="Replicas of the queue Redis that must acknowledge each shipment (WAIT) before "
        "it counts as shipped (env JOBTAP_QUEUE_WAIT_REPLICAS; default: 1 for a "
        "redis+sentinel:// URL, else 0).",
    )(f)


def site_option(f):
    return click.option(
        "--site",
        envvar="JOBTAP_SITE",
        default="default",
        show_default=True,
        callback=check_site_option,
        help="Site name (env JOBTAP_SITE).",
    )(f)


def check_site_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return check_site(value)
    except BadName as exc:
        raise click.BadParameter(str(exc)) from exc


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_options(f):
    f = click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Structured log lines as key=value text or JSON.",
    )(f)
    f = click.option(
        "--log-level",
        type=click.Choice(LOG_LEVELS, case_sensitive=False),
        default="INFO",
        show_default=True,
        help="Log this level and above (DEBUG: every cycle's commands and pokes).",
    )(f)
    return f


def sites_option(f):
    """``--site A --site B`` (env JOBTAP_SITE, names separated by spaces)."""
    return click.option(
        "--site",
        "sites",
        multiple=True,
        envvar="JOBTAP_SITE",
        callback=check_sites_option,
        help="Site name; repeat for several (env JOBTAP_SITE, space-separated). Default: default.",
    )(f)


def check_sites_option(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> list[str]:
    try:
        return list(dict.fromkeys(check_site(v) for v in value))
    except BadName as exc:
        raise click.BadParameter(str(exc)) from exc


def unwritten(site: str, url: str) -> click.ClickException:
    """The error of a command pointed at a site no collector has written (a
    mistyped --site): it would otherwise wait, or say nothing, forever."""
    return click.ClickException(f"no collector has written site {site!r} at {safe_url(url)}")


def connect(url: str, what: str = "Redis") -> AnyRedis:
    """A client that answers PING (redis-py's cluster client if ``url`` is a node
    of a Redis Cluster), or a one-line ClickException."""
    try:
        r = open_redis(url, socket_connect_timeout=5, health_check_interval=30)
        r.ping()
    except (redis.RedisError, RedisClusterException, JobtapError, OSError, ValueError) as exc:
        if isinstance(exc, redis.AuthenticationError):
            line = f"{translate_error(exc, url)}{looked_at()}"
        elif isinstance(exc, ConfigError):
            line = str(exc)
        else:
            line = describe_error(exc, url)
        if what != "Redis":
            line = f"{what}: {line}"
        raise click.ClickException(line) from exc
    return r


def connect_queues(url: str | None, data: AnyRedis) -> redis.Redis:
    """The Redis of the rq queues: ``url``, else the data's.  rq has no cluster
    support, so it must be a plain Redis (``--queue-redis`` beside a cluster)."""
    if url is None:
        if isinstance(data, RedisCluster):
            raise click.ClickException(
                "the data Redis is a Redis Cluster, and rq needs a plain Redis for its "
                "queues: give --queue-redis URL"
            )
        ctx = click.get_current_context(silent=True)
        set_wait_replicas(data, ctx.meta.get(_META_WAIT) if ctx is not None else None)
        return data
    queues = connect(url, "the queue Redis")
    if isinstance(queues, RedisCluster):
        queues.close()
        raise click.ClickException(
            f"the queue Redis at {safe_url(url)} is a Redis Cluster: rq needs a plain Redis"
        )
    ctx = click.get_current_context(silent=True)
    wanted = ctx.meta.get(_META_WAIT) if ctx is not None else None
    set_wait_replicas(queues, wanted)  # None: 1 under Sentinel, else 0
    if is_sentinel(queues) and wanted == 0:
        click.echo(
            "warning: --queue-wait-replicas 0: a chunk shipped just before the queue "
            "primary fails may be lost with it",
            err=True,
        )
    return queues


def metrics_options(f):
    f = click.option(
        "--metrics-addr",
        default="127.0.0.1",
        show_default=True,
        help="Address the metrics endpoint listens on (0.0.0.0: every interface).",
    )(f)
    f = click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        default=None,
        help="Serve Prometheus metrics on this port at /metrics (default: off).",
    )(f)
    return f


def serve_metrics(registry, port: int, addr: str) -> None:
    """Serve a Prometheus registry on ``addr:port`` from a daemon thread, or a
    one-line error if the port cannot be had."""
    from prometheus_client import start_http_server

    try:
        start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise click.ClickException(f"cannot serve metrics on {addr}:{port}: {exc}") from exc
