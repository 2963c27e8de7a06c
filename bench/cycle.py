"""What one collector cycle costs at scale, stage by stage.

    python -m bench.cycle --jobs 100000 [--changed 0.01] [--cycles 3] [--metrics | --compare]

The simulated cluster (collector/sim.py) renders ``--jobs`` jobs as the exact
document ``qstat -f -F json`` prints.  After a first cycle has shipped them all,
each measured cycle lets the simulation change ``--changed`` of its jobs
(its own state changes and usage updates), renders the document again and runs a
real collector cycle on those bytes against a local redis-server: parse
(orjson + checks), fingerprint, normalise the changed, history look-up of the
vanished, ship (enqueue_many into rq).  The whole cycle is compared with a bare
``orjson.loads`` of the same bytes.  Target: <= 2x at 100k jobs and 1% changed.

``--metrics``: each cycle is also counted in the collector's Prometheus series
(what ``jobtap collector --metrics-port`` does after a cycle), and the whole
cycle includes that.  ``--compare``: cycles alternately without and with
metrics; prints the median of each and their ratio (target: under 5%).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

import orjson

from jobtap.collector.backends.base import PokedReads
from jobtap.collector.backends.pbs import normalise_job, parse_qstat_jobs
from jobtap.collector.cycle import Collector, CycleReport
from jobtap.collector.metrics import CollectorMetrics
from jobtap.sim import Simulation
from jobtap.sim.localredis import RedisServer

SITE = "bench"


class ReplayBackend:
    """The PBS parser and normaliser over bytes the simulation rendered."""

    scheduler = "pbs"

    def __init__(self, sim: Simulation):
        self.sim = sim
        self.raw = b""

    def poked_reads(self):
        return PokedReads()

    def stat_jobs(self):
        return parse_qstat_jobs(self.raw)

    def stat_nodes(self):
        return {}

    def stat_queues(self):
        return {}

    def history(self, job_ids):
        return self.sim.history_jobs(list(job_ids))

    def normalise_job(self, job_id, native):
        return normalise_job(job_id, native, scheduler="pbs", tz="UTC")

    def normalise_node(self, name, native):  # not used: nodes are not stat'ed here
        raise NotImplementedError

    normalise_queue = normalise_node


def bare_loads(raw: bytes, repeat: int = 3, *, pause_gc: bool = False) -> float:
    """Best of ``repeat`` plain ``orjson.loads(raw)``."""
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        if pause_gc:
            gc.disable()
        t0 = time.perf_counter()
        orjson.loads(raw)
        best = min(best, time.perf_counter() - t0)
        gc.enable()
    return best


def counted_cycle(col: Collector, metrics: CollectorMetrics | None) -> CycleReport:
    """One cycle; with ``metrics``, counted the way the service counts it, and the
    counting is part of the cycle's time (as a stage of its own)."""
    rep = col.run_cycle(with_nodes=False)
    if metrics is not None:
        t0 = time.perf_counter()
        metrics.cycle_done(rep, rep.duration)
        rep.timings["metrics"] = time.perf_counter() - t0
    return rep


def compare(sim, backend, col, r, args) -> None:
    """Cycles without and with metrics in ABBA order on the same simulation, timed
    by the wall clock and by this process's CPU time (steadier on a shared machine)."""
    rng = random.Random(args.seed)
    metrics = CollectorMetrics(SITE)
    times: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for i in range(2 * max(3, args.cycles)):
        which = ("off", "on")[i % 2] if (i // 2) % 2 == 0 else ("on", "off")[i % 2]
        sim.mutate_fraction(args.changed, rng)
        backend.raw = sim.qstat_json()
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        counted_cycle(col, metrics if which == "on" else None)
        times[which].append((time.perf_counter() - t0, time.process_time() - c0))
        r.flushdb()
    med = {}
    for k in ("off", "on"):
        wall = [w for w, _ in times[k]]
        med[k] = (statistics.median(wall), statistics.median(c for _, c in times[k]))
        print(f"metrics {k:<3}  whole cycle: " + " ".join(f"{x * 1000:.0f}ms" for x in wall)
              + f"   median {med[k][0] * 1000:.0f}ms, CPU {med[k][1] * 1000:.0f}ms")  # fmt: skip
    for i, what in enumerate(("wall clock", "CPU time")):
        ratio = med["on"][i] / med["off"][i]
        print(f"metrics on / off ({what}, median): {ratio:.3f}x (cost {100 * (ratio - 1):+.1f}%)")
    rep = counted_cycle(col, metrics)
    print(f"the metrics of one cycle: {rep.timings['metrics'] * 1e6:.0f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--changed", type=float, default=0.01)
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--metrics", action="store_true", help="count cycles in Prometheus series")
    ap.add_argument("--compare", action="store_true", help="metrics off and on, alternated")
    args = ap.parse_args()

    t0 = time.perf_counter()
    sim = Simulation.bench(jobs=args.jobs, seed=args.seed)
    print(
        f"simulation of {sim.live_count:,} jobs on {sim.node_count:,} nodes built in "
        f"{time.perf_counter() - t0:.1f}s"
    )
    backend = ReplayBackend(sim)
    server = RedisServer().start()
    try:
        r = server.client()
        col = Collector(backend, r, site=SITE, nodes_every=10**9)
        backend.raw = sim.qstat_json()
        first = col.run_cycle(with_nodes=False)
        shipped = first.counts.get("changed", 0)
        chunks = first.counts.get("chunks", 0)
        print(f"first cycle shipped {shipped:,} jobs in {first.duration:.2f}s ({chunks} chunks)")
        r.flushdb()  # the queued chunks are not part of the measurement
        if args.compare:
            compare(sim, backend, col, r, args)
            return
        metrics = CollectorMetrics(SITE) if args.metrics else None
        rng = random.Random(args.seed)
        rows = []
        for _ in range(args.cycles):
            sim.mutate_fraction(args.changed, rng)
            backend.raw = sim.qstat_json()
            loads = bare_loads(backend.raw)
            loads_nogc = bare_loads(backend.raw, pause_gc=True)
            gc.collect()
            rep = counted_cycle(col, metrics)
            rows.append((len(backend.raw), loads, rep, loads_nogc))
            r.flushdb()
        print(
            f"\n{'stage':<12}" + "".join(f"{'cycle ' + str(i + 1):>12}" for i in range(len(rows)))
        )
        stages = ["stat", "fingerprint", "normalise", "history", "ship"]
        stages += ["metrics"] if metrics is not None else []
        names = {"stat": "parse", "history": "history"}
        for st in stages:
            vals = [rep.timings.get(st, 0.0) for _, _, rep, _ in rows]
            print(f"{names.get(st, st):<12}" + "".join(f"{v * 1000:>10.1f}ms" for v in vals))
        line = "".join(f"{rep.duration * 1000:>10.1f}ms" for _, _, rep, _ in rows)
        print(f"{'whole cycle':<12}{line}")
        line = "".join(f"{lo * 1000:>10.1f}ms" for _, lo, _, _ in rows)
        print(f"{'orjson.loads':<12}{line}")
        ratios = [rep.duration / lo for _, lo, rep, _ in rows]
        print(f"{'ratio':<12}" + "".join(f"{x:>11.2f}x" for x in ratios))
        line = "".join(f"{lo * 1000:>10.1f}ms" for *_, lo in rows)
        print(f"\norjson.loads with the garbage collector paused, for reference:\n{'':<12}{line}")
        strict = [rep.duration / lo for _, _, rep, lo in rows]
        print(f"{'ratio':<12}" + "".join(f"{x:>11.2f}x" for x in strict))
        changed = [rep.counts.get("changed", 0) for _, _, rep, _ in rows]
        vanished = [rep.counts.get("vanished", 0) for _, _, rep, _ in rows]
        print(
            f"\nstat output {rows[-1][0] / 1e6:.0f} MB; changed per cycle {changed};"
            f" vanished {vanished}"
        )
        print(
            f"median ratio whole cycle / orjson.loads: {statistics.median(ratios):.2f}x"
            f" (target <= 2x); against the GC-paused loads: {statistics.median(strict):.2f}x"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
