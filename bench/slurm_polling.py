"""What 50 tools cost slurmctld: polling ``squeue`` every 2 s, versus the same 50
tools subscribed through jobtap (one collector statting Slurm every 5 s).

    sudo .venv/bin/python -m bench.slurm_polling              # 2 x 2 minutes
    sudo .venv/bin/python -m bench.slurm_polling --duration 30 --no-write

Needs root and the single-host Slurm of deploy/slurm/start.sh (started if it is
not running).  Both phases run the same workload: ``--jobs`` held jobs, one
running job per node, and a short job submitted every 10 s.  Each phase starts
with ``sdiag --reset`` and ends with ``sdiag``; the RPC counts by message type go
side by side into docs/performance.md, section "Slurm: polling versus jobtap
(sdiag RPC counts)" (``--no-write`` only prints them).

* polling: ``--tools`` threads, each running ``--poll-command`` (default
  ``squeue``) every ``--poll-interval`` seconds, staggered;
* jobtap: a local redis-server, ``jobtap worker``, the collector
  (``CollectorService``, SlurmBackend, every ``--interval`` seconds: its probe,
  ``squeue --json`` every 60 s, nodes and partitions every cycle), and
  ``--tools`` SDK clients, each subscribed to the jobs of user root.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
HEADING = "## Slurm: polling versus jobtap (sdiag RPC counts)"
SITE = "slurmbench"


def sh(*argv: str, timeout: float = 60, check: bool = True) -> str:
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and proc.returncode != 0:
        raise SystemExit(f"{shlex.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def sdiag_counts() -> Counter[str]:
    """RPC counts by message type since the last ``sdiag --reset``."""
    from sim.rig.slurm import rpc_stats

    return Counter({name: count for name, (count, _) in rpc_stats(sh("sdiag")).items()})


def slurm_held(release: str = "22.05") -> AbstractContextManager[None]:
    """The Slurm's lock of the live tests, held, and the Slurm started
    (22.05's deploy/slurm/start.sh unless told another release of the rig)."""
    from sim.rig.slurm import CLUSTERS

    return CLUSTERS[release].held()


def stop_services(worker: subprocess.Popen, log, r, server) -> None:
    """End a phase's ``jobtap worker``, its log, the client and the redis-server."""
    worker.terminate()
    try:
        worker.wait(20)
    except subprocess.TimeoutExpired:
        worker.kill()
    log.close()
    r.close()
    server.stop()


def sbatch(*args: str) -> str:
    out = sh("sbatch", "--parsable", "-o", "/dev/null", "-e", "/dev/null", "-D", "/tmp", *args)
    return out.strip().split(";")[0]


def cancel_all() -> None:
    ids = sorted(set(sh("squeue", "-h", "-t", "PD,R,S,CG,CF", "-o", "%A").split()))
    if ids:
        sh("scancel", *ids, check=False)
    deadline = time.monotonic() + 30
    while sh("squeue", "-h", "-t", "R,S,CG,CF", "-o", "%A").split():
        if time.monotonic() > deadline:
            break
        time.sleep(0.3)


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    rpcs: Counter[str] = field(default_factory=Counter)
    notes: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.rpcs.values())


def churn(stop: threading.Event, every: float, submitted: list[str]) -> None:
    """A short job every ``every`` seconds: the same workload in both phases."""
    while not stop.wait(every):
        submitted.append(sbatch("-t", "1", "--wrap", "sleep 5", "-J", "churn"))


def run_polling(args: argparse.Namespace, jobs: list[str]) -> Phase:
    phase = Phase(f"{args.tools} tools polling `{args.poll_command}` every {args.poll_interval:g}s")
    stop = threading.Event()
    runs = Counter()
    lock = threading.Lock()

    def tool(i: int) -> None:
        command = shlex.split(args.poll_command.format(job=jobs[i % len(jobs)]))
        if stop.wait(args.poll_interval * i / args.tools):  # stagger the start
            return
        next_run = time.monotonic()
        while not stop.is_set():
            proc = subprocess.run(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60
            )
            with lock:
                runs["ok" if proc.returncode == 0 else "failed"] += 1
            next_run += args.poll_interval
            stop.wait(max(0.0, next_run - time.monotonic()))

    submitted: list[str] = []
    sh("sdiag", "--reset")
    t0 = time.monotonic()
    threads = [threading.Thread(target=tool, args=(i,), daemon=True) for i in range(args.tools)]
    threads.append(threading.Thread(target=churn, args=(stop, 10.0, submitted), daemon=True))
    for t in threads:
        t.start()
    stop.wait(args.duration)
    stop.set()
    for t in threads:
        t.join(60)
    phase.seconds = time.monotonic() - t0
    phase.rpcs = sdiag_counts()
    phase.notes = {
        "squeue runs": runs["ok"],
        "failed runs": runs["failed"],
        "jobs submitted": len(submitted),
    }
    return phase


def run_jobtap(args: argparse.Namespace, workdir: Path) -> Phase:
    import jobtap
    from jobtap.collector.backends.slurm import SlurmBackend
    from jobtap.collector.cycle import Collector
    from jobtap.collector.service import CollectorService
    from jobtap.sim.localredis import RedisServer

    phase = Phase(
        f"{args.tools} tools subscribed through jobtap (collector every {args.interval:g}s)"
    )
    server = RedisServer(workdir / "redis").start()
    log = open(workdir / "worker.log", "ab")
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobtap.cli", "worker", "--redis", server.url, "--site", SITE],
        cwd=ROOT,
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    r = server.client()
    collector = Collector(SlurmBackend(timeout=30), r, site=SITE, nodes_every=1)
    service = CollectorService(collector, interval=args.interval, backend_name="slurm")
    delivered = Counter()
    lock = threading.Lock()

    def on_change(change) -> None:
        with lock:
            delivered[change.type] += 1

    clients: list = []
    stop = threading.Event()
    submitted: list[str] = []
    try:
        sh("sdiag", "--reset")
        t0 = time.monotonic()
        loop = threading.Thread(target=service.run, daemon=True)
        loop.start()
        for _ in range(args.tools):
            client = jobtap.Client(server.url, site=SITE)
            client.subscribe(on_change, user="root")
            clients.append(client)
        feeder = threading.Thread(target=churn, args=(stop, 10.0, submitted), daemon=True)
        feeder.start()
        stop.wait(max(0.0, args.duration - (time.monotonic() - t0)))
        stop.set()
        service.stop_event.set()
        loop.join(120)
        feeder.join(60)
        phase.seconds = time.monotonic() - t0
        phase.rpcs = sdiag_counts()
        meta = {k.decode(): v.decode() for k, v in r.hgetall(collector.keys.meta).items()}
        phase.notes = {
            "collector cycles": int(meta.get("cycles_ok", 0)),
            "failed cycles": int(meta.get("cycles_failed", 0)),
            "changes delivered to the tools": sum(delivered.values()),
            "jobs submitted": len(submitted),
        }
    finally:
        for client in clients:
            client.close()
        stop_services(worker, log, r, server)
    return phase


def table(polling: Phase, jobtap: Phase) -> str:
    types = sorted(
        set(polling.rpcs) | set(jobtap.rpcs),
        key=lambda t: (-(polling.rpcs[t] + jobtap.rpcs[t]), t),
    )
    lines = [
        "| RPC (sdiag message type) | polling | jobtap |",
        "|---|---:|---:|",
    ]
    for t in types:
        lines.append(f"| {t} | {polling.rpcs[t]:,} | {jobtap.rpcs[t]:,} |")
    lines.append(f"| **total** | **{polling.total:,}** | **{jobtap.total:,}** |")
    lines.append(
        f"| RPCs per second | {polling.total / polling.seconds:.1f}"
        f" | {jobtap.total / jobtap.seconds:.2f} |"
    )
    return "\n".join(lines)


def section(args: argparse.Namespace, polling: Phase, jobtap: Phase, argv: list[str]) -> str:
    command = "sudo .venv/bin/python -m bench.slurm_polling" + (
        " " + shlex.join(argv) if argv else ""
    )
    version = sh("sinfo", "--version").strip()
    notes = "\n".join(
        f"- {p.name}: " + ", ".join(f"{k} {v:,}" for k, v in p.notes.items())
        for p in (polling, jobtap)
    )
    ratio = polling.total / max(1, jobtap.total)
    stats = ("REQUEST_JOB_INFO", "REQUEST_NODE_INFO", "REQUEST_PARTITION_INFO")
    cycles = max(1, jobtap.notes.get("collector cycles", 1))
    per_cycle = sum(jobtap.rpcs[t] for t in stats) / cycles
    per_run = sum(polling.rpcs[t] for t in polling.rpcs if t.startswith("REQUEST_JOB_INFO"))
    per_run += polling.rpcs["REQUEST_PARTITION_INFO"] + polling.rpcs["REQUEST_FED_INFO"]
    per_run /= max(1, polling.notes.get("squeue runs", 1))
    minutes = max(1, round((2 * args.duration + 30) / 60))
    return f"""{HEADING}

What {args.tools} tools cost slurmctld when each polls `{args.poll_command}` every
{args.poll_interval:g} s, versus the same {args.tools} tools subscribed through jobtap,
where one collector observes Slurm every {args.interval:g} s (its probe, a compact `squeue`
listing, with `slurmrestd` for the jobs that moved and `squeue --json` every 60 s; `sinfo
--json` and `scontrol show partition -o` every cycle) and the tools get pushed changes. Counts
are slurmctld's own (`sdiag --reset` before each phase, `sdiag` after it), over
{args.duration:g} s per phase, on the single-host {version} of `deploy/slurm/start.sh`
(four node names on {os.cpu_count()} cores) with {args.jobs} held jobs, one running job
per node and a short job submitted every 10 s in both phases.

{table(polling, jobtap)}

{notes}

Polling costs slurmctld {ratio:.0f} times the RPCs of jobtap. Each poll is
{per_run:.1f} RPCs, so the polling count grows with the number of tools and their
poll rate; jobtap's stays at {per_cycle:.1f} RPCs per collector cycle (plus the `sacct`
of jobs that leave the live list, which goes to slurmdbd, not slurmctld) whatever
the number of subscribers. The submissions (REQUEST_SUBMIT_BATCH_JOB), the job
completions and `sdiag` itself (REQUEST_STATS_INFO) are the same workload in both
columns.

Reproduce (as root; about {minutes} min):

```
{command}
```
"""


def write_doc(text: str, path: Path = DOC, heading: str = HEADING) -> None:
    """Put the section into ``path``: replace the one with the same heading (up to
    the next ``## `` heading), or append it; other sections are left as they are."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# Performance\n\n" + text)
        return
    lines = path.read_text().splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
    if start is None:
        body = "".join(lines).rstrip("\n")
        path.write_text(body + "\n\n" + text)
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    path.write_text("".join(lines[:start]) + text + ("\n" + tail if tail else ""))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.slurm_polling", description=__doc__)
    parser.add_argument("--duration", type=float, default=120.0, help="seconds per phase")
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--poll-interval", type=float, default=2.0)
    parser.add_argument(
        "--poll-command", default="squeue", help="what each polling tool runs ({job}: a job id)"
    )
    parser.add_argument("--interval", type=float, default=5.0, help="collector interval")
    parser.add_argument("--jobs", type=int, default=100, help="held jobs in the queue")
    parser.add_argument("--no-write", action="store_true", help="do not update the doc")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark starts Slurm and resets its statistics")

    with slurm_held():
        cancel_all()
        held = [sbatch("-H", "-t", "5", "--wrap", "true", "-J", "held") for _ in range(args.jobs)]
        minutes = int(2 * args.duration / 60) + 5
        running = [
            sbatch("-w", f"n{i}", "-t", str(minutes), "--wrap", "sleep 100000", "-J", "long")
            for i in range(1, 5)
        ]
        try:
            print(f"phase 1: {args.tools} tools polling for {args.duration:g}s", flush=True)
            polling = run_polling(args, running + held)
            print(f"  {polling.total} RPCs {dict(polling.rpcs)} {polling.notes}", flush=True)
            with tempfile.TemporaryDirectory(prefix="jobtap-bench-") as tmp:
                print(f"phase 2: {args.tools} tools through jobtap for {args.duration:g}s")
                jobtap = run_jobtap(args, Path(tmp))
            print(f"  {jobtap.total} RPCs {dict(jobtap.rpcs)} {jobtap.notes}", flush=True)
        finally:
            cancel_all()
    text = section(args, polling, jobtap, argv)
    print()
    print(text)
    if not args.no_write:
        write_doc(text)
        print(f"written to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
