"""``jobtap worker``: applies the collector's chunks (as many as you like, on any host)."""

from __future__ import annotations

import click
import redis

from .options import connect, log_options, redis_option, site_option


# -- worker ---------------------------------------------------------------------------------
@click.command()
@redis_option
@site_option
@click.option("--queue-redis", default=None, help="Redis URL of the rq queues (default: --redis).")
@click.option("--burst", is_flag=True, help="Drain the queues and exit.")
@click.option(
    "--retention",
    type=int,
    default=2 * 86400,
    show_default=True,
    help="Seconds a finished job's record is kept.",
)
@click.option(
    "--site-maxlen",
    type=int,
    default=100_000,
    show_default=True,
    help="Events kept in the site stream.",
)
@click.option(
    "--user-maxlen",
    type=int,
    default=10_000,
    show_default=True,
    help="Events kept in each user's stream.",
)
@click.option(
    "--max-age",
    type=int,
    default=7 * 86400,
    show_default=True,
    help="Seconds events are kept in the streams (0: no age limit).",
)
@log_options
def worker(
    redis_url,
    site,
    queue_redis,
    burst,
    retention,
    site_maxlen,
    user_maxlen,
    max_age,
    log_format,
    log_level,
):
    """Apply the collector's chunks: hashes, versions, streams and pub/sub."""
    from jobtap.workers.apply import Settings
    from jobtap.workers.service import run_worker

    from . import logs

    logs.setup(log_format, log_level)
    data = connect(redis_url)
    queues = connect(queue_redis, "the queue Redis") if queue_redis else data
    settings = Settings(
        retention=retention, site_maxlen=site_maxlen, user_maxlen=user_maxlen, max_age=max_age
    )
    try:
        run_worker(queues, data, site, burst=burst, settings=settings)
    except redis.ConnectionError as exc:
        raise click.ClickException(f"lost Redis: {exc}") from exc
