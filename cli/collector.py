"""``jobtap collector``: one per site; stats the scheduler and ships what changed."""

from __future__ import annotations

import shlex
import sys

import click

from .options import (
    connect,
    connect_queues,
    log_options,
    metrics_options,
    queue_redis_option,
    queue_wait_option,
    redis_option,
    serve_metrics,
    site_option,
)

# The shortest --interval: a real scheduler pays for every stat (qstat, squeue), and a
# collector stat'ing in a tight loop is the load jobtap exists to take off it.  The
# simulated cluster costs nothing but CPU; tests run it fast.
MIN_INTERVAL = 1.0
MIN_SIM_INTERVAL = 0.05


def check_interval(interval: float, backend: str) -> float:
    """``interval``, or a usage error naming the floor for ``backend``."""
    floor = MIN_SIM_INTERVAL if backend == "sim" else MIN_INTERVAL
    if not interval >= floor:  # also NaN
        raise click.BadParameter(
            f"{interval:g} s is below the floor of {floor:g} s for the {backend} backend"
            + (": every stat costs the scheduler's server" if backend != "sim" else ""),
            param_hint="'--interval'",
        )
    return interval


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
    "--interval",
    type=float,
    default=5.0,
    show_default=True,
    help=f"Seconds between stats (at least {MIN_INTERVAL:g} on a real scheduler, whose every "
    f"stat costs its server; {MIN_SIM_INTERVAL:g} on the sim).",
)
@click.option(
    "--once",
    is_flag=True,
    help="Run one cycle and exit: status 1 if it failed; with --follow on a scheduler "
    "with an event feed (Flux), 3 if the feed did not start.",
)
@click.option("--cycles", type=int, default=None, help="Stop after this many cycles.")
@click.option(
    "--nodes-every",
    type=int,
    default=6,
    show_default=True,
    help="Stat nodes and queues every N cycles.",
)
@click.option(
    "--chunk-size",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Changed objects per chunk shipped to the workers.",
)
@click.option(
    "--shrink-ratio",
    type=float,
    default=0.5,
    show_default=True,
    help="A live list that loses more than this fraction of its jobs at once is "
    "believed only where history confirms.",
)
@click.option(
    "--reconcile-every",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds between full stats of every job; in between, each cycle probes what "
    "changed and stats just those jobs (0: a full stat every cycle).",
)
@click.option(
    "--probe/--no-probe",
    default=None,
    help="Between full stats: probe what changed every cycle, or stat no jobs and rely on "
    "follow mode's pokes.  Default: no probe with --follow on Slurm (its hook pokes each "
    "start and end) and Flux (its journal carries every change), else probe.",
)
@click.option(
    "--max-targeted",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="A probe naming more jobs than this makes the cycle a full stat.",
)
@queue_redis_option
@queue_wait_option
@click.option("--prefix", default="", help="Run scheduler commands through this, e.g. 'ssh head1'.")
@click.option(
    "--stat-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds a scheduler command may run before the cycle fails.",
)
@click.option("--qstat", default="qstat", show_default=True, help="PBS: qstat command.")
@click.option("--pbsnodes", default="pbsnodes", show_default=True, help="PBS: pbsnodes command.")
@click.option(
    "--qselect",
    default="qselect",
    show_default=True,
    help="PBS: qselect command (the probe: jobs whose mtime moved).",
)
@click.option(
    "--probe-overlap",
    type=click.FloatRange(min=1),
    default=5.0,
    show_default=True,
    help="PBS and Flux: seconds each probe's window reaches back into the last one's "
    "(whole-second times, the clocks of two hosts).",
)
@click.option("--tz", default=None, help="PBS: time zone of the server's clock (default: local).")
@click.option("--squeue", default="squeue", show_default=True, help="Slurm: squeue command.")
@click.option("--sinfo", default="sinfo", show_default=True, help="Slurm: sinfo command.")
@click.option("--sacct", default="sacct", show_default=True, help="Slurm: sacct command.")
@click.option("--scontrol", default="scontrol", show_default=True, help="Slurm: scontrol command.")
@click.option(
    "--slurmrestd",
    default="slurmrestd",
    show_default=True,
    help="Slurm: slurmrestd command, run in inetd mode for the records of a few jobs"
    " ('' = never: a targeted stat is then one squeue --json).",
)
@click.option(
    "--slurm-probe",
    type=click.Choice(["states", "lines"]),
    default="states",
    show_default=True,
    help="Slurm: the probe between full stats.  states: squeue --only-job-state where Slurm"
    " has it (23.11+; a job is read when its state moves, other changes wait for the full"
    " stat), else lines; lines: one squeue line per job (state, reason, priority, times,"
    " limit...), which costs slurmctld a full listing.",
)
@click.option("--flux", "flux_cmd", default="flux", show_default=True, help="Flux: flux command.")
@click.option(
    "--sim-seed", type=int, default=1, show_default=True, help="Sim: random seed of the cluster."
)
@click.option(
    "--sim-jobs", type=int, default=3000, show_default=True, help="Sim: jobs in the cluster."
)
@click.option(
    "--sim-nodes", type=int, default=300, show_default=True, help="Sim: nodes in the cluster."
)
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
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the collector keeps the site's epoch and last cycle, outside Redis"
    " (default: $STATE_DIRECTORY/SITE under systemd, /var/lib/jobtap/SITE as root,"
    " else $XDG_STATE_HOME/jobtap/SITE).",
)
@click.option(
    "--lease",
    type=click.FloatRange(min=0.5),
    default=None,
    help="Seconds the site's lease lasts without renewal: a standby collector takes over"
    " that long after the active one stops (default: 3 x --interval, at most 15).",
)
@metrics_options
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
    reconcile_every,
    probe,
    max_targeted,
    queue_redis,
    prefix,
    stat_timeout,
    qstat,
    pbsnodes,
    qselect,
    probe_overlap,
    tz,
    squeue,
    sinfo,
    sacct,
    scontrol,
    slurmrestd,
    slurm_probe,
    flux_cmd,
    sim_seed,
    sim_jobs,
    sim_nodes,
    sim_tick,
    follow,
    max_refresh,
    state_dir,
    lease,
    metrics_port,
    metrics_addr,
    log_format,
    log_level,
):
    """Stat the scheduler every INTERVAL seconds and ship what changed.

    One collector per site is active; another one started for the site waits as
    a standby and takes over within the lease once the active one stops (with
    --once or --cycles it exits at once instead)."""
    from pathlib import Path

    from jobtap.collector.backends import make_backend
    from jobtap.collector.cycle import Collector
    from jobtap.collector.hoststate import FILENAME, HostState, default_state_dir
    from jobtap.collector.service import AlreadyRunning, CollectorService

    from . import logs

    check_interval(interval, backend)
    logs.setup(log_format, log_level)
    command = dict(prefix=shlex.split(prefix), timeout=stat_timeout)
    options = {
        "pbs": lambda: dict(
            command, qstat=qstat, pbsnodes=pbsnodes, qselect=qselect, overlap=probe_overlap, tz=tz
        ),
        "slurm": lambda: dict(
            command,
            squeue=squeue,
            sinfo=sinfo,
            sacct=sacct,
            scontrol=scontrol,
            slurmrestd=slurmrestd,
            state_probe=slurm_probe == "states",
        ),
        "flux": lambda: dict(command, flux=flux_cmd, overlap=probe_overlap),
        "sim": lambda: dict(seed=sim_seed, jobs=sim_jobs, nodes=sim_nodes, tick=sim_tick),
    }[backend]()
    be = make_backend(backend, **options)
    if probe is None:
        probe = not (follow and getattr(be, "follow_pushed", False))
    data = connect(redis_url)
    queues = connect_queues(queue_redis, data)
    col = Collector(
        be,
        data,
        queues,
        site=site,
        nodes_every=nodes_every,
        chunk_size=chunk_size,
        shrink_ratio=shrink_ratio,
        reconcile_every=reconcile_every,
        max_targeted=max_targeted,
        pushed=not probe,
    )
    state = HostState.load(Path(state_dir or default_state_dir(site)) / FILENAME)
    metrics = None
    if metrics_port is not None:
        from jobtap.collector.metrics import CollectorMetrics

        metrics = CollectorMetrics(site)
        serve_metrics(metrics.registry, metrics_port, metrics_addr)
    service = CollectorService(
        col,
        interval=interval,
        backend_name=backend,
        follow=follow,
        max_refresh=max_refresh,
        state=state,
        metrics=metrics,
        lease=lease,
    )
    service.install_signal_handlers()
    try:
        status = service.run(max_cycles=1 if once else cycles)
    except AlreadyRunning as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(status)
