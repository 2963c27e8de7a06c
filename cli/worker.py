"""``jobtap worker``: applies the collector's chunks (as many as you like, on any
host), of one site, several (``--site A --site B``) or all (``--all-sites``)."""

from __future__ import annotations

import click
import redis

from jobtap.events import EVENT_VERSION, EVENT_VERSIONS

from .options import (
    connect,
    connect_queues,
    log_options,
    metrics_options,
    queue_redis_option,
    redis_option,
    serve_metrics,
    sites_option,
)


# -- worker ---------------------------------------------------------------------------------
@click.command()
@redis_option
@sites_option
@click.option(
    "--all-sites",
    is_flag=True,
    help="Serve every site with queues on the queue Redis, and sites that appear later.",
)
@queue_redis_option
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
    help="Events kept in each user's stream with --copy-events (none older than the site "
    "stream's oldest, which alone bounds it when events are stored once).",
)
@click.option(
    "--max-age",
    type=int,
    default=7 * 86400,
    show_default=True,
    help="Seconds events are kept in the streams (0: no age limit).",
)
@click.option(
    "--event-version",
    type=click.Choice([str(v) for v in EVENT_VERSIONS]),
    envvar="JOBTAP_EVENT_VERSION",
    default=str(EVENT_VERSION),
    show_default=True,
    help="Format of the events written (env JOBTAP_EVENT_VERSION): 2 leaves the scheduler's "
    "native record out of events (it stays in the job's hash); 1 writes it in them, for "
    "consumers not yet upgraded to read format 2.",
)
@click.option(
    "--pack-finished-native/--plain-finished-native",
    envvar="JOBTAP_PACK_FINISHED_NATIVE",
    default=True,
    show_default=True,
    help="Keep a finished job's native record packed (zlib with a dictionary, base64, field "
    "native_zd; 0.1-0.3 of its bytes): readers from this release unpack it, older ones see "
    "none.",
)
@click.option(
    "--store-events-once/--copy-events",
    envvar="JOBTAP_STORE_EVENTS_ONCE",
    default=True,
    show_default=True,
    help="Store a job's event once, in its user's stream, the site stream's entry naming it "
    "(env JOBTAP_STORE_EVENTS_ONCE): readers from this release follow it, older ones "
    "cannot read the site stream's job events; --copy-events writes it into both.",
)
@metrics_options
@log_options
def worker(
    redis_url,
    sites,
    all_sites,
    queue_redis,
    burst,
    retention,
    site_maxlen,
    user_maxlen,
    max_age,
    event_version,
    pack_finished_native,
    store_events_once,
    metrics_port,
    metrics_addr,
    log_format,
    log_level,
):
    """Apply the collector's chunks: hashes, versions, streams and pub/sub."""
    from jobtap.workers.apply import Settings
    from jobtap.workers.service import run_worker

    from . import logs

    if all_sites and sites:
        raise click.UsageError("--all-sites serves every site: do not also give --site")
    logs.setup(log_format, log_level)
    data = connect(redis_url)
    queues = connect_queues(queue_redis, data)
    settings = Settings(
        retention=retention,
        site_maxlen=site_maxlen,
        user_maxlen=user_maxlen,
        max_age=max_age,
        event_version=int(event_version),
        pack_finished_native=pack_finished_native,
        store_events_once=store_events_once,
    )
    served = None if all_sites else sites or ["default"]
    metrics = None
    if metrics_port is not None:
        from jobtap.workers.metrics import WorkerMetrics

        metrics = WorkerMetrics()
        serve_metrics(metrics.registry, metrics_port, metrics_addr)
    try:
        run_worker(queues, data, served, burst=burst, settings=settings, metrics=metrics)
    except redis.ConnectionError as exc:
        raise click.ClickException(f"lost Redis: {exc}") from exc
