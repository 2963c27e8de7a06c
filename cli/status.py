"""``jobtap status``: a site's health as the collector and the queues report it."""

from __future__ import annotations

import click

from jobtap.connection import safe_url
from jobtap.keys import SiteKeys
from jobtap.workers.chunk import PRIORITIES

from .options import connect, redis_option, site_option


# -- status ----------------------------------------------------------------------------------
@click.command()
@redis_option
@site_option
@click.option("--queue-redis", default=None)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(redis_url, site, queue_redis, as_json):
    """Site health: the collector's last cycle, errors, queue backlogs, stream sizes."""
    import orjson
    from rq import Queue

    r = connect(redis_url)
    q = connect(queue_redis, "the queue Redis") if queue_redis else r
    keys = SiteKeys(site)
    meta = {k.decode(): v.decode() for k, v in r.hgetall(keys.meta).items()}
    if not meta:
        raise click.ClickException(
            f"no collector has written site {site!r} at {safe_url(redis_url)}"
        )
    info = {"site": site, "meta": meta, "queues": {}, "streams": {}}
    for prio in PRIORITIES:
        queue = Queue(keys.rq_queue(prio), connection=q)
        info["queues"][queue.name] = {
            "waiting": queue.count,
            # no cleanup: that would be a write, and operators only read
            "failed": queue.failed_job_registry.get_job_count(cleanup=False),
        }
    info["streams"]["events"] = r.xlen(keys.events)
    info["jobs_known"] = r.hlen(keys.owner)
    if as_json:
        click.echo(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode())
        return
    state = meta.get("status", "?")
    colour = {"ok": "green", "failing": "red"}.get(state, "yellow")
    click.echo(
        f"site {site}: collector "
        + click.style(state, fg=colour, bold=True)
        + f" (backend {meta.get('backend', '?')}, every {meta.get('interval', '?')}s)"
    )
    click.echo(
        f"  last cycle   {meta.get('last_cycle', '-')} at {meta.get('last_cycle_at', '-')}"
        f" took {meta.get('last_duration_s', '-')}s"
    )
    click.echo(
        f"  jobs         {meta.get('count_jobs', '-')} live, {info['jobs_known']} known"
        f"; nodes {meta.get('count_nodes', '-')}; queues {meta.get('count_queues', '-')}"
    )
    click.echo(
        f"  cycles       {meta.get('cycles_ok', 0)} ok, {meta.get('cycles_failed', 0)} failed"
        f", {meta.get('consecutive_failures', 0)} failing now"
    )
    if meta.get("last_error"):
        click.echo(f"  last error   {meta['last_error']} (at {meta.get('last_error_at', '?')})")
    if meta.get("last_warning"):
        click.echo(f"  warning      {meta['last_warning']}")
    if meta.get("last_bad"):
        click.echo(
            f"  bad records  {meta.get('bad_records', '?')} (last: {meta['last_bad'][:200]})"
        )
    for name, qi in info["queues"].items():
        click.echo(f"  queue        {name}: {qi['waiting']} waiting, {qi['failed']} failed")
    click.echo(f"  site stream  {info['streams']['events']} events")
