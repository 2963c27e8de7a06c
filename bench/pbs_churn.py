"""PBS follow mode across churn rates, through the stand-ins' cost model: what
``jobtap collector --backend pbs --follow`` costs the server against ``qstat
-f -F json`` every interval, quiet, at one job a second and in a 300-job
burst, with the time from each job's end to the SDK callback carrying its
final, and whether the follow path reads a batch of pokes with one ``qstat
-E``.  The PBS counterpart of ``bench.slurm_churn`` (issue 20).

    .venv/bin/python -m bench.pbs_churn                       # 3 levels, about 3.5 min
    .venv/bin/python -m bench.pbs_churn --levels burst --seconds 30 --held 500

There is no PBS server here: the ``qstat``, ``qselect`` and ``pbsnodes``
stand-ins (sim/standins) play it, each call priced by their model of OpenPBS
23.06 (sim/standins/pbs_standin.py: 35 ms per server connection through
``pbs_iff``, 0.17 ms per job record qstat prints, 17 ms per qselect plus 1 us
per id it prints, 200 ms when the same user ran qstat earlier in that second,
1 s waits when no port is free) and written to the stand-ins' log, part by
part, which is the accounting printed here.  The server's cost of a call is
its connections and its records; the throttle is qstat sleeping on the client
(the server is not at work), so it is printed apart, and so are waits for
ports; the ratios are of server cost.  The model's price of a record fits the
real 1,000-job figures and overprices large listings (the same server listed
5,000 queued jobs in 0.29 s, 51 us a record: ``RECORD_AT_5000``), which
favours follow mode against a poller of 2,000 jobs, so the ratio is also
printed with every qstat record at that lower price.

Each level starts from ``--held`` held jobs (submitted an hour ago, unchanged
since) and runs both sides side by side for ``--seconds`` on the same jobs,
each job running 1 s:

* ``quiet``: a job every 6 s; ``rate``: a job every second; ``burst``:
  ``--burst`` jobs starting at once;
* poll: ``qstat -f -F json`` every ``--interval`` seconds, read and thrown away
  (what a poller costs the server), against a control file of its own (its own
  throttle state and log);
* follow: a redis-server, a real ``jobtap worker``, the collector service with
  the defaults of ``jobtap collector --backend pbs --follow --interval
  INTERVAL`` (the probe plan: ``qselect`` every interval and a targeted ``qstat
  -E`` of what it names, a full listing every 60 s, nodes every 6 cycles) in
  this process (bench/follow_rig.py), and an SDK client subscribed to every job.
  The server hook (deploy/pbs/jobtap_poke_hook.py, run one event at a time as
  the server runs hooks) writes a poke itself at each runjob (no record: the
  collector reads the job with ``qstat -E``) and at each jobobit (the poke
  carries the job's final record: no qstat).

A job's latency is the callback carrying its final minus the moment the
stand-in starts showing it finished (the server records its end).  The cost
window is ``--seconds`` from the first job; the last finals are waited for
after it (their pokes need no qstat).  A batch of pokes is one refresh of
poked jobs; "one ``qstat -E`` per batch" holds when every batch that asked
the server ran exactly one ``qstat -E`` and nothing else; the exit status is
1 when that does not hold or a final is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.follow_rig import FollowRig, percentile
from bench.pbs_rig import (
    FIXTURES,
    LISTING,
    QSTAT_E,
    CountingPBS,
    Refresh,
    command_kind,
    count_refreshes,
    hook_config,
    jobobit_job,
    standin_backend,
    use_standins,
    write_control,
)
from sim.rig.paths import FAKE_BIN
from sim.rig.pbs_hook import run_hook
from sim.rig.pbs_jobs import FINISHED, RUNNING, job_ids, write_jobs
from sim.rig.pipeline import chunks_not_applied
from sim.standins.pbs_standin import RECORD_AT_5000

SITE = "pbschurn"
HELD = ("10-busy.qstat-f.json", "4.vm")  # a real held job (Hold_Types u)
RUN = 1.0  # seconds each job runs
LEVELS = {
    "quiet": "a job every 6 s",
    "rate": "a job every second",
    "burst": "{burst} jobs at once",
}


@dataclass
class Side:
    """What one side cost the server in the window, from the stand-ins' log,
    by kind of call: the server's seconds (connections and records), the
    throttle's (the client waiting) and the waits for ports."""

    name: str
    calls: Counter[str] = field(default_factory=Counter)
    server: Counter[str] = field(default_factory=Counter)  # connections + records, s
    records: Counter[str] = field(default_factory=Counter)  # job records (qselect: ids)
    low: Counter[str] = field(default_factory=Counter)  # server, qstat records at 51 us
    throttle: Counter[str] = field(default_factory=Counter)  # seconds
    throttled: Counter[str] = field(default_factory=Counter)  # calls
    ports: Counter[str] = field(default_factory=Counter)  # seconds waiting for a port
    sent: int = 0  # bytes the commands printed

    def read_log(self, path: Path, start: int, end: int) -> Side:
        """Count the calls logged between these byte offsets (a call is
        logged once it has its answer, before its last sleep)."""
        with open(path, "rb") as fh:
            fh.seek(start)
            lines = fh.read(end - start).splitlines()
        for line in lines:
            call = json.loads(line)
            kind = command_kind(call["program"], call["args"])
            self.calls[kind] += 1
            self.server[kind] += call["connect_seconds"] + call["record_seconds"]
            self.records[kind] += call["records"]
            at_5000 = call["records"] * RECORD_AT_5000 if call["program"] == "qstat" else None
            self.low[kind] += call["connect_seconds"] + (
                call["record_seconds"] if at_5000 is None else at_5000
            )
            self.throttle[kind] += call["throttle_seconds"]
            self.throttled[kind] += bool(call["throttled"])
            self.ports[kind] += call["port_wait_seconds"]
        return self

    def total(self, part: str = "server") -> float:
        return sum(getattr(self, part).values())

    def cells(self) -> str:
        return (
            f"{sum(self.calls.values())}, {ms(self.total())} ({self.total('records'):,}),"
            f" {ms(self.total('throttle'))}, {mb(self.sent)}"
        )


@dataclass
class Result:
    level: str
    jobs: int
    poll: Side
    follow: Side
    latencies: list[float]
    missing: int
    batches: list[Refresh]  # refreshes of poked jobs, the whole run
    counts: Counter[str]  # the follow side's commands, the whole run
    meta: dict[str, str]
    hook_lag: list[float]  # jobobit run - the job's end


def start_offsets(level: str, args: argparse.Namespace) -> list[float]:
    """When each churn job starts, in seconds from the window's start."""
    if level == "burst":
        return [1.0] * args.burst
    every = 6.0 if level == "quiet" else 1.0
    return [i * every for i in range(int(args.seconds // every) + 1)]


def server_files(workdir: Path, held: list[str], churn: list[str]) -> tuple[Path, Path]:
    """The stand-in server's jobs: the held ones and the churn jobs running
    (``file``), the churn jobs finished (``history_file``)."""
    live = json.loads(write_jobs(FIXTURES, HELD, held, workdir / "held.json").read_text())
    running = json.loads(write_jobs(FIXTURES, RUNNING, churn, workdir / "run.json").read_text())
    live.setdefault("Jobs", {}).update(running.get("Jobs", {}))
    (workdir / "live.json").write_text(json.dumps(live))
    return workdir / "live.json", write_jobs(FIXTURES, FINISHED, churn, workdir / "done.json")


class Server:
    """The two control files (poll, follow) over the same jobs, each with its
    own log and throttle state: the two sides are alternatives, not one
    user's calls."""

    def __init__(self, workdir: Path, held: list[str], churn: list[str]) -> None:
        self.live, self.done = server_files(workdir, held, churn)
        self.held, self.churn = held, churn
        self.controls = {side: workdir / f"{side}.json" for side in ("poll", "follow")}
        self.logs = {side: workdir / f"{side}.log" for side in ("poll", "follow")}
        for log in self.logs.values():
            log.touch()
        far = time.time() + 10**6
        self.set({job: far for job in churn})

    def set(self, starts: dict[str, float]) -> None:
        """Held jobs since an hour ago; each churn job from its start, finished
        ``RUN`` seconds later (not started: not yet submitted)."""
        now = time.time()
        appear = dict.fromkeys(self.held, now - 3600)
        appear.update(starts)
        ends = {job: start + RUN for job, start in starts.items()}
        for side, control in self.controls.items():
            write_control(control, {
                "dir": str(FIXTURES), "stage": "10-busy", "mode": "ok", "file": str(self.live),
                "history_file": str(self.done), "appear": appear, "ends": ends,
                "log": str(self.logs[side]),
            })  # fmt: skip


class Poller(threading.Thread):
    """``qstat -f -F json`` every interval, read and thrown away.  A call that
    starts late (the machine is busy) still starts in a new second: a poller
    every interval is never throttled by its own previous call."""

    def __init__(self, control: Path, interval: float, until: float) -> None:
        super().__init__(name="poller", daemon=True)
        self.env = dict(os.environ, JOBTAP_FAKE_PBS=str(control))
        self.interval, self.until = interval, until
        self.sent = self.failed = 0

    def run(self) -> None:
        next_at = time.time()
        last = 0.0
        while next_at < self.until:
            time.sleep(max(0.0, next_at - time.time()))
            if int(time.time()) == int(last):  # behind (a busy machine): no self-throttle
                time.sleep(max(0.0, int(last) + 1.001 - time.time()))
            out = subprocess.run([str(FAKE_BIN / "qstat"), "-f", "-F", "json"], env=self.env,
                                 capture_output=True, timeout=120)  # fmt: skip
            last = time.time()  # the call began in this second or before (the pacer's guess)
            self.sent += len(out.stdout)
            self.failed += out.returncode != 0
            next_at += self.interval


class ServerHooks(threading.Thread):
    """The server hook at each job's start (runjob) and end (jobobit), one
    event at a time in time order, as the server runs its hooks."""

    def __init__(self, config: dict, workdir: Path, starts: dict[str, float], done: Path):
        super().__init__(name="server-hooks", daemon=True)
        self.config, self.path = config, workdir / "hook.json"
        self.finished = json.loads(done.read_text())["Jobs"]
        events = [(t, "RUNJOB", job) for job, t in starts.items()]
        events += [(t + RUN, "JOBOBIT", job) for job, t in starts.items()]
        self.events = sorted(events, key=lambda e: (e[0], e[1] != "RUNJOB"))
        self.lag: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        for at, event, job in self.events:
            if self.stopped.wait(max(0.0, at - time.time())):
                return
            obit = event == "JOBOBIT"
            if obit:
                self.lag.append(time.time() - at)
            pbs_object = jobobit_job(self.finished[job]) if obit else None
            run_hook(self.config, self.path, event, job, job=pbs_object)


def wait_ready(rig: FollowRig, timeout: float = 120.0) -> None:
    """The first cycle (a full listing of the held jobs) ran and was applied."""
    deadline = time.monotonic() + timeout
    while rig.redis.hget(rig.keys.meta, "cycles_ok") is None or chunks_not_applied(rig.redis):
        if time.monotonic() > deadline:
            raise SystemExit("the collector's first cycle was not applied in time")
        time.sleep(0.2)


def window_start(rig: FollowRig) -> float:
    """When the window starts: now, but no sooner than two intervals after the
    first cycle began, so that a window of 60 s holds the next reconciliation
    (every 60 s) whole, not one run to run and one not."""
    assert rig.service is not None
    plan = rig.service.collector.plan
    first = time.time() - (plan.clock() - (plan.last_reconcile or plan.clock()))
    return max(time.time() + 0.5, first + 2 * rig.interval + 1.0)


def run_level(level: str, args: argparse.Namespace, workdir: Path) -> Result:
    offsets = start_offsets(level, args)
    held = job_ids(args.held, first=1000)
    churn = job_ids(len(offsets), first=1000 + args.held)
    server = Server(workdir, held, churn)
    use_standins(server.controls["follow"])
    rig = FollowRig(workdir, SITE, interval=args.interval, nodes_every=6)
    backend: CountingPBS = standin_backend()
    hooks = None
    try:
        rig.start(backend, "pbs")
        count_refreshes(rig, backend)
        wait_ready(rig)
        t0 = window_start(rig)
        starts = {job: t0 + offset for job, offset in zip(churn, offsets)}
        server.set(starts)
        hooks = ServerHooks(hook_config(rig), workdir, starts, server.done)
        poller = Poller(server.controls["poll"], args.interval, t0 + args.seconds)
        time.sleep(max(0.0, t0 - time.time()))
        with backend.idle():
            before, sent0 = server.logs["follow"].stat().st_size, backend.sent
        hooks.start()
        poller.start()
        time.sleep(max(0.0, t0 + args.seconds - time.time()))
        with backend.idle():
            after, sent1 = server.logs["follow"].stat().st_size, backend.sent
        poller.join()
        meta = rig.wait_finals(set(starts), timeout=args.grace)
    finally:
        if hooks is not None:
            hooks.stopped.set()
        rig.stop()
    if poller.failed:
        print(f"  poll: {poller.failed} qstat calls failed", flush=True)
    ends = {job: t + RUN for job, t in starts.items()}
    poll = Side(f"`qstat -f -F json` every {args.interval:g} s", sent=poller.sent)
    follow = Side(f"`jobtap collector --backend pbs --follow --interval {args.interval:g}`",
                  sent=sent1 - sent0)  # fmt: skip
    poll.read_log(server.logs["poll"], 0, server.logs["poll"].stat().st_size)
    follow.read_log(server.logs["follow"], before, after)
    latencies = [rig.finals[j] - end for j, end in ends.items() if j in rig.finals]
    return Result(level, len(starts), poll, follow, latencies, len(ends) - len(latencies),
                  backend.batches, backend.counts, meta, hooks.lag)  # fmt: skip


# Printing --------------------------------------------------------------------------
def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def mb(n: int) -> str:
    return f"{n / 1e6:,.1f}"


def pct(values: list[float], p: float) -> str:
    return ms(percentile(values, p)) if values else "-"


def asking(result: Result) -> list[Refresh]:
    """The batches of pokes that needed the server (record-less pokes)."""
    return [b for b in result.batches if b.ids > b.given]


def one_per_batch(result: Result) -> tuple[bool, str]:
    """Whether each batch that asked the server ran one ``qstat -E`` and
    nothing else, in words."""
    batches = asking(result)
    per = Counter(b.calls[QSTAT_E] for b in batches)
    others = sum(sum(n for k, n in b.calls.items() if k != QSTAT_E) for b in batches)
    holds = set(per) <= {1} and not others
    spread = ", ".join(f"{n} qstat -E in {count}" for n, count in sorted(per.items()))
    pokes = [b.ids - b.given for b in batches]
    size = f"{sum(pokes) / len(pokes):.1f} ids a batch, at most {max(pokes)}" if pokes else "-"
    return holds, (
        f"{'holds' if holds else 'does NOT hold'}: {len(batches)} batches asked the server"
        f" ({spread or 'none'}; other commands {others}; {size});"
        f" {len(result.batches) - len(batches)} batches were records only (no command)"
    )


def describe(level: str, args: argparse.Namespace) -> str:
    return LEVELS[level].format(burst=args.burst)


def ratio(a: float, b: float) -> str:
    r = a / max(b, 1e-9)
    return f"{r:.2f} (1/{1 / r:.1f})" if r < 1 else f"{r:.2f}"


def table(results: list[Result], args: argparse.Namespace) -> str:
    lines = [
        f"| churn | jobs | `qstat -f -F json` every {args.interval:g} s: calls, server ms"
        " (records), throttle ms, MB sent | follow: calls, server ms (records), throttle ms,"
        " MB sent | follow / poll, server cost | the same, a qstat record at 51 us"
        " | follow, per batch of pokes asking qstat: qstat -E, qstat -f"
        " | end to callback p50 / p99 | finals missing |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        batches = asking(r)
        n = max(1, len(batches))
        per_batch = (
            f"{sum(b.calls[QSTAT_E] for b in batches) / n:.2f},"
            f" {sum(b.calls[LISTING] for b in batches) / n:.2f} ({len(batches)} batches)"
        )
        lines.append(
            f"| {r.level} ({describe(r.level, args)}) | {r.jobs} | {r.poll.cells()}"
            f" | {r.follow.cells()} | {ratio(r.follow.total(), r.poll.total())}"
            f" | {ratio(r.follow.total('low'), r.poll.total('low'))} | {per_batch}"
            f" | {pct(r.latencies, 50)} / {pct(r.latencies, 99)} ms | {r.missing} |"
        )
    return "\n".join(lines)


def kinds(side: Side) -> str:
    """Each kind of call: how many, server ms, records; throttle and port
    waits when there were any."""
    out = []
    for kind, n in sorted(side.calls.items(), key=lambda kv: -side.server[kv[0]]):
        extra = f", {side.records[kind]:,} records" if side.records[kind] else ""
        if side.throttled[kind]:
            extra += f"; {side.throttled[kind]} throttled, {ms(side.throttle[kind])} ms"
        if side.ports[kind]:
            extra += f"; port waits {ms(side.ports[kind])} ms"
        out.append(f"{kind} {n} ({ms(side.server[kind])} ms{extra})")
    return ", ".join(out)


def breakdown(results: list[Result], args: argparse.Namespace) -> str:
    lines = []
    for r in results:
        for side in (r.poll, r.follow):
            lines.append(f"- {r.level}, {side.name} ({args.seconds:g} s): {kinds(side)}")
        m = r.meta
        probe_reads = r.counts[QSTAT_E] - sum(b.calls[QSTAT_E] for b in r.batches)
        lines.append(
            f"  - follow: refreshes {len(r.batches)}, pokes received"
            f" {m.get('pokes_received', '0')}, probe cycles {m.get('cycles_probe', '0')},"
            f" reconciliations {m.get('cycles_reconcile', '0')}; qstat -E of cycles"
            f" {probe_reads} (whole run); jobobit hook run after the end: p50"
            f" {pct(r.hook_lag, 50)} ms, p99 {pct(r.hook_lag, 99)} ms"
        )
        lines.append(f"  - one qstat -E per batch of pokes {one_per_batch(r)[1]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m bench.pbs_churn",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--levels", nargs="+", choices=list(LEVELS), default=list(LEVELS))
    parser.add_argument("--held", type=int, default=2000, help="held jobs on the server")
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=60.0, help="the window of each level")
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--grace", type=float, default=90.0,
                        help="seconds to wait for the last finals after the window")  # fmt: skip
    args = parser.parse_args(argv)
    results = []
    for level in args.levels:
        print(f"{level}: {describe(level, args)}; load average {os.getloadavg()[0]:.2f}",
              flush=True)  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="jobtap-pbschurn-") as tmp:
            result = run_level(level, args, Path(tmp))
        print(f"  server: poll {ms(result.poll.total())} ms, follow {ms(result.follow.total())} ms"
              f" (modelled); p99 {pct(result.latencies, 99)} ms; missing {result.missing};"
              f" load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
        results.append(result)
    print()
    print(f"{args.held:,} held jobs on the stand-in server, each churn job running {RUN:g} s")
    print()
    print(table(results, args))
    print()
    print(breakdown(results, args))
    print()
    print(".venv/bin/python -m bench.pbs_churn" + (" " + shlex.join(argv) if argv else ""))
    return 0 if all(one_per_batch(r)[0] and not r.missing for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
