"""How many changed jobs one worker applies per second into one Redis.

    python -m bench.apply [--jobs 20000] [--chunk 500] [--rounds 3]

Starts its own redis-server on a free port.  Round 1 applies ``--jobs`` new jobs;
each later round changes every one of them (a state change and new
resources_used), so every item is a real diff with an event.  Measured twice:
the apply function called directly (the worker's own cost), and through rq
(collector's enqueue_many + one SimpleWorker in burst mode), which is what a
site runs.  Target: >= 10,000 changed jobs/s.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import time
from pathlib import Path

import orjson

from jobtap.cli.localredis import RedisServer
from jobtap.collector.backends.pbs import normalise_job
from jobtap.collector.ship import Shipper, chunked
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier
from jobtap.workers.chunk import Chunk
from jobtap.workers.service import run_worker, tune_gc

SITE = "bench"
FIXTURE = Path(__file__).resolve().parents[2] / "shared/fixtures/pbs/bench-5000.qstat-f.json.gz"


def sample_natives(n: int) -> list[tuple[str, dict]]:
    """``n`` real PBS job records (the 5,000-job fixture, repeated with new ids)."""
    if FIXTURE.exists():
        jobs = list(orjson.loads(gzip.open(FIXTURE).read())["Jobs"].values())
    else:  # a checkout without ../shared: one record of the same shape
        jobs = [
            {
                "Job_Name": "bench",
                "Job_Owner": "alice@vm",
                "job_state": "H",
                "queue": "workq",
                "ctime": "Sat Nov 21 14:44:42 2026",
                "Resource_List": {"ncpus": 1},
            }
        ]
    users = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
    out = []
    for i in range(n):
        native = copy.deepcopy(jobs[i % len(jobs)])
        native["Job_Owner"] = f"{users[i % len(users)]}@vm"
        out.append((f"{i}.vm", native))
    return out


def records_for_round(natives, rnd: int) -> list[dict]:
    items = []
    for jid, native in natives:
        if rnd > 0:
            native["job_state"] = "R" if rnd % 2 else "Q"
            native["resources_used"] = {"walltime": f"00:00:{rnd:02d}", "cput": rnd}
        rec = normalise_job(jid, native, tz="UTC")
        rec["site"] = SITE
        items.append(
            {"op": "upsert", "id": jid, "fp": f"fp{rnd}", "state": rec["state"], "record": rec}
        )
    return items


def bench_direct(r, natives, chunk: int, rounds: int) -> list[float]:
    applier = Applier(r)
    rates = []
    for rnd in range(rounds):
        items = records_for_round(natives, rnd)
        payloads = [
            Chunk(SITE, rnd + 1, "2026-11-21T15:00:00+00:00", "job", list(part)).encode()
            for part in chunked(items, chunk)
        ]
        t0 = time.perf_counter()
        for p in payloads:
            applier.apply(Chunk.decode(p))
        rates.append(len(items) / (time.perf_counter() - t0))
    return rates


def bench_rq(r, natives, chunk: int, rounds: int, first_cycle: int) -> list[float]:
    shipper = Shipper(r, SiteKeys(SITE), chunk_size=chunk)
    rates = []
    for rnd in range(rounds):
        items = records_for_round(natives, rnd + first_cycle)
        shipper.ship(first_cycle + rnd + 1, "2026-11-21T15:00:00+00:00", {("state", "job"): items})
        t0 = time.perf_counter()
        run_worker(r, r, SITE, burst=True)
        rates.append(len(items) / (time.perf_counter() - t0))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    server = RedisServer().start()
    try:
        r = server.client()
        natives = sample_natives(args.jobs)
        tune_gc()  # what `jobtap worker` does at start; also keeps the bench's own data out of GC
        direct = bench_direct(r, natives, args.chunk, args.rounds)
        via_rq = bench_rq(r, natives, args.chunk, args.rounds, first_cycle=args.rounds)
        print(f"jobs per round: {args.jobs}, chunk size: {args.chunk}, redis-server on one core")
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
