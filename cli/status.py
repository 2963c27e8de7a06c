"""``jobtap status``: a site's health as the collector and the queues report it."""

from __future__ import annotations

import click

from jobtap.contract import meta as field
from jobtap.contract.chunk import PRIORITIES
from jobtap.contract.epoch import CAUSES
from jobtap.keys import SiteKeys
from jobtap.sentinel import is_sentinel_url

from .options import (
    connect,
    connect_queues,
    queue_redis_option,
    redis_option,
    site_option,
    unwritten,
)


# -- status ----------------------------------------------------------------------------------
@click.command()
@redis_option
@site_option
@queue_redis_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(redis_url, site, queue_redis, as_json):
    """Site health: the collector's last cycle, failures by cause, follow mode, what the
    workers applied and their lag, queue backlogs, stream sizes (the facts the
    services also export to Prometheus with --metrics-port)."""
    import orjson
    from rq import Queue

    r = connect(redis_url)
    keys = SiteKeys(site)
    unreadable = None
    try:  # first: where the queues are is a usage error whatever the site holds
        q = connect_queues(queue_redis, r)
    except click.ClickException as exc:
        if not (queue_redis and is_sentinel_url(queue_redis)):
            raise
        # the site's data is still there to report; the backlogs come back with a primary
        unreadable = (
            f"{exc.message}: the queue Redis has no primary now (a Sentinel failover under "
            "way?); shipments wait for the new one"
        )
    meta = {k.decode(): v.decode() for k, v in r.hgetall(keys.meta).items()}
    if not meta:
        raise unwritten(site, redis_url)
    info: dict = {"site": site, "meta": meta, "queues": {}, "streams": {}}
    if unreadable is not None:
        info["queues_unreadable"] = unreadable
    else:
        for prio in PRIORITIES:
            queue = Queue(keys.rq_queue(prio), connection=q)
            info["queues"][queue.name] = {
                "waiting": queue.count,
                # no cleanup: that would be a write, and operators only read
                "failed": queue.failed_job_registry.get_job_count(cleanup=False),
            }
    info["streams"]["events"] = r.xlen(keys.events)
    info["jobs_known"] = r.hlen(keys.owner)
    from jobtap.contract.lease import describe

    info["lease"] = describe(r, keys)
    if as_json:
        click.echo(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode())
        return
    state = meta.get(field.STATUS, "?")
    colour = {"ok": "green", "failing": "red"}.get(state, "yellow")
    click.echo(
        f"site {site}: collector "
        + click.style(state, fg=colour, bold=True)
        + f" (backend {meta.get(field.BACKEND, '?')}, every {meta.get(field.INTERVAL, '?')}s)"
    )
    click.echo(
        f"  last cycle   {meta.get(field.LAST_CYCLE, '-')} at {meta.get(field.LAST_CYCLE_AT, '-')}"
        f" took {meta.get(field.LAST_DURATION_S, '-')}s"
    )
    if meta.get(field.SCHEDULER):  # what the backend says of it (Slurm: release, read paths)
        click.echo(f"  scheduler    {meta[field.SCHEDULER]}")
    if meta.get(field.SCHEDULER_PATHS):
        click.echo(f"  reads        {meta[field.SCHEDULER_PATHS]}")
    for line in lease_lines(info["lease"], meta):
        click.echo(line)
    for line in tier_lines(meta):
        click.echo(line)
    click.echo(f"  epoch        {_epoch_line(meta)}")
    click.echo(
        f"  jobs         {meta.get(field.count('jobs'), '-')} live, {info['jobs_known']} known"
        f"; nodes {meta.get(field.count('nodes'), '-')}"
        f"; queues {meta.get(field.count('queues'), '-')}"
    )
    click.echo(
        f"  cycles       {meta.get(field.CYCLES_OK, 0)} ok,"
        f" {meta.get(field.CYCLES_FAILED, 0)} failed"
        f", {meta.get(field.CONSECUTIVE_FAILURES, 0)} failing now"
    )
    click.echo(
        f"  last stat    {meta.get(field.count('changed'), 0)} changed, "
        f"{meta.get(field.count('vanished'), 0)} vanished;"
        f" {meta.get(field.CHUNKS_SHIPPED, 0)} chunks "
        f"shipped in all; epoch {meta.get(field.EPOCH, '-')}"
    )
    failures = _prefixed(meta, field.failures_of(""))
    if failures:
        click.echo("  failures     " + ", ".join(f"{n} {c}" for c, n in failures.items()))
    if meta.get(field.LAST_ERROR):
        click.echo(
            f"  last error   {meta[field.LAST_ERROR]} (at {meta.get(field.LAST_ERROR_AT, '?')})"
        )
    if meta.get(field.LAST_WARNING):
        click.echo(f"  warning      {meta[field.LAST_WARNING]}")
    if meta.get(field.LAST_BAD):
        click.echo(
            f"  bad records  {meta.get(field.BAD_RECORDS, '?')}"
            f" (last: {meta[field.LAST_BAD][:200]})"
        )
    if field.POKES_RECEIVED in meta or field.FEED_RESTARTS in meta:
        click.echo(
            f"  follow       {meta.get(field.POKES_RECEIVED, 0)} pokes, "
            f"{meta.get(field.POKES_COALESCED, 0)} coalesced,"
            f" {meta.get(field.POKES_DROPPED, 0)} dropped"
            f"; {meta.get(field.POKED_JOBS_REFRESHED, 0)} jobs refreshed"
            f"; feed restarts {meta.get(field.FEED_RESTARTS, 0)}"
        )
    feed_line(meta)
    events = _prefixed(meta, field.events_of(""))
    if field.APPLIED_CHUNKS in meta:
        click.echo(
            f"  workers      {meta[field.APPLIED_CHUNKS]} chunks, "
            f"{meta.get(field.APPLIED_OBJECTS, 0)} objects applied; "
            f"{meta.get(field.VERSION_CONFLICTS, 0)} version conflicts"
        )
        click.echo("  events       " + (", ".join(f"{n} {t}" for t, n in events.items()) or "none"))
        click.echo(
            f"  lag          {meta.get(field.LAST_PUBLISH_LAG_S, '-')}s from observation to publish"
            f" (last chunk, at {meta.get(field.LAST_APPLIED_AT, '-')})"
        )
    for name, qi in info["queues"].items():
        click.echo(f"  queue        {name}: {qi['waiting']} waiting, {qi['failed']} failed")
    if "queues_unreadable" in info:
        click.echo("  queues       " + click.style(info["queues_unreadable"], fg="yellow"))
    click.echo(f"  site stream  {info['streams']['events']} events")


def lease_lines(lease: dict, meta: dict[str, str]) -> list[str]:
    """Who holds the site's lease (generation, when it runs out), and the
    standbys waiting for it (docs/operations.md, "Standby collectors")."""
    if lease.get("holder"):
        line = (
            f"  lease        held by {lease['holder']}, generation {lease['generation']},"
            f" expires in {lease['expires_in_s']:.1f}s unless renewed"
            f" (lease {lease['duration_s']:g}s, since {lease.get('acquired_at', '?')})"
        )
        if lease.get("previous"):
            line += f"; took over from {lease['previous']}"
    else:
        line = (
            "  lease        "
            + click.style("free", fg="red", bold=True)
            + f" (last generation {lease.get('generation', 0)}): no active collector"
        )
        if lease.get("standbys"):
            line += ", a standby takes over at its next poll"
    lines = [line]
    label = "  standby     "
    for sb in lease.get("standbys", []):
        lines.append(
            f"{label} {sb['holder']} waiting since {sb.get('since', '?')}"
            f" (asked {sb['seen_s_ago']:g}s ago)"
        )
        label = "             "
    if not lease.get("standbys"):
        lines.append("  standby      none")
    if meta.get(field.FENCED_CHUNKS):
        lines.append(f"  fenced       {fenced_line(int(meta[field.FENCED_CHUNKS]))}")
    return lines


def fenced_line(n: int) -> str:
    """Chunks of earlier lease holders the workers skipped: expected after a
    restart or a takeover (the new holder's first cycle ships its own), worth a
    look only when it keeps climbing (docs/operations.md)."""
    return (
        f"{plural(n, 'chunk')} of earlier collectors skipped (normal after a restart or "
        "takeover: the new collector ships its own; a steady climb means two collectors "
        "take turns)"
    )


def plural(n: int | str, noun: str) -> str:
    """``1 cycle``, ``2 cycles``."""
    return f"{n} {noun}{'' if str(n) == '1' else 's'}"


def tier_lines(meta: dict[str, str]) -> list[str]:
    """Which tier each cycle runs and what it costs: the probe and the full
    reconciliation, each with its last run (time, commands, bytes printed,
    jobs stat'ed) and how many cycles of it went through."""
    from jobtap.collector.plan import PROBE, PUSHED, RECONCILE

    every = {
        PROBE: f"every {meta.get(field.INTERVAL, '?')}s",
        PUSHED: f"every {meta.get(field.INTERVAL, '?')}s, no job listing (pokes)",
        RECONCILE: f"every {meta.get(field.RECONCILE_EVERY, '?')}s",
    }
    if meta.get(field.PUSHED) == "1":
        tiers: tuple[str, ...] = (PUSHED, RECONCILE)
    elif meta.get(field.PROBING) == "1":
        tiers = (PROBE, RECONCILE)
    else:
        tiers = (RECONCILE,)
    if meta.get(field.PROBING) == "0" and meta.get(field.PUSHED) != "1":
        every[RECONCILE] = "every cycle (no probe)"
    lines = []
    label = "  tiers       "
    for tier in tiers:

        def last_(what: str, tier: str = tier) -> str:
            return meta[field.tier_last(tier, what)]

        last = "never ran"
        if field.tier_last(tier, "at") in meta:
            last = (
                f"last {last_('s')}s, {last_('commands')} commands,"
                f" {_size(last_('bytes'))}, {last_('jobs')} jobs stat'ed"
                f" at {last_('at')}"
            )
        marker = "*" if meta.get(field.LAST_TIER) == tier else " "
        lines.append(
            f"{label}{marker}{tier:<9} {every[tier]}: {last}"
            f" ({plural(meta.get(field.cycles_of(tier), 0), 'cycle')})"
        )
        label = "              "
    return lines


def _size(value: str) -> str:
    n = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _epoch_line(meta: dict[str, str]) -> str:
    """The epoch event ids carry, since when, and why it began."""
    epoch = meta.get(field.EPOCH)
    if not epoch:
        return "- (nothing written yet)"
    since = meta.get(field.EPOCH_BEGAN_AT, "?")
    cause = CAUSES.get(meta.get(field.EPOCH_CAUSE, ""), "")
    line = f"{epoch} since {since}"
    if cause:
        line += f": {cause}"
    if meta.get(field.EPOCH_PREVIOUS):
        line += f" (previous {meta[field.EPOCH_PREVIOUS]})"
    return line


def _prefixed(meta: dict[str, str], prefix: str) -> dict[str, str]:
    """``{rest: value}`` of the meta fields named ``prefix + rest``, sorted."""
    return {k[len(prefix) :]: v for k, v in sorted(meta.items()) if k.startswith(prefix)}


def feed_line(meta: dict[str, str]) -> None:
    """The event feed's health (Flux's journal reader), red when it keeps failing."""
    feed = meta.get(field.FEED_STATUS)
    if not meta.get(field.FEED) or feed is None:
        return
    colour = {"up": "green", "failing": "red", "stopped": None}.get(feed, "yellow")
    line = (
        f"  feed         {meta[field.FEED]} "
        + click.style(feed, fg=colour, bold=feed == "failing")
        + f", {meta.get(field.FEED_RESTARTS, 0)} restarts"
    )
    if feed == "up" and meta.get(field.FEED_UP_SINCE):
        line += f", up since {meta[field.FEED_UP_SINCE]}"
    if feed != "up" and meta.get(field.FEED_LAST_ERROR):
        line += f"; last error: {meta[field.FEED_LAST_ERROR][:200]}"
    click.echo(line)
