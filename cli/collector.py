"""``jobtap collector``: one per site; stats the scheduler and ships what changed."""

from __future__ import annotations

import shlex
import sys

import click

from .options import connect, log_options, redis_option, site_option


# -- collector ----------------------------------------------------------------------------
@click.command()
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
    from jobtap.collector.backends import make_backend
    from jobtap.collector.cycle import Collector
    from jobtap.collector.service import AlreadyRunning, CollectorService

    from . import logs

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
