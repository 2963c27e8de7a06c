"""``jobtap demo``: the whole pipeline on one machine, on the simulated cluster.

It opens with a short banner of what runs where and what to try, then shows
``jobtap top`` (the banner stays under the board); in a pipe, where there is no
screen to hold a board, it prints ``jobtap watch --all`` lines instead."""

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
@click.option(
    "--site", default="demo", show_default=True, callback=check_site_option, help="Site name."
)
@click.option(
    "--jobs", type=int, default=3000, show_default=True, help="Jobs in the simulated cluster."
)
@click.option(
    "--nodes", type=int, default=300, show_default=True, help="Nodes in the simulated cluster."
)
@click.option(
    "--interval",
    type=float,
    default=2.0,
    show_default=True,
    help="Seconds between the collector's stats of the simulated cluster.",
)
@click.option(
    "--workers",
    "n_workers",
    type=int,
    default=2,
    show_default=True,
    help="Workers applying the collector's chunks.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every event as a JSON line.")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
def demo(redis_url, site, jobs, nodes, interval, n_workers, as_json, duration):
    """Everything on one machine: a local redis-server, the sim backend, the
    collector, workers and `jobtap top` (q quits).  Ctrl-C stops it all."""
    from jobtap.sim.localredis import RedisServer

    from .collector import check_interval

    check_interval(interval, "sim")

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
    if server is not None:  # our own Redis has no users: no one's credential file applies
        env["JOBTAP_CREDENTIALS"] = str(workdir / "no-credentials")
        os.environ["JOBTAP_CREDENTIALS"] = env["JOBTAP_CREDENTIALS"]
    base = [sys.executable, "-m", "jobtap.cli"]
    board = sys.stdin.isatty() and sys.stdout.isatty() and not as_json
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
                    "--state-dir",
                    str(workdir / "collector"),
                ],
                env=env,
                stdout=logfile,
                stderr=logfile,
                start_new_session=True,
            )
        )
        click.echo(f"jobtap demo: starting on {redis_url}, site {site!r}...", err=True)
        lines = banner(redis_url, site, jobs, nodes, interval, n_workers, workdir, board,
                       example_job(redis_url, site))  # fmt: skip
        click.echo("\n".join(lines), err=True)
        if board:  # in this process group: Ctrl-C reaches it, and it restores the terminal
            notes = [arg for line in lines for arg in ("--note", line)]
            watcher = subprocess.Popen([*base, "top", *notes], env=env)
        else:
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
        if board and procs:
            try:
                procs[-1].wait(3)  # the board got the Ctrl-C too: let it restore the terminal
            except subprocess.TimeoutExpired:
                pass
    finally:
        _stop_all(procs)
        logfile.close()
        if server is not None:
            server.stop()
        click.echo("jobtap demo: stopped.", err=True)


def example_job(redis_url: str, site: str, timeout: float = 20.0) -> tuple[str, str] | None:
    """A running job of the first cycle ``(id, user)``, to show in the banner."""
    import jobtap

    deadline = time.monotonic() + timeout
    with jobtap.Client(redis_url, site=site) as client:
        while time.monotonic() < deadline:
            running = client.jobs(state="running")
            if running:
                return running[0].id, running[0].user or "-"
            time.sleep(0.2)
    return None


def banner(
    url: str, site: str, jobs: int, nodes: int, interval: float, workers: int,
    workdir: Path, board: bool, example: tuple[str, str] | None,
) -> list[str]:  # fmt: skip
    """What runs where, and what to try in another terminal."""
    from jobtap.keys import SiteKeys

    port = url.rsplit(":", 1)[-1].split("/")[0]
    jid, user = example or ("JOBID", "USER")
    key = SiteKeys(site).job(user, jid)
    return [
        f"jobtap demo: Redis {url}, site {site!r}: a simulated PBS cluster of {jobs} jobs on"
        f" {nodes} nodes, a collector cycle every {interval:g} s, {workers} workers;"
        f" logs in {workdir / 'services.log'}",
        f"try in another terminal:  export JOBTAP_REDIS={url} JOBTAP_SITE={site}",
        "  jobtap top                     this board (q quits)",
        f"  jobtap watch {jid:<17} one job's changes, as they happen",
        f"  jobtap wait {jid:<18} until it ends; exits with its exit status",
        f"  redis-cli -p {port} hgetall '{key}'",
        ("q" if board else "Ctrl-C") + " stops everything.",
    ]


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
