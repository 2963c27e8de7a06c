"""Slurm follow mode across churn rates: what ``jobtap collector --follow``
costs slurmctld against ``squeue --json`` every interval, quiet, at one job a
second and in a 300-job burst, with the time from each job's end to the SDK
callback carrying its final.

    sudo .venv/bin/python -m bench.slurm_churn                  # 3 levels, about 9 min
    sudo .venv/bin/python -m bench.slurm_churn --levels burst --no-write
    sudo .venv/bin/python -m bench.slurm_churn --slurm 24.11    # Debian 13's Slurm

Needs root and a single-host Slurm of the test rig (sim/rig/slurm.py):
22.05 of deploy/slurm/start.sh by default, ``--slurm 24.11`` that of
deploy/slurm/debian13/start.sh (started if it is not running; their slurm.conf
names deploy/slurm/jobtap-slurmctld-hook.sh as PrologSlurmctld, EpilogSlurmctld
and JobCompLoc).  The cluster's commands go first on PATH for the whole run.
Each level takes the Slurm lock of the live tests on its own (about 2.5 min),
so other sessions get their turn in between, and starts from an empty queue:
``--held`` held jobs (the queue a listing packs), then two phases of
``--duration`` seconds with the same workload:

* ``quiet``: a job every 6 s; ``rate``: a job every second (each ``sleep 1``);
  ``burst``: ``--burst`` jobs submitted at once, as fast as sbatch goes, each
  ending at once.  Every job writes the time as its last act (its end).
* baseline: ``squeue --json`` every ``--interval`` seconds, read and thrown
  away (what a collector or a tool polling Slurm costs it);
* follow: a redis-server, ``jobtap worker`` and ``jobtap collector --backend
  slurm --follow --interval INTERVAL`` as processes, the hook's settings file
  (/etc/jobtap/slurm-hook.env, put back afterwards) pointing at that Redis, and
  an SDK client subscribed to root's jobs; a job's latency is the time of the
  callback carrying its final minus the job's end.

Each phase starts with ``sdiag --reset`` (after the collector's first cycle)
and reads ``sdiag`` at its end: slurmctld's count and time of each read RPC
(``REQUEST_*_INFO*``), the ``sdiag`` of the collector's read budget
(REQUEST_STATS_INFO) included, the bench's own one left out.  The workload's
own reads (what sbatch asks, the same in both phases) are in both columns.

The table goes into docs/performance.md, section "Slurm follow mode across
churn rates" (``--no-write`` only prints).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.slurm_polling import DOC, ROOT, cancel_all, sbatch, sh, slurm_held, write_doc
from sim.rig.pipeline import chunks_not_applied
from sim.rig.procs import stop_process
from sim.rig.slurm import CLUSTERS, hook_settings, is_read_rpc, rpc_stats, use

HEADING = "## Slurm follow mode across churn rates"
SITE = "slurmchurn"
STATS_RPC = "REQUEST_STATS_INFO"  # sdiag
LEVELS = {
    "quiet": "a job every 6 s",
    "rate": "a job every second",
    "burst": "{burst} jobs at once",
}


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else float("nan")


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    ctld: dict[str, tuple[int, int]] = field(default_factory=dict)  # type -> (count, us)
    jobs: int = 0
    latencies: list[float] = field(default_factory=list)
    slowest: list[tuple[float, str]] = field(default_factory=list)  # (latency, job), worst first
    missing: int = 0
    missing_ids: list[str] = field(default_factory=list)  # with what the cache says of each
    meta: dict[str, str] = field(default_factory=dict)
    # Per job: its completion record's poke time less the epilog's poke time
    # (negative: the record came first), from the poke stream's entry ids.
    record_gaps: list[float] = field(default_factory=list)

    def reads(self) -> dict[str, tuple[int, int]]:
        out = {t: v for t, v in self.ctld.items() if is_read_rpc(t)}
        if STATS_RPC in out:  # the bench's own sdiag at the end
            count, us = out[STATS_RPC]
            out[STATS_RPC] = (count - 1, us - us // max(1, count))
        return out

    @property
    def read_us(self) -> int:
        return sum(us for _, us in self.reads().values())

    def count(self, rpc: str) -> int:
        return self.ctld.get(rpc, (0, 0))[0]


class Workload:
    """The level's jobs, each writing its end time as its last act."""

    def __init__(self, level: str, args: argparse.Namespace, stamps: Path):
        self.level, self.args, self.stamps = level, args, stamps
        self.ends: dict[str, Path] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def submit(self, sleep: float) -> None:
        script = f"sleep {sleep:g}; date +%s.%N > {self.stamps}.$SLURM_JOB_ID"
        job = sbatch("-t", "5", "-J", f"churn-{self.level}", "--wrap", script)
        self.ends[job] = Path(f"{self.stamps}.{job}")

    def _run(self) -> None:
        if self.level == "burst":
            for _ in range(self.args.burst):
                self.submit(0)
            return
        every = 6.0 if self.level == "quiet" else 1.0
        next_at = time.monotonic()
        while not self.stop.is_set():
            self.submit(1)
            next_at += every
            self.stop.wait(max(0.0, next_at - time.monotonic()))

    def __enter__(self) -> Workload:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(120)


def run_baseline(level: str, args: argparse.Namespace, workdir: Path) -> Phase:
    phase = Phase(f"`squeue --json` every {args.interval:g} s")
    sh("sdiag", "--reset")
    t0 = time.monotonic()
    with Workload(level, args, workdir / "base") as work:
        next_run = time.monotonic()
        while time.monotonic() - t0 < args.duration:
            subprocess.run(["squeue", "--json"], capture_output=True, timeout=120)
            next_run += args.interval
            work.stop.wait(max(0.0, next_run - time.monotonic()))
        phase.ctld = rpc_stats(sh("sdiag"))
    phase.seconds = time.monotonic() - t0
    phase.jobs = len(work.ends)
    return phase


def run_follow(level: str, args: argparse.Namespace, workdir: Path) -> Phase:
    import jobtap
    from jobtap.keys import SiteKeys
    from jobtap.sim.localredis import RedisServer

    keys = SiteKeys(SITE)
    phase = Phase(f"`jobtap collector --follow --interval {args.interval:g}`")
    server = RedisServer(workdir / "redis").start()
    r = server.client()
    log = open(workdir / "services.log", "ab")
    common = ["--redis", server.url, "--site", SITE]
    finals: dict[str, float] = {}
    got = threading.Condition()

    def on_change(change: jobtap.Change) -> None:
        if change.final:
            with got:
                finals.setdefault(change.object_id, time.time())
                got.notify_all()

    procs: list[subprocess.Popen] = []
    client = None
    try:
        with hook_settings(server.url, SITE, workdir / "hook.log"):
            for words in (
                ["worker", *common],
                ["collector", "--backend", "slurm", "--follow", "--interval",
                 str(args.interval), "--log-level", args.log_level, *common],
            ):  # fmt: skip
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "jobtap.cli", *words],
                        cwd=ROOT,
                        stdout=log,
                        stderr=log,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )  # fmt: skip
                )
            deadline = time.monotonic() + 60
            while r.hget(keys.meta, "cycles_ok") is None:
                if time.monotonic() > deadline or procs[1].poll() is not None:
                    raise SystemExit(f"the collector did not run a cycle; see {workdir}")
                time.sleep(0.2)
            # The first cycle ships every queued job as new (10,000 events): a
            # start-up cost, not the churn's; the workload waits for the worker.
            while chunks_not_applied(r):
                if time.monotonic() > deadline + 240 or procs[0].poll() is not None:
                    raise SystemExit(f"the worker did not apply the first cycle; see {workdir}")
                time.sleep(0.2)
            client = jobtap.Client(server.url, site=SITE)
            client.subscribe(on_change, user="root", initial=False)
            sh("sdiag", "--reset")
            t0 = time.monotonic()
            with Workload(level, args, workdir / "follow") as work:
                work.stop.wait(args.duration)
                phase.ctld = rpc_stats(sh("sdiag"))
                phase.seconds = time.monotonic() - t0
            with got:  # the last jobs' finals, for their latency (not measured in sdiag)
                got.wait_for(lambda: set(work.ends) <= set(finals), timeout=90)
            for job in sorted(set(work.ends) - set(finals)):  # what the cache says of them
                cached = client.job(job, user="root")
                state = cached.state if cached is not None else "not in the cache"
                phase.missing_ids.append(f"{job} ({state})")
            phase.meta = {k.decode(): v.decode() for k, v in r.hgetall(keys.meta).items()}
            phase.record_gaps = record_gaps(r.xrange(keys.pokes))
    finally:
        if client is not None:
            client.close()
        for proc in reversed(procs):
            stop_process(proc)
        log.close()
        r.close()
        server.stop()
    phase.jobs = len(work.ends)
    for job, path in work.ends.items():
        if job not in finals or not path.exists():
            phase.missing += 1
            continue
        phase.latencies.append(finals[job] - float(path.read_text()))
        phase.slowest.append((phase.latencies[-1], job))
    phase.slowest = sorted(phase.slowest, reverse=True)[:3]
    return phase


def record_gaps(entries: list) -> list[float]:
    """Seconds from each job's record-less ended poke (the epilog's) to the
    poke carrying its completion record, for the jobs that had both."""
    epilog: dict[bytes, float] = {}
    record: dict[bytes, float] = {}
    for entry_id, fields in entries:
        at = int(entry_id.split(b"-")[0]) / 1000
        if fields.get(b"ended") != b"1":
            continue
        seen = record if b"record" in fields else epilog
        seen.setdefault(fields.get(b"ids", b""), at)
    return [record[j] - epilog[j] for j in epilog if j in record]


def fill_queue(held: int) -> None:
    cancel_all()
    t0 = time.monotonic()
    for _ in range(held):
        sbatch("-H", "-t", "5", "--wrap", "true", "-J", "held")
    print(f"  {held} held jobs submitted in {time.monotonic() - t0:.0f}s", flush=True)


def ms(us: float) -> str:
    return f"{us / 1000:,.1f}"


def describe(level: str, args: argparse.Namespace) -> str:
    return LEVELS[level].format(burst=args.burst)


def table(runs: dict[str, tuple[Phase, Phase]], args: argparse.Namespace) -> str:
    lines = [
        f"| churn | jobs | `squeue --json` every {args.interval:g} s: read RPCs, ms"
        " | follow: read RPCs, ms | follow / squeue | follow: listings, single reads"
        " | end to callback p50 / p99 | finals missing |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for level, (base, follow) in runs.items():
        b_n = sum(n for n, _ in base.reads().values())
        f_n = sum(n for n, _ in follow.reads().values())
        ratio = follow.read_us / max(1, base.read_us)
        lat = follow.latencies
        lines.append(
            f"| {level} ({describe(level, args)}) | {follow.jobs} | {b_n:,}, {ms(base.read_us)}"
            f" | {f_n:,}, {ms(follow.read_us)} | {ratio:.2f} (1/{1 / max(ratio, 1e-9):.1f})"
            f" | {follow.count('REQUEST_JOB_INFO')}, {follow.count('REQUEST_JOB_INFO_SINGLE')}"
            f" | {percentile(lat, 50) * 1000:.0f} / {percentile(lat, 99) * 1000:.0f} ms"
            f" | {follow.missing} |"
        )
    return "\n".join(lines)


def breakdown(runs: dict[str, tuple[Phase, Phase]]) -> str:
    lines = []
    for level, (base, follow) in runs.items():
        for phase in (base, follow):
            parts = ", ".join(
                f"{t} {n:,} ({ms(us)} ms)"
                for t, (n, us) in sorted(phase.reads().items(), key=lambda kv: -kv[1][1])
                if n
            )
            lines.append(f"- {level}, {phase.name} ({phase.seconds:.0f} s): {parts}")
        m = follow.meta
        lines.append(
            f"  - follow: refreshes {m.get('refreshes', '0')}, pokes received"
            f" {m.get('pokes_received', '0')}, reconciliations {m.get('cycles_reconcile', '0')}"
        )
    return "\n".join(lines)


def heading(args: argparse.Namespace) -> str:
    """The doc's section: one per Slurm release (22.05's keeps its old title)."""
    return HEADING if args.slurm == "22.05" else f"{HEADING}: Slurm {args.slurm}"


def section(args: argparse.Namespace, runs: dict[str, tuple[Phase, Phase]], argv) -> str:
    command = "sudo .venv/bin/python -m bench.slurm_churn" + (
        " " + shlex.join(argv) if argv else ""
    )
    version = sh("sinfo", "--version").strip()
    uname = os.uname()
    parts = [
        heading(args),
        "",
        f"slurmctld's own time on read RPCs (`sdiag --reset` after the collector's first"
        f" cycle, `sdiag` {args.duration:g} s later) on the single-host {version} of"
        f" `{Path(CLUSTERS[args.slurm].start_command[1]).relative_to(ROOT)}` (four node names"
        f" × 4 CPUs on"
        f" {os.cpu_count()} cores,"
        f" {uname.sysname} {uname.release}), {args.held:,} held jobs in the queue, the same"
        f" workload in both columns (each job `sleep 1` then writes its end time; in the"
        f" burst, no sleep). The follow column is the collector's defaults with `--follow`"
        f" (pushed plan, reconciliation every 60 s, the slurmctld hook poking each start and"
        f" end, the read budget of `collector/follow/budget.py`: per interval at most what a"
        f" scheduled listing costs, each read settled at its price in `sdiag`), with a worker"
        f" and an SDK subscriber; end to"
        f" callback is from each job's own end stamp to the callback carrying its final.",
        "",
        table(runs, args),
        "",
        breakdown(runs),
        "",
        "Reproduce (as root):",
        "",
        "```",
        command,
        "```",
        "",
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.slurm_churn", description=__doc__)
    parser.add_argument("--levels", nargs="+", choices=list(LEVELS), default=list(LEVELS))
    parser.add_argument("--held", type=int, default=2000, help="held jobs in the queue")
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per phase")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--no-write", action="store_true", help="do not update the doc")
    parser.add_argument("--keep", type=Path, help="copy each level's service and hook logs here")
    parser.add_argument("--log-level", default="INFO", help="the collector's (DEBUG: each refresh)")
    parser.add_argument("--slurm", choices=list(CLUSTERS), default="22.05",
                        help="which Slurm of the test rig")  # fmt: skip
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark starts Slurm and resets its statistics")
    cluster = CLUSTERS[args.slurm]
    os.environ.update(PATH=cluster.env()["PATH"])  # every command of the run, the collector's
    use(cluster)  # its hook's settings file
    runs: dict[str, tuple[Phase, Phase]] = {}
    for level in args.levels:
        print(f"{level}: {describe(level, args)}", flush=True)
        with slurm_held(args.slurm), tempfile.TemporaryDirectory(prefix="jobtap-churn-") as tmp:
            try:
                fill_queue(args.held)
                base = run_baseline(level, args, Path(tmp))
                print(f"  baseline: {ms(base.read_us)} ms", flush=True)
                cancel_running()
                follow = run_follow(level, args, Path(tmp))
                print(
                    f"  follow: {ms(follow.read_us)} ms, p99"
                    f" {percentile(follow.latencies, 99) * 1000:.0f} ms,"
                    f" missing {follow.missing}; slowest: "
                    + ", ".join(f"{job} {lat * 1000:.0f} ms" for lat, job in follow.slowest),
                    flush=True,
                )
                if follow.missing_ids:
                    print(f"  no final callback: {', '.join(follow.missing_ids)}", flush=True)
                gaps = follow.record_gaps
                if gaps:
                    print(
                        f"  completion record after the epilog's poke: p50"
                        f" {percentile(gaps, 50) * 1000:.0f} ms, p90"
                        f" {percentile(gaps, 90) * 1000:.0f} ms, max {max(gaps) * 1000:.0f} ms;"
                        f" record first for {sum(g < 0 for g in gaps)} of {len(gaps)} jobs",
                        flush=True,
                    )
            finally:
                cancel_all()
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    for name in ("services.log", "hook.log"):
                        if (Path(tmp) / name).exists():
                            shutil.copy(Path(tmp) / name, args.keep / f"{level}-{name}")
        runs[level] = (base, follow)
    text = section(args, runs, argv)
    print()
    print(text)
    if not args.no_write:
        write_doc(text, DOC, heading(args))
        print(f"written to {DOC.relative_to(ROOT)}")
    return 0


def cancel_running() -> None:
    """Between the phases: the baseline's jobs that have not ended yet go."""
    ids = sorted(set(sh("squeue", "-h", "-t", "PD,R,CG,CF", "-n", "churn-quiet,churn-rate,"
                        "churn-burst", "-o", "%A").split()))  # fmt: skip
    if ids:
        sh("scancel", *ids, check=False)


if __name__ == "__main__":
    sys.exit(main())
