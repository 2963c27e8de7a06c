"""What the collector costs slurmctld with its plans, against a full
``squeue --json`` every interval (what it did before them).

    sudo .venv/bin/python -m bench.slurm_tiers                       # 2,000 then 10,000 jobs
    sudo .venv/bin/python -m bench.slurm_tiers --jobs 2000 --duration 60 --no-write
    sudo .venv/bin/python -m bench.slurm_tiers --plans follow --interval 2
    sudo .venv/bin/python -m bench.slurm_tiers --slurm 24.11 --jobs 2000 --interval 2 \
        --plans probe probe-lines follow        # the state probe against the line probe

Needs root and the single-host Slurm of deploy/slurm/start.sh (``--slurm
24.11``: deploy/slurm/debian13/start.sh), started if it is not running; it takes
the Slurm lock of the live tests.  For each ``--jobs``
size, the queue is filled with that many held jobs (and one long job running on
each node), then phases of ``--duration`` seconds run the same workload: a
short job every 10 s (alternately ``exit 0`` and ``exit 3``) and, every 10 s, a
held job's time limit changed (``scontrol update``).

* baseline: ``squeue --json`` every ``--interval`` seconds, its output read and
  thrown away;
* ``probe`` plan: the collector with its defaults without follow mode
  (``CollectorService``, SlurmBackend: the probe every ``--interval`` seconds,
  ``squeue --json`` every 60 s, ``slurmrestd`` for the jobs whose probe line
  moved, nodes and partitions every 6 cycles) and a real ``jobtap worker`` on a
  local redis-server; from 23.11 its probe is ``squeue --only-job-state``;
* ``probe-lines`` plan: the same with the line probe on every release
  (``--slurm-probe lines``);
* ``follow`` plan: the same with ``--follow``'s defaults on Slurm: the pushed
  plan (no job listing between the reconciliations of every 60 s), the
  slurmctld hook poking each job as it starts and ends (its settings file
  /etc/jobtap/slurm-hook.env points it at the phase's Redis), ``slurmrestd``
  for each poked job.

Each phase starts with ``sdiag --reset`` and ``sacctmgr -i clear stats`` and ends
with ``sdiag`` and ``sacctmgr show stats``: slurmctld's count and total time of
each read RPC, and slurmdbd's time on ``sacct`` (DBD_GET_JOBS_COND) beside it.
After each collector phase every change is checked against what the jobs did:
each short job must have exactly one ``new`` and one ``final`` with its state and
exit status, and each changed time limit must be in the job's last record
(waiting up to 70 s for it: a pushed plan sees a limit at its next
reconciliation).

The figures go into docs/performance.md, one section per size and interval,
"Slurm: the collector against squeue --json every interval, N held jobs, every
I s" (``--no-write`` only prints).  Each size takes the Slurm lock for about
``(1 + plans) * duration`` seconds plus the submissions (about 5 ms a job); run
the sizes one at a time to let the live tests of other sessions in between.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench.slurm_polling import (
    DOC,
    ROOT,
    cancel_all,
    sbatch,
    sh,
    slurm_held,
    stop_services,
    write_doc,
)
from jobtap.collector.backends.slurm import SlurmBackend
from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.entries import xrange_events
from jobtap.events import record_of
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from sim.rig.slurm import CLUSTERS, hook_settings, is_read_rpc, rpc_stats, use

HEADING = "## Slurm: the collector against squeue --json every interval"
PLANS = {
    "probe": "the collector's defaults without follow mode (probe every interval,"
    " `squeue --json` every 60 s, `slurmrestd` for the jobs whose probe named them,"
    " nodes and partitions every 6 cycles; from 23.11 the probe is `squeue"
    " --only-job-state`)",
    "probe-lines": "the same with `--slurm-probe lines` (the probe one `squeue` text line"
    " per job: a listing's cost)",
    "follow": "`--follow`'s defaults on Slurm (the pushed plan: `squeue --json` every 60 s"
    " and no job listing in between, the slurmctld hook poking each job as it starts and"
    " ends, `slurmrestd` for each poked job, nodes and partitions every 6 cycles)",
}
SITE = "slurmtiers"
# slurmctld's read RPCs: what observing the cluster costs (the rest is the workload)
STATS_RPC = "REQUEST_STATS_INFO"  # sdiag itself


def is_read(rpc: str) -> bool:
    return is_read_rpc(rpc) and rpc != STATS_RPC


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    ctld: dict[str, tuple[int, int]] = field(default_factory=dict)  # type -> (count, us)
    dbd: dict[str, tuple[int, int]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def read_us(self) -> int:
        return sum(us for rpc, (_, us) in self.ctld.items() if is_read(rpc))

    @property
    def read_count(self) -> int:
        return sum(n for rpc, (n, _) in self.ctld.items() if is_read(rpc))

    @property
    def sacct_us(self) -> int:
        return self.dbd.get("DBD_GET_JOBS_COND", (0, 0))[1]


class Workload:
    """The same changes in both phases: a short job every 10 s (exit 0, then
    exit 3, ...) and a held job's time limit changed every 10 s."""

    def __init__(self, held: list[str]):
        self.held = itertools.cycle(held)
        self.short: dict[str, tuple[str, int]] = {}  # job -> (state, exit status)
        self.limits: dict[str, int] = {}  # held job -> its last time limit (minutes)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.minutes = itertools.count(6)

    def _run(self) -> None:
        codes = itertools.cycle([0, 3])
        while not self.stop.wait(5):
            code = next(codes)
            self.short[sbatch("-t", "1", "--wrap", f"sleep 2; exit {code}", "-J", "short")] = (
                "completed" if code == 0 else "failed",
                code,
            )
            if self.stop.wait(5):
                break
            job, minutes = next(self.held), next(self.minutes)
            sh("scontrol", "update", f"jobid={job}", f"timelimit={minutes}")
            self.limits[job] = minutes

    def __enter__(self) -> Workload:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(60)


def reset_counters() -> None:
    sh("sdiag", "--reset")
    sh("sacctmgr", "-i", "clear", "stats", check=False)


def read_counters(phase: Phase, t0: float) -> None:
    phase.seconds = time.monotonic() - t0
    phase.ctld = rpc_stats(sh("sdiag"))
    phase.dbd = rpc_stats(sh("sacctmgr", "show", "stats", check=False))


def run_baseline(args: argparse.Namespace, held: list[str]) -> Phase:
    phase = Phase(f"`squeue --json` every {args.interval:g} s")
    runs, size = 0, 0
    reset_counters()
    t0 = time.monotonic()
    with Workload(held) as work:
        stop = work.stop
        next_run = time.monotonic()
        while time.monotonic() - t0 < args.duration:
            out = subprocess.run(["squeue", "--json"], capture_output=True, timeout=120)
            runs, size = runs + 1, size + len(out.stdout)
            next_run += args.interval
            stop.wait(max(0.0, next_run - time.monotonic()))
    read_counters(phase, t0)
    phase.notes = {"squeue --json runs": f"{runs}", "bytes read": f"{size:,}"}
    return phase


def run_jobtap(args: argparse.Namespace, held: list[str], workdir: Path, plan: str) -> Phase:
    phase = Phase(f"the collector, {plan} plan, every {args.interval:g} s")
    server = RedisServer(workdir / "redis").start()
    log = open(workdir / "worker.log", "ab")
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobtap.cli", "worker", "--redis", server.url, "--site", SITE],
        cwd=ROOT, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    r = server.client()
    backend = SlurmBackend(timeout=60, state_probe=plan != "probe-lines")
    follow = plan == "follow"
    collector = Collector(backend, r, site=SITE, pushed=follow)
    service = CollectorService(
        collector, interval=args.interval, backend_name="slurm", follow=follow
    )
    try:
        with hook_settings(server.url if follow else None, SITE, workdir / "hook.log"):
            reset_counters()
            t0 = time.monotonic()
            loop = threading.Thread(target=service.run, daemon=True)
            loop.start()
            with Workload(held) as work:
                work.stop.wait(args.duration)
            read_counters(phase, t0)  # what follows is not measured
            problems = check_delivered(r, work, deadline=time.monotonic() + 70)
        service.stop_event.set()
        loop.join(120)
        meta = {k.decode(): v.decode() for k, v in r.hgetall(service.keys.meta).items()}
        phase.notes = {
            "probe": next(
                (
                    p
                    for p in backend.describe().get("scheduler_paths", "").split("; ")
                    if p.startswith("probe: ")
                ),
                "probe: -",
            )[7:],
            "probe cycles": meta.get("cycles_probe", "0"),
            "pushed cycles": meta.get("cycles_pushed", "0"),
            "reconciliations": meta.get("cycles_reconcile", "0"),
            "refreshes": meta.get("refreshes", "0"),
            "failed cycles": meta.get("cycles_failed", "0"),
            "bytes read": f"{backend.cost.bytes:,}",
            "short jobs checked": f"{len(work.short)}",
            "time limits checked": f"{len(work.limits)}",
            "not delivered": "; ".join(problems) or "none",
        }
    finally:
        service.stop_event.set()
        stop_services(worker, log, r, server)
    return phase


def check_delivered(r, work: Workload, deadline: float) -> list[str]:
    """What did not reach the site stream (waiting until ``deadline`` for the
    last jobs): every short job one new and one final with its state and exit
    status, every changed time limit in the job's last record."""

    def problems() -> list[str]:
        events: dict[str, list[dict]] = {}
        for _, fields in xrange_events(r, SiteKeys(SITE).events):
            if not fields:
                continue
            e = orjson.loads(fields[b"event"])
            if e["kind"] == "job":
                events.setdefault(e["object_id"], []).append(e)
        out = []
        for job, (state, code) in work.short.items():
            evs = events.get(job, [])
            types = [e["type"] for e in evs]
            last = record_of(evs[-1]) if evs else {}
            if types.count("new") != 1 or types.count("final") != 1 or types[-1] != "final":
                out.append(f"{job}: {types}")
            elif (last["state"], last["exit_status"]) != (state, code):
                out.append(f"{job}: {last['state']} {last['exit_status']}")
        for job, minutes in work.limits.items():
            evs = events.get(job, [])
            want = f"{minutes // 60:02d}:{minutes % 60:02d}:00"
            if not evs or record_of(evs[-1])["requested"]["walltime"] != want:
                out.append(f"{job}: time limit {want} missing")
        return out

    found = problems()
    while found and time.monotonic() < deadline:
        time.sleep(1)
        found = problems()
    return found


def table(phases: dict[str, Phase]) -> str:
    """One row per read RPC, a count and a time column per phase."""
    types = sorted(
        {t for p in phases.values() for t in p.ctld if is_read(t)},
        key=lambda t: (-sum(p.ctld.get(t, (0, 0))[1] for p in phases.values()), t),
    )
    head = "| read RPC (sdiag) |" + "".join(f" {n} count | {n} ms |" for n in phases)
    lines = [head, "|---|" + "---:|---:|" * len(phases)]
    for t in types:
        cells = "".join(
            f" {p.ctld.get(t, (0, 0))[0]:,} | {p.ctld.get(t, (0, 0))[1] / 1000:,.1f} |"
            for p in phases.values()
        )
        lines.append(f"| {t} |{cells}")
    total = "".join(
        f" **{p.read_count:,}** | **{p.read_us / 1000:,.1f}** |" for p in phases.values()
    )
    lines.append(f"| **slurmctld, all reads** |{total}")
    dbd = "".join(
        f" {p.dbd.get('DBD_GET_JOBS_COND', (0,))[0]} | {p.sacct_us / 1000:,.1f} |"
        for p in phases.values()
    )
    lines.append(f"| slurmdbd, `sacct` (DBD_GET_JOBS_COND) |{dbd}")
    return "\n".join(lines)


def heading(jobs: int, interval: float, release: str = "22.05") -> str:
    on = "" if release == "22.05" else f", Slurm {release}"  # 22.05's sections keep their names
    return f"{HEADING}, {jobs:,} held jobs, every {interval:g} s{on}"


def section(args: argparse.Namespace, jobs: int, phases: dict[str, Phase], argv) -> str:
    command = "sudo .venv/bin/python -m bench.slurm_tiers" + (
        " " + shlex.join(argv) if argv else ""
    )
    version = sh("sinfo", "--version").strip()
    parts = [heading(jobs, args.interval, args.slurm), ""]
    plans = "; ".join(f"`{name}`: {PLANS[name]}" for name in phases if name in PLANS)
    parts.append(
        f"slurmctld's own time on read RPCs (`sdiag --reset` before each phase, `sdiag`"
        f" after it) over {args.duration:g} s per phase, on the single-host {version} of"
        f" `{Path(CLUSTERS[args.slurm].start_command[1]).relative_to(ROOT)}` (four node"
        f" names on {os.cpu_count()} cores, 24 GiB),"
        f" with held jobs in the queue, one long job on each node, and in every phase a"
        f" short job every 10 s and a held job's time limit changed every 10 s. Baseline:"
        f" `squeue --json` every {args.interval:g} s (the collector's job stat before its"
        f" tiers). The collector's plans, each with a worker, every {args.interval:g} s:"
        f" {plans}."
    )
    parts += ["", table(phases), ""]
    for p in phases.values():
        parts.append(f"- {p.name}: " + ", ".join(f"{k} {v}" for k, v in p.notes.items()))
    parts.append("")
    base = phases["baseline"]
    for name, p in phases.items():
        if name != "baseline":
            ratio = base.read_us / max(1, p.read_us)
            parts.append(f"slurmctld's read time, {name} plan: {ratio:.1f}x less than the"
                         f" baseline (target: 10x).  ")  # fmt: skip
    parts[-1] = parts[-1].rstrip()
    parts += ["", "Reproduce (as root):", "", "```", command, "```", ""]
    return "\n".join(parts)


def fill_queue(jobs: int, minutes: int, nodes: Sequence[str]) -> list[str]:
    """Cancel everything, then ``jobs`` held jobs and a long job on each node."""
    cancel_all()
    t0 = time.monotonic()
    held = [sbatch("-H", "-t", "5", "--wrap", "true", "-J", "held") for _ in range(jobs)]
    for node in nodes:
        sbatch("-w", node, "-t", str(minutes), "--wrap", "sleep 100000", "-J", "long")
    print(f"{jobs} held jobs submitted in {time.monotonic() - t0:.0f}s", flush=True)
    return held


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.slurm_tiers", description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[2000, 10000])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds per phase")
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument(
        "--plans", nargs="+", choices=list(PLANS), default=list(PLANS), help="collector phases"
    )
    parser.add_argument("--no-write", action="store_true", help="do not update the doc")
    parser.add_argument("--slurm", choices=list(CLUSTERS), default="22.05",
                        help="which Slurm of the test rig")  # fmt: skip
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark starts Slurm and resets its statistics")
    cluster = CLUSTERS[args.slurm]
    os.environ.update(PATH=cluster.env()["PATH"])  # every command of the run, the collector's
    use(cluster)  # its hook's settings file
    runs = []
    with slurm_held(args.slurm):
        try:
            for jobs in args.jobs:
                held = fill_queue(
                    jobs,
                    minutes=int((1 + len(args.plans)) * args.duration / 60) + 10,
                    nodes=cluster.nodes,
                )
                phases = {"baseline": run_baseline(args, held)}
                print(f"  baseline: {phases['baseline'].read_us / 1000:.1f} ms", flush=True)
                for plan in args.plans:
                    with tempfile.TemporaryDirectory(prefix="jobtap-bench-") as tmp:
                        phases[plan] = run_jobtap(args, held, Path(tmp), plan)
                    p = phases[plan]
                    print(f"  {plan}: {p.read_us / 1000:.1f} ms {p.notes}", flush=True)
                runs.append((jobs, phases))
        finally:
            cancel_all()
    for jobs, phases in runs:
        text = section(args, jobs, phases, argv)
        print()
        print(text)
        if not args.no_write:
            write_doc(text, DOC, heading(jobs, args.interval, args.slurm))
            print(f"written to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
