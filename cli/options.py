"""Options every ``jobtap`` command shares, and the one way commands reach Redis."""

from __future__ import annotations

import click
import redis

from jobtap.connection import safe_url
from jobtap.keys import BadName, check_site

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


def redis_option(f):
    return click.option(
        "--redis",
        "redis_url",
        envvar="JOBTAP_REDIS",
        default=DEFAULT_REDIS,
        show_default=True,
        help="Redis URL of the site's data (env JOBTAP_REDIS).",
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


def log_options(f):
    f = click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="Structured log lines as key=value text or JSON.",
    )(f)
    f = click.option("--log-level", default="INFO", show_default=True)(f)
    return f


def connect(url: str, what: str = "Redis") -> redis.Redis:
    """A client that answers PING, or a one-line ClickException."""
    try:
        r = redis.Redis.from_url(url, socket_connect_timeout=5, health_check_interval=30)
        r.ping()
    except (redis.RedisError, ValueError) as exc:
        raise click.ClickException(f"cannot reach {what} at {safe_url(url)}: {exc}") from exc
    return r
