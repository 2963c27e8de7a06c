"""``jobtap demo``: the whole pipeline on one machine, on the simulated cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from .options import check_site_option, connect


# -- demo --------------------------------------------------------------------------------------
@click.command()
@click.option(
    "--redis",
    "redis_url",
    default=None,
    help="Use this Redis instead of starting a local redis-server.",
)
@click.option("--site", default="demo", show_default=True, callback=check_site_option)
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
    base = [sys.executable, "-m", "jobtap.cli"]
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
            if _has_group(p):
                os.killpg(p.pid, signal.SIGTERM)
            else:
                p.terminate()
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
