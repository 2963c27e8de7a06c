"""The ``jobtap`` command.

Services: ``collector`` and ``worker``; for people: ``watch``, ``show``, ``wait``,
``export`` (built on the SDK, see collector/cli_sdk.py), ``status`` and ``demo``.
Every command takes ``--redis URL`` (default ``$JOBTAP_REDIS``, then
redis://127.0.0.1:6379/0) and ``--site`` (default ``$JOBTAP_SITE``, then
``default``).  Expected failures are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import functools
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import redis

from sdk.keys import BadName, SiteKeys, check_site

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
        callback=_check_site,
        help="Site name (env JOBTAP_SITE).",
    )(f)


def _check_site(ctx, param, value):
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
        raise click.ClickException(f"cannot reach {what} at {_safe(url)}: {exc}") from exc
    return r


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="jobtap")
def main() -> None:
    """jobtap: one collector per HPC site in front of the workload manager;
    a Redis cache, change streams and push notifications for every job."""


# -- collector ----------------------------------------------------------------------------
@main.command()
@redis_option
@site_option
@click.option(
    "--backend",
    envvar="JOBTAP_BACKEND",
    type=click.Choice(["sim", "pbs", "slurm", "flux"]),
    default="sim",
    show_default=True,
    help="Workload manager to stat.",
)
@click.option(
    "--interval", type=float, default=5.0, show_default=True, help="Seconds between stats."
)
@click.option("--once", is_flag=True, help="Run one cycle and exit (status 1 if it failed).")
@click.option("--cycles", type=int, default=None, help="Stop after this many cycles.")
@click.option(
    "--nodes-every",
    type=int,
    default=6,
    show_default=True,
    help="Stat nodes and queues every N cycles.",
)
@click.option("--chunk-size", type=int, default=1000, show_default=True)
@click.option(
    "--shrink-ratio",
    type=float,
    default=0.5,
    show_default=True,
    help="A live list that loses more than this fraction of its jobs at once is "
    "believed only where history confirms.",
)
@click.option("--queue-redis", default=None, help="Redis URL for the rq queues (default: --redis).")
@click.option("--prefix", default="", help="Run scheduler commands through this, e.g. 'ssh head1'.")
@click.option("--stat-timeout", type=float, default=60.0, show_default=True)
@click.option("--qstat", default="qstat", show_default=True, help="PBS: qstat command.")
@click.option("--pbsnodes", default="pbsnodes", show_default=True, help="PBS: pbsnodes command.")
@click.option("--tz", default=None, help="PBS: time zone of the server's clock (default: local).")
@click.option("--squeue", default="squeue", show_default=True, help="Slurm: squeue command.")
@click.option("--sinfo", default="sinfo", show_default=True, help="Slurm: sinfo command.")
@click.option("--sacct", default="sacct", show_default=True, help="Slurm: sacct command.")
@click.option("--scontrol", default="scontrol", show_default=True, help="Slurm: scontrol command.")
@click.option("--flux", "flux_cmd", default="flux", show_default=True, help="Flux: flux command.")
@click.option("--sim-seed", type=int, default=1, show_default=True)
@click.option("--sim-jobs", type=int, default=3000, show_default=True)
@click.option("--sim-nodes", type=int, default=300, show_default=True)
@click.option(
    "--sim-tick", type=float, default=30.0, show_default=True, help="Simulated seconds per cycle."
)
@click.option(
    "--follow",
    is_flag=True,
    help="Also refresh poked jobs at once between cycles (see `jobtap poke`).",
)
@click.option(
    "--max-refresh",
    type=int,
    default=1000,
    show_default=True,
    help="At most this many poked jobs per targeted refresh.",
)
@log_options
def collector(
    redis_url,
    site,
    backend,
    interval,
    once,
    cycles,
    nodes_every,
    chunk_size,
    shrink_ratio,
    queue_redis,
    prefix,
    stat_timeout,
    qstat,
    pbsnodes,
    tz,
    squeue,
    sinfo,
    sacct,
    scontrol,
    flux_cmd,
    sim_seed,
    sim_jobs,
    sim_nodes,
    sim_tick,
    follow,
    max_refresh,
    log_format,
    log_level,
):
    """Stat the scheduler every INTERVAL seconds and ship what changed."""
    from . import logs
    from .backends import make_backend
    from .cycle import Collector
    from .service import AlreadyRunning, CollectorService

    logs.setup(log_format, log_level)
    command = dict(prefix=shlex.split(prefix), timeout=stat_timeout)
    options = {
        "pbs": lambda: dict(command, qstat=qstat, pbsnodes=pbsnodes, tz=tz),
        "slurm": lambda: dict(command, squeue=squeue, sinfo=sinfo, sacct=sacct, scontrol=scontrol),
        "flux": lambda: dict(command, flux=flux_cmd),
        "sim": lambda: dict(seed=sim_seed, jobs=sim_jobs, nodes=sim_nodes, tick=sim_tick),
    }[backend]()
    be = make_backend(backend, **options)
    data = connect(redis_url)
    queues = connect(queue_redis, "the queue Redis") if queue_redis else data
    col = Collector(
        be,
        data,
        queues,
        site=site,
        nodes_every=nodes_every,
        chunk_size=chunk_size,
        shrink_ratio=shrink_ratio,
    )
    service = CollectorService(
        col, interval=interval, backend_name=backend, follow=follow, max_refresh=max_refresh
    )
    service.install_signal_handlers()
    try:
        status = service.run(max_cycles=1 if once else cycles)
    except AlreadyRunning as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(status)


# -- poke ----------------------------------------------------------------------------------
@main.command(
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def poke(args):
    """Tell a collector in follow mode that these jobs just changed (for
    scheduler hooks; `jobtap poke --help` for its options)."""
    from .poke import main as fast_poke

    sys.exit(fast_poke(list(args)))


# -- worker ---------------------------------------------------------------------------------
@main.command()
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
    from workers.apply import Settings
    from workers.service import run_worker

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


# -- status ----------------------------------------------------------------------------------
@main.command()
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
        raise click.ClickException(f"no collector has written site {site!r} at {_safe(redis_url)}")
    info = {"site": site, "meta": meta, "queues": {}, "streams": {}}
    for prio in ("state", "update"):
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


# -- demo --------------------------------------------------------------------------------------
@main.command()
@click.option(
    "--redis",
    "redis_url",
    default=None,
    help="Use this Redis instead of starting a local redis-server.",
)
@click.option("--site", default="demo", show_default=True, callback=_check_site)
@click.option("--jobs", type=int, default=3000, show_default=True)
@click.option("--nodes", type=int, default=300, show_default=True)
@click.option("--interval", type=float, default=2.0, show_default=True)
@click.option("--workers", "n_workers", type=int, default=2, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print events as JSON lines.")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
def demo(redis_url, site, jobs, nodes, interval, n_workers, as_json, duration):
    """Everything on one machine: a local redis-server, the sim backend, the
    collector, workers and a live `jobtap watch --all`.  Ctrl-C stops it all."""
    from .localredis import RedisServer

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    # Ctrl-C or a plain kill stop everything, even when started in the background.
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    workdir = Path(tempfile.mkdtemp(prefix="jobtap-demo-"))
    server = None
    procs: list[subprocess.Popen] = []
    if redis_url is None:
        try:
            # A roomier pub/sub buffer than the default: the first cycle of the demo
            # publishes every job at once, faster than a terminal prints them.
            server = RedisServer(
                workdir / "redis", args=["--client-output-buffer-limit", "pubsub 256mb 64mb 60"]
            ).start()
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from exc
        redis_url = server.url
    else:
        connect(redis_url)
    logfile = open(workdir / "services.log", "ab")
    env = dict(os.environ, JOBTAP_REDIS=redis_url, JOBTAP_SITE=site)
    base = [sys.executable, "-m", "collector"]
    click.echo(
        f"jobtap demo: redis {redis_url}, site {site!r}, {jobs} jobs on {nodes} nodes;"
        f" service logs in {workdir / 'services.log'}. Ctrl-C stops everything.",
        err=True,
    )
    try:
        for _ in range(n_workers):
            procs.append(
                subprocess.Popen(
                    [*base, "worker"],
                    env=env,
                    stdout=logfile,
                    stderr=logfile,
                    start_new_session=True,
                )
            )
        procs.append(
            subprocess.Popen(
                [
                    *base,
                    "collector",
                    "--backend",
                    "sim",
                    "--interval",
                    str(interval),
                    "--sim-jobs",
                    str(jobs),
                    "--sim-nodes",
                    str(nodes),
                ],
                env=env,
                stdout=logfile,
                stderr=logfile,
                start_new_session=True,
            )
        )
        watch_cmd = [*base, "watch", "--all"] + (["--json"] if as_json else [])
        watcher = subprocess.Popen(watch_cmd, env=env, start_new_session=True)
        procs.append(watcher)
        deadline = time.monotonic() + duration if duration else None
        while watcher.poll() is None and (deadline is None or time.monotonic() < deadline):
            for p in procs[:-1]:
                if p.poll() is not None:
                    raise click.ClickException(
                        f"a service stopped (status {p.returncode}); see {workdir / 'services.log'}"
                    )
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        _stop_all(procs)
        logfile.close()
        if server is not None:
            server.stop()
        click.echo("jobtap demo: stopped.", err=True)


def _stop_all(procs: list[subprocess.Popen], timeout: float = 10.0) -> None:
    for p in reversed(procs):
        if p.poll() is None:
            functools.partial(os.killpg, p.pid, signal.SIGTERM)() if _has_group(
                p
            ) else p.terminate()
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _has_group(p: subprocess.Popen) -> bool:
    try:
        return os.getpgid(p.pid) == p.pid
    except ProcessLookupError:
        return False


def _register_commands() -> None:
    from . import cli_acl, cli_sdk

    cli_sdk.register(main)
    cli_acl.register(main)


_register_commands()
