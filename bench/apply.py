"""How many changed jobs one worker applies per second into one Redis.

    python -m bench.apply [--jobs 20000] [--chunk 500] [--rounds 3] [--metrics | --compare]

Starts its own redis-server on a free port.  Round 1 applies ``--jobs`` new jobs;
each later round changes every one of them (a state change and new
resources_used), so every item is a real diff with an event.  Measured twice:
the apply function called directly (the worker's own cost), and through rq
(collector's enqueue_many + one SimpleWorker in burst mode), which is what a
site runs.  Target: >= 10,000 changed jobs/s.

``--metrics``: the worker counts every chunk in its Prometheus series, as
``jobtap worker --metrics-port`` does.  ``--compare``: rounds of changes applied
directly, alternately without and with metrics, on the same Redis; prints the
median rate of each and their ratio (target: metrics cost under 5%).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import statistics
import time

import orjson

from jobtap.cli.localredis import RedisServer
from jobtap.collector.backends.pbs import normalise_job
from jobtap.collector.ship import Shipper, chunked
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier
from jobtap.workers.chunk import Chunk
from jobtap.workers.metrics import WorkerMetrics, note_in_meta
from jobtap.workers.service import run_worker, tune_gc
from tests.support.paths import fixtures_dir

SITE = "bench"
FIXTURE = fixtures_dir() / "pbs" / "bench-5000.qstat-f.json.gz"


def sample_natives(n: int) -> list[tuple[str, dict]]:
    """``n`` real PBS job records (the 5,000-job fixture, repeated with new ids)."""
    jobs = list(orjson.loads(gzip.open(FIXTURE).read())["Jobs"].values())
    users = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
    out = []
    for i in range(n):
        native = copy.deepcopy(jobs[i % len(jobs)])
        native["Job_Owner"] = f"{users[i % len(users)]}@vm"
        out.append((f"{i}.vm", native))
    return out


def records_for_round(natives, rnd: int, site: str = SITE) -> list[dict]:
    items = []
    for jid, native in natives:
        if rnd > 0:
            native["job_state"] = "R" if rnd % 2 else "Q"
            native["resources_used"] = {"walltime": f"00:00:{rnd:02d}", "cput": rnd}
        rec = normalise_job(jid, native, tz="UTC")
        rec["site"] = site
        items.append(
            {"op": "upsert", "id": jid, "fp": f"fp{rnd}", "state": rec["state"], "record": rec}
        )
    return items


def apply_round(applier: Applier, natives, chunk: int, rnd: int) -> tuple[float, float]:
    """Apply round ``rnd`` (cycle ``rnd + 1``) directly; return objects per second
    of wall time and of this process's CPU time."""
    items = records_for_round(natives, rnd)
    payloads = [
        Chunk(SITE, rnd + 1, "2026-11-21T15:00:00+00:00", "job", list(part)).encode()
        for part in chunked(items, chunk)
    ]
    t0, c0 = time.perf_counter(), time.process_time()
    for p in payloads:
        applier.apply(Chunk.decode(p))
    return len(items) / (time.perf_counter() - t0), len(items) / (time.process_time() - c0)


def bench_direct(r, natives, chunk: int, rounds: int, metrics: bool) -> list[float]:
    applier = Applier(r, metrics=WorkerMetrics() if metrics else None)
    return [apply_round(applier, natives, chunk, rnd)[0] for rnd in range(rounds)]


def hook_costs(r, chunk: int, calls: int = 2_000) -> tuple[float, float]:
    """Seconds one chunk's metrics take (``WorkerMetrics.chunk_applied``), and
    its counts in ``meta`` (``note_in_meta``, one round trip, metrics or not)."""
    metrics = WorkerMetrics()
    totals = {"events": chunk, "skipped": 0, "objects": chunk, "conflicts": 0, "state": chunk}
    t0 = time.perf_counter()
    for _ in range(calls):
        metrics.chunk_applied(SITE, "job", totals, 0.05, 0.5)
    t1 = time.perf_counter()
    for _ in range(calls):
        note_in_meta(r, SiteKeys(SITE), totals, "2026-11-21T15:00:00+00:00", 0.5)
    return (t1 - t0) / calls, (time.perf_counter() - t1) / calls


def compare(r, natives, chunk: int, pairs: int) -> None:
    """Rounds without and with metrics in ABBA order (after a first round of new
    jobs), timed by the wall clock and by this process's CPU time (what the
    metrics add to; steadier on a shared machine)."""
    off, on = Applier(r), Applier(r, metrics=WorkerMetrics())
    apply_round(off, natives, chunk, 0)
    rates: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for i in range(2 * pairs):
        which = ("off", "on")[i % 2] if (i // 2) % 2 == 0 else ("on", "off")[i % 2]
        rates[which].append(apply_round(off if which == "off" else on, natives, chunk, i + 1))
    print(f"jobs per round: {len(natives)}, chunk size: {chunk}, {pairs} rounds each (ABBA)")
    med = {}
    for k in ("off", "on"):
        wall = [w for w, _ in rates[k]]
        cpu = [c for _, c in rates[k]]
        med[k] = (statistics.median(wall), statistics.median(cpu))
        print(f"metrics {k:<3}  changed jobs/s: " + " ".join(f"{x:,.0f}" for x in wall)
              + f"   median {med[k][0]:,.0f}; per CPU second: median {med[k][1]:,.0f}")  # fmt: skip
    for i, what in enumerate(("wall clock", "CPU time")):
        ratio = med["on"][i] / med["off"][i]
        print(f"metrics on / off ({what}, median): {ratio:.3f}x (cost {100 * (1 - ratio):+.1f}%)")
    per_chunk, in_meta = hook_costs(r, chunk)
    wall_per_chunk = chunk / med["off"][0]
    print(
        f"the metrics of one chunk: {per_chunk * 1e6:.1f} us, "
        f"{100 * per_chunk / wall_per_chunk:.3f}% of applying it; its counts in meta (with "
        f"or without metrics): {in_meta * 1e6:.0f} us, {100 * in_meta / wall_per_chunk:.2f}%"
    )


def bench_rq(r, natives, chunk: int, rounds: int, first_cycle: int, metrics: bool) -> list[float]:
    shipper = Shipper(r, SiteKeys(SITE), chunk_size=chunk)
    rates = []
    for rnd in range(rounds):
        items = records_for_round(natives, rnd + first_cycle)
        shipper.ship(first_cycle + rnd + 1, "2026-11-21T15:00:00+00:00", {("state", "job"): items})
        t0 = time.perf_counter()
        run_worker(r, r, SITE, burst=True, metrics=WorkerMetrics() if metrics else None)
        rates.append(len(items) / (time.perf_counter() - t0))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--metrics", action="store_true", help="count in Prometheus series")
    ap.add_argument("--compare", action="store_true", help="metrics off and on, alternated")
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    server = RedisServer().start()
    try:
        r = server.client()
        natives = sample_natives(args.jobs)
        tune_gc()  # what `jobtap worker` does at start; also keeps the bench's own data out of GC
        if args.compare:
            compare(r, natives, args.chunk, max(3, args.rounds))
            return
        direct = bench_direct(r, natives, args.chunk, args.rounds, args.metrics)
        via_rq = bench_rq(r, natives, args.chunk, args.rounds, args.rounds, args.metrics)
        print(f"jobs per round: {args.jobs}, chunk size: {args.chunk}, redis-server on one core,"
              f" metrics {'on' if args.metrics else 'off'}")  # fmt: skip
        print("round  kind                     direct apply/s   through rq/s")
        for i, (d, q) in enumerate(zip(direct, via_rq)):
            kind = "new jobs" if i == 0 else "state+usage changes"
            print(f"{i + 1:>5}  {kind:<24} {d:>14,.0f} {q:>14,.0f}")
        changed = direct[1:] or direct
        direct_mean = sum(changed) / len(changed)
        rq_mean = sum(via_rq) / len(via_rq)
        print(f"changed jobs/s (direct, mean of changed rounds): {direct_mean:,.0f}")
        print(f"changed jobs/s (through rq, mean):               {rq_mean:,.0f}")
        print(f"ratio to the 10,000/s target (through rq):       {rq_mean / 10_000:.2f}x")
        print(f"events in the site stream: {r.xlen(SiteKeys(SITE).events):,}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
