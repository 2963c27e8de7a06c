"""Aggregate changed jobs applied per second by a pool of workers serving
several sites: on one Redis, on a Redis Cluster with every site on one shard,
and on the cluster with the sites spread over three shards.

    python -m bench.cluster_apply [--sites 3] [--jobs 10000] [--workers 3] [--rounds 2]

Starts its own servers on free loopback ports: a plain redis-server for the
rq queues (and, in the first setup, the data), and a local Redis Cluster of
three primaries and three replicas (sim/rig/cluster.py).  Each setup:
``--sites`` sites of ``--jobs`` real PBS records each (bench/apply.py) are
applied once as new jobs, then ``--rounds`` times as changed jobs (a state
change and new resources_used: every item a diff with an event).  A changed
round ships every site's chunks through rq, then ``--workers`` worker
processes (``run_worker`` serving every site, in burst mode) apply them; the
figure is all the sites' jobs divided by the time from the go to the last
worker done.  On a cluster each chunk also waits for a replica (WAIT 1).

On a machine with two cores the three shards share those two cores with the
workers: the cluster cannot show its scaling here, only its cost.  The point of
three shards is three Redis threads on three machines (or cores).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

from bench.apply import records_for_round, sample_natives
from jobtap.collector.ship import Shipper
from jobtap.connection import open_redis
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from sim.rig.cluster import LocalCluster, flush


def worker_proc(data_url: str, queue_url: str, sites: list[str], ready, go, done) -> None:
    import redis

    from jobtap.workers.service import run_worker

    logging.basicConfig(level=logging.WARNING)
    data, queues = open_redis(data_url), redis.Redis.from_url(queue_url)
    data.ping()
    ready.put(True)
    go.wait()
    run_worker(queues, data, sites, burst=True)
    done.put(time.perf_counter())


def apply_round(data_url, queue_url, queues, sites, natives, rnd, workers) -> float:
    """Ship round ``rnd`` of every site, then let the pool apply it; jobs/s."""
    for site in sites:
        items = records_for_round(natives, rnd, site)
        Shipper(queues, SiteKeys(site), chunk_size=1000).ship(
            rnd + 1, "2026-11-21T15:00:00+00:00", {("state", "job"): items}
        )
    ctx = mp.get_context("spawn")
    ready, go, done = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=worker_proc, args=(data_url, queue_url, sites, ready, go, done))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:  # imported and connected before the go: not measured
        ready.get(timeout=120)
    started = time.perf_counter()
    go.set()
    ends = [done.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(30)
    return len(sites) * len(natives) / (max(ends) - started)


def measure(label, data_url, queue_url, queues, sites, natives, args) -> dict:
    rates = [
        apply_round(data_url, queue_url, queues, sites, natives, rnd, args.workers)
        for rnd in range(args.rounds + 1)
    ]
    changed = rates[1:]
    figure = {"setup": label, "new": rates[0], "changed": sum(changed) / len(changed)}
    print(f"{label:<34} new jobs {rates[0]:>9,.0f}/s   changed jobs {figure['changed']:>9,.0f}/s",
          flush=True)  # fmt: skip
    return figure


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs per site")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of changed jobs")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    natives = sample_natives(args.jobs)
    queue_server = RedisServer().start()
    plain = RedisServer().start()
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="jobtap-bench-cluster-")))
    figures = []
    try:
        cluster.start()
        queues = queue_server.client()
        names = [f"plain{i}" for i in range(args.sites)]
        figures.append(measure("one Redis", plain.url, queue_server.url, queues, names,
                               natives, args))  # fmt: skip
        plain.stop()
        one_shard = cluster.shard_sites(args.sites)[: args.sites]
        figures.append(measure("cluster, every site on one shard", cluster.url,
                               queue_server.url, queues, one_shard, natives, args))  # fmt: skip
        flush(cluster)
        spread = cluster.spread_sites(args.sites)
        figures.append(measure("cluster, sites over three shards", cluster.url,
                               queue_server.url, queues, spread, natives, args))  # fmt: skip
    finally:
        cluster.stop()
        plain.stop()
        queue_server.stop()
    base = figures[0]["changed"]
    print(f"{args.sites} sites x {args.jobs:,} jobs, {args.workers} worker processes, "
          f"chunks of 1,000")  # fmt: skip
    for f in figures:
        print(f"  {f['setup']:<34} {f['changed']:>9,.0f} changed jobs/s  "
              f"({f['changed'] / base:.2f}x one Redis)")  # fmt: skip
    return figures


if __name__ == "__main__":
    main()
