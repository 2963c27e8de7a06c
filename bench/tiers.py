"""What the collector's tiers cost at scale: probe + targeted stat against the
full stat, on the simulated PBS cluster.

    python -m bench.tiers --jobs 100000 [--changed 0.01] [--intervals 11]

The simulation holds ``--jobs`` live jobs.  A real collector (``Collector``,
``SimBackend(measure=True)``, a local redis-server) runs its first cycle, the
full reconciliation, then one cycle per ``--interval`` simulated seconds while
``--changed`` of the jobs change in each interval (spread over it: usage
updates, holds, releases, and whatever the simulation does on its own).  Each
stat costs what the real command prints: ``qselect`` lines and ``qstat -F json``
documents are rendered as bytes, counted, and parsed back by the PBS backend's
own parsers, so the collector's CPU includes the parsing.  The time the
simulation spends rendering (the server's work) is left out of the collector's
CPU.

Per probe interval it prints the bytes stat'ed (probe + targeted stat) and the
commands a real server would answer, against one full ``qstat -f -F json``;
and the collector's CPU for the whole cycle (probe, parse, fingerprint,
normalise, ship) against a bare ``orjson.loads`` of one full stat.  Targets at
100k jobs and 1% changed: >= 50x fewer bytes, CPU <= 0.5x the loads.  The
average over a whole reconciliation period (the probe intervals plus one full
stat every ``--reconcile-every`` seconds) is printed too.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench.cycle import bare_loads
from jobtap.collector.cycle import Collector
from jobtap.collector.plan import PROBE, RECONCILE
from jobtap.sim import SimBackend, Simulation
from jobtap.sim.localredis import RedisServer

SITE = "bench-tiers"


def measured_cycle(col: Collector, backend: SimBackend, tier: str | None = None):
    """One cycle (of ``tier``, default the plan's); its report and the
    collector's own CPU seconds (the process's CPU time minus what the
    simulation spent rendering the server's output)."""
    render0, cpu0 = backend.render_seconds, time.process_time()
    report = col.run_cycle(with_nodes=False, tier=tier)
    cpu = time.process_time() - cpu0 - (backend.render_seconds - render0)
    return report, cpu


def spread_changes(sim: Simulation, fraction: float, seconds: float, rng: random.Random) -> int:
    """Let ``seconds`` pass in one-second steps, ``fraction`` of the jobs
    changing over them; the number of jobs that changed."""
    steps = max(1, round(seconds))
    changed: set[str] = set()
    for _ in range(steps):
        changed |= sim.mutate_fraction(fraction / steps, rng, step=seconds / steps)
    return len(changed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--changed", type=float, default=0.01)
    ap.add_argument("--interval", type=float, default=5.0, help="simulated seconds")
    ap.add_argument("--reconcile-every", type=float, default=60.0, help="simulated seconds")
    ap.add_argument("--intervals", type=int, default=11, help="probe intervals measured")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    t0 = time.perf_counter()
    sim = Simulation.bench(jobs=args.jobs, seed=args.seed)
    print(f"simulation of {sim.live_count:,} jobs built in {time.perf_counter() - t0:.1f}s")
    backend = SimBackend(simulation=sim, tick=0, measure=True)
    server = RedisServer().start()
    rng = random.Random(args.seed)
    try:
        r = server.client()
        col = Collector(
            backend,
            r,
            site=SITE,
            nodes_every=10**9,
            reconcile_every=args.reconcile_every,
            max_targeted=args.jobs,
            clock=lambda: sim.now,
        )
        sim.advance(10)  # the warm start stamps every job at one second: let it age
        first, _ = measured_cycle(col, backend)
        assert first.tier == RECONCILE
        full_bytes = first.costs["stat"][1]
        print(
            f"first cycle (reconciliation): {first.counts['jobs']:,} jobs,"
            f" {full_bytes / 1e6:.0f} MB stat'ed, {first.duration:.2f}s"
        )
        r.flushdb()  # the queued chunks are not part of the measurement
        rows = []
        while len(rows) < args.intervals:
            truly = spread_changes(sim, args.changed, args.interval, rng)
            report, cpu = measured_cycle(col, backend)
            r.flushdb()
            if report.tier != PROBE:
                print(f"(a {report.tier} cycle ran: the period ended; not counted)")
                continue
            spent = [sum(c[i] for c in report.costs.values()) for i in (0, 1)]
            rows.append((truly, report, cpu, spent))
        raw = sim.qstat_json()
        loads = bare_loads(raw)
        full_bytes = len(raw)
        spread_changes(sim, args.changed, args.interval, rng)
        full_report, full_cpu = measured_cycle(col, backend, RECONCILE)  # what one costs now
        r.flushdb()
        print_table(rows, full_bytes, loads, full_report, full_cpu, args)
    finally:
        server.stop()


def print_table(rows, full_bytes, loads, full_report, full_cpu, args) -> None:
    print(
        f"\n{'interval':>8} {'changed':>8} {'named':>7} {'stat':>7} {'commands':>9}"
        f" {'bytes':>10} {'x fewer':>8} {'cpu ms':>8} {'x loads':>8}"
    )
    ratios, cpus = [], []
    for i, (truly, rep, cpu, (commands, size)) in enumerate(rows, 1):
        fewer = full_bytes / max(1, size)
        ratios.append(fewer)
        cpus.append(cpu)
        print(
            f"{i:>8} {truly:>8,} {rep.counts['probe_named']:>7,}"
            f" {rep.counts.get('targeted_found', 0):>7,} {commands:>9}"
            f" {size:>10,} {fewer:>7.0f}x {cpu * 1000:>8.1f} {cpu / loads:>7.3f}x"
        )
    full_cycle_bytes = sum(c[1] for c in full_report.costs.values())
    print(
        f"\none full qstat -f -F json: {full_bytes / 1e6:.1f} MB; orjson.loads of it"
        f" {loads * 1000:.0f} ms; the full reconciliation cycle {full_cpu * 1000:.0f} ms CPU"
        f" ({full_cpu / loads:.2f}x the loads), {full_cycle_bytes / 1e6:.1f} MB"
    )
    per_period = round(args.reconcile_every / args.interval)
    probe_bytes = statistics.mean(size for *_, (_, size) in rows)
    avg_bytes = ((per_period - 1) * probe_bytes + full_cycle_bytes) / per_period
    avg_cpu = ((per_period - 1) * statistics.mean(cpus) + full_cpu) / per_period
    print(
        f"per probe interval (median): {statistics.median(ratios):.0f}x fewer bytes"
        f" (target >= 50x), collector CPU {statistics.median(cpus) / loads:.3f}x an"
        f" orjson.loads of one full stat (target <= 0.5x)"
    )
    print(
        f"averaged over a {args.reconcile_every:g}s period ({per_period - 1} probes + 1 full"
        f" stat): {full_bytes / avg_bytes:.1f}x fewer bytes, CPU {avg_cpu / loads:.3f}x"
        f" the loads per interval"
    )


if __name__ == "__main__":
    main()
