"""``jobtap status``: a site's health as the collector and the queues report it."""

from __future__ import annotations

import click

from jobtap.connection import is_sentinel_url
from jobtap.contract.chunk import PRIORITIES
from jobtap.contract.epoch import CAUSES
from jobtap.keys import SiteKeys

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
    if meta.get("scheduler"):  # what the backend says of it (Slurm: release, read paths)
        click.echo(f"  scheduler    {meta['scheduler']}")
    if meta.get("scheduler_paths"):
        click.echo(f"  reads        {meta['scheduler_paths']}")
    for line in lease_lines(info["lease"], meta):
        click.echo(line)
    for line in tier_lines(meta):
        click.echo(line)
    click.echo(f"  epoch        {_epoch_line(meta)}")
    click.echo(
        f"  jobs         {meta.get('count_jobs', '-')} live, {info['jobs_known']} known"
        f"; nodes {meta.get('count_nodes', '-')}; queues {meta.get('count_queues', '-')}"
    )
    click.echo(
        f"  cycles       {meta.get('cycles_ok', 0)} ok, {meta.get('cycles_failed', 0)} failed"
        f", {meta.get('consecutive_failures', 0)} failing now"
    )
    click.echo(
        f"  last stat    {meta.get('count_changed', 0)} changed, "
        f"{meta.get('count_vanished', 0)} vanished; {meta.get('chunks_shipped', 0)} chunks "
        f"shipped in all; epoch {meta.get('epoch', '-')}"
    )
    failures = _prefixed(meta, "failures_")
    if failures:
        click.echo("  failures     " + ", ".join(f"{n} {c}" for c, n in failures.items()))
    if meta.get("last_error"):
        click.echo(f"  last error   {meta['last_error']} (at {meta.get('last_error_at', '?')})")
    if meta.get("last_warning"):
        click.echo(f"  warning      {meta['last_warning']}")
    if meta.get("last_bad"):
        click.echo(
            f"  bad records  {meta.get('bad_records', '?')} (last: {meta['last_bad'][:200]})"
        )
    if "pokes_received" in meta or "feed_restarts" in meta:
        click.echo(
            f"  follow       {meta.get('pokes_received', 0)} pokes, "
            f"{meta.get('pokes_coalesced', 0)} coalesced, {meta.get('pokes_dropped', 0)} dropped"
            f"; {meta.get('poked_jobs_refreshed', 0)} jobs refreshed"
            f"; feed restarts {meta.get('feed_restarts', 0)}"
        )
    feed_line(meta)
    events = _prefixed(meta, "events_")
    if "applied_chunks" in meta:
        click.echo(
            f"  workers      {meta['applied_chunks']} chunks, "
            f"{meta.get('applied_objects', 0)} objects applied; "
            f"{meta.get('version_conflicts', 0)} version conflicts"
        )
        click.echo("  events       " + (", ".join(f"{n} {t}" for t, n in events.items()) or "none"))
        click.echo(
            f"  lag          {meta.get('last_publish_lag_s', '-')}s from observation to publish"
            f" (last chunk, at {meta.get('last_applied_at', '-')})"
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
    if meta.get("fenced_chunks"):
        lines.append(f"  fenced       {fenced_line(int(meta['fenced_chunks']))}")
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
        PROBE: f"every {meta.get('interval', '?')}s",
        PUSHED: f"every {meta.get('interval', '?')}s, no job listing (pokes)",
        RECONCILE: f"every {meta.get('reconcile_every', '?')}s",
    }
    if meta.get("pushed") == "1":
        tiers: tuple[str, ...] = (PUSHED, RECONCILE)
    elif meta.get("probing") == "1":
        tiers = (PROBE, RECONCILE)
    else:
        tiers = (RECONCILE,)
    if meta.get("probing") == "0" and meta.get("pushed") != "1":
        every[RECONCILE] = "every cycle (no probe)"
    lines = []
    label = "  tiers       "
    for tier in tiers:
        p = f"{tier}_last"
        last = "never ran"
        if f"{p}_at" in meta:
            last = (
                f"last {meta[f'{p}_s']}s, {meta[f'{p}_commands']} commands,"
                f" {_size(meta[f'{p}_bytes'])}, {meta[f'{p}_jobs']} jobs stat'ed"
                f" at {meta[f'{p}_at']}"
            )
        marker = "*" if meta.get("last_tier") == tier else " "
        lines.append(
            f"{label}{marker}{tier:<9} {every[tier]}: {last}"
            f" ({plural(meta.get(f'cycles_{tier}', 0), 'cycle')})"
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
    epoch = meta.get("epoch")
    if not epoch:
        return "- (nothing written yet)"
    since = meta.get("epoch_began_at", "?")
    cause = CAUSES.get(meta.get("epoch_cause", ""), "")
    line = f"{epoch} since {since}"
    if cause:
        line += f": {cause}"
    if meta.get("epoch_previous"):
        line += f" (previous {meta['epoch_previous']})"
    return line


def _prefixed(meta: dict[str, str], prefix: str) -> dict[str, str]:
    """``{rest: value}`` of the meta fields named ``prefix + rest``, sorted."""
    return {k[len(prefix) :]: v for k, v in sorted(meta.items()) if k.startswith(prefix)}


def feed_line(meta: dict[str, str]) -> None:
    """The event feed's health (Flux's journal reader), red when it keeps failing."""
    feed = meta.get("feed_status")
    if not meta.get("feed") or feed is None:
        return
    colour = {"up": "green", "failing": "red", "stopped": None}.get(feed, "yellow")
    line = (
        f"  feed         {meta['feed']} "
        + click.style(feed, fg=colour, bold=feed == "failing")
        + f", {meta.get('feed_restarts', 0)} restarts"
    )
    if feed == "up" and meta.get("feed_up_since"):
        line += f", up since {meta['feed_up_since']}"
    if feed != "up" and meta.get("feed_last_error"):
        line += f"; last error: {meta['feed_last_error'][:200]}"
    click.echo(line)
