"""Latency from the collector's observation to the SDK callback.

    python -m bench.latency [--clients 100] [--subs 10] [--rate 2000] [--seconds 30]
                            [--sites 1] [--cluster]

Starts its own redis-server on a free port (``--cluster``: a local Redis Cluster
of three primaries and three replicas, sim/rig/cluster.py, with the sites
one to a shard).  ``--clients`` SDK clients (one per user, the users spread over
``--sites`` sites and the clients over ``--procs`` processes) each make
``--subs`` subscriptions, each to its own share of that user's jobs; a separate
process drives the real apply step (workers.apply.Applier) at ``--rate`` changed
jobs per second, in small chunks stamped with the observation time
(``observed_at``).  Each callback records ``now - observed_at``.  On the cluster
the apply step SPUBLISHes on each site's primary and the clients listen on its
replica.  Target: p99 <= 100 ms at 1,000 subscriptions, 100 clients and 2,000
events/s.

Each client process holds hundreds of clients, hence thousands of sockets:
its open-file limit is raised to the hard limit, and Redis is started with
``--maxclients 20000``.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import random
import time
from datetime import UTC, datetime

import orjson

from jobtap.contract.chunk import Chunk

SITE = "bench"
JOBS_PER_SUB = 20


def user_name(n: int) -> str:
    return f"user{n:03d}"


def job_id(user: int, n: int) -> str:
    return f"{user * 1000 + n}.pbs"


def record(user: int, n: int, comment: str = "", site: str = SITE) -> dict:
    u = user_name(user)
    return {
        "id": job_id(user, n), "site": site, "scheduler": "pbs", "user": u, "group": "g",
        "account": None, "name": f"job{n}", "queue": "workq", "state": "running",
        "native_state": "R", "reason": None, "comment": comment,
        "submit_time": "2026-11-21T14:40:20+00:00", "start_time": "2026-11-21T14:41:00+00:00",
        "end_time": None, "exit_status": None, "requested": {"ncpus": 4, "walltime": "01:00:00"},
        "allocated": ["n1/0*4"], "resources_used": {}, "array_parent": None,
        "array_index": None, "priority": 0,
        "native": {"job_state": "R", "Job_Owner": f"{u}@login1", "comment": comment},
    }  # fmt: skip


def chunk(cycle: int, items: list[dict], site: str = SITE) -> Chunk:
    return Chunk(site, cycle, datetime.now(UTC).isoformat(), "job", items)


def upsert(rec: dict) -> dict:
    return {"op": "upsert", "id": rec["id"], "fp": "fp", "state": rec["state"], "record": rec}


def site_of(user: int, sites: list[str]) -> str:
    return sites[user % len(sites)]


def populate(url: str, users: int, jobs: int, sites: list[str]) -> int:
    from jobtap.connection import open_redis
    from jobtap.workers.apply import Applier

    applier = Applier(open_redis(url))
    cycles = 0
    for site in sites:
        mine = [u for u in range(users) if site_of(u, sites) == site]
        recs = [upsert(record(u, n, site=site)) for u in mine for n in range(jobs)]
        for cycle, start in enumerate(range(0, len(recs), 500), 1):
            applier.apply(chunk(cycle, recs[start : start + 500], site))
            cycles = max(cycles, cycle)
    return cycles + 1


def raise_open_files() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def clients_proc(url, users, subs, sites, ready, go, stop, out) -> None:
    """Runs some of the clients; sends back the latencies (seconds)."""
    import jobtap

    raise_open_files()

    latencies: list[float] = []

    def on_change(change: jobtap.Change) -> None:
        if change.type == "initial":
            return
        observed = datetime.fromisoformat(change.event["observed_at"]).timestamp()
        latencies.append(time.time() - observed)

    clients = []
    for u in users:
        c = jobtap.Client(url, site=site_of(u, sites))
        for s in range(subs):
            ids = [job_id(u, s * JOBS_PER_SUB + n) for n in range(JOBS_PER_SUB)]
            c.subscribe(on_change, jobs=ids)
        clients.append(c)
    # What the setup made is frozen out of the collector's scans, as a long-lived
    # service does after its start (the workers' tune_gc): a process of 500
    # clients holds about 430,000 objects, and a full collection of them stalls
    # it 0.25-0.4 s, inside the measured run or not depending on how much garbage
    # the setup happened to leave (it moved inside when subscriptions stopped
    # reading native records, and p99 went from 8 ms to 100-180 ms).
    gc.collect()
    gc.freeze()
    ready.put(len(clients))
    go.wait()
    stop.wait()
    time.sleep(1.0)  # let the last events arrive
    out.put(latencies)
    for c in clients:
        c.close()


def driver_proc(url, users, jobs, sites, rate, seconds, start_cycle, go, stop, out) -> None:
    """Applies ``rate`` changed jobs per second in chunks every 10 ms (one chunk
    per site)."""
    from jobtap.connection import open_redis
    from jobtap.workers.apply import Applier

    applier = Applier(open_redis(url))
    go.wait()
    per_tick = max(1, round(rate / 100))
    tick = per_tick / rate
    cycle = start_cycle
    sent = 0
    seq = 0
    started = time.perf_counter()
    next_at = started
    rng = random.Random(1)
    while time.perf_counter() - started < seconds:
        seq += 1
        picks = rng.sample(range(users * jobs), per_tick)
        cycle += 1
        for site in sites:
            items = [
                upsert(record(p // jobs, p % jobs, comment=f"c{seq}", site=site))
                for p in picks
                if site_of(p // jobs, sites) == site
            ]
            if items:
                sent += applier.apply(chunk(cycle, items, site))["events"]
        next_at += tick
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.perf_counter() - started
    stop.set()
    out.put((sent, elapsed))


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--subs", type=int, default=10, help="subscriptions per client")
    ap.add_argument("--rate", type=int, default=2000, help="changed jobs per second")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--procs", type=int, default=2, help="processes for the clients")
    ap.add_argument("--sites", type=int, default=1, help="sites the users are spread over")
    ap.add_argument("--cluster", action="store_true", help="a local Redis Cluster (3+3)")
    ap.add_argument(
        "--subscribe-on",
        choices=("replica", "primary"),
        default="replica",
        help="cluster: the nodes the clients listen on (JOBTAP_SUBSCRIBE_ON)",
    )
    args = ap.parse_args(argv)
    os.environ["JOBTAP_SUBSCRIBE_ON"] = args.subscribe_on  # the client processes inherit it

    from jobtap.sim.localredis import RedisServer

    os.environ["JOBTAP_CREDENTIALS"] = os.devnull + ".none"  # no credential file here
    raise_open_files()  # the servers inherit it
    if args.cluster:
        import tempfile
        from pathlib import Path

        from sim.rig.cluster import LocalCluster

        workdir = Path(tempfile.mkdtemp(prefix="jobtap-bench-cluster-"))
        server = LocalCluster(workdir, node_args=["--maxclients", "20000"]).start()
        sites = server.spread_sites(args.sites)
    else:
        server = RedisServer(args=["--maxclients", "20000"]).start()
        sites = [SITE] if args.sites == 1 else [f"{SITE}{i}" for i in range(args.sites)]
    ctx = mp.get_context("spawn")
    try:
        jobs = args.subs * JOBS_PER_SUB
        t0 = time.perf_counter()
        cycles = populate(server.url, args.clients, jobs, sites)
        print(f"populated {args.clients * jobs} jobs in {time.perf_counter() - t0:.1f} s")
        ready, results, driver_out = ctx.Queue(), ctx.Queue(), ctx.Queue()
        go, stop = ctx.Event(), ctx.Event()
        users = list(range(args.clients))
        groups = [users[i :: args.procs] for i in range(args.procs)]
        procs = [
            ctx.Process(
                target=clients_proc,
                args=(server.url, g, args.subs, sites, ready, go, stop, results),
            )
            for g in groups
        ]
        driver = ctx.Process(
            target=driver_proc,
            args=(server.url, args.clients, jobs, sites, args.rate, args.seconds, cycles, go,
                  stop, driver_out),
        )  # fmt: skip
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        driver.start()
        n_clients = sum(ready.get(timeout=300) for _ in procs)
        ready_s = time.perf_counter() - t0
        print(
            f"{n_clients} clients, {n_clients * args.subs} subscriptions ready in "
            f"{ready_s:.1f} s; driving {args.rate} events/s for {args.seconds:g} s"
        )
        go.set()
        sent, elapsed = driver_out.get(timeout=args.seconds + 120)
        latencies = [x for _ in procs for x in results.get(timeout=120)]
        for p in [*procs, driver]:
            p.join(30)
    finally:
        server.stop()
    ms = [x * 1000 for x in latencies]
    figures = {
        "setup": f"{'cluster' if args.cluster else 'one Redis'}, {len(sites)} site(s)"
        + (f", subscribers on the {args.subscribe_on}s" if args.cluster else ""),
        "ready_s": ready_s,
        "clients": n_clients,
        "subscriptions": n_clients * args.subs,
        "events_sent": sent,
        "rate": sent / elapsed,
        "callbacks": len(ms),
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms) if ms else float("nan"),
    }
    print(
        f"sent {sent} events in {elapsed:.1f} s ({figures['rate']:.0f}/s); "
        f"{len(ms)} callbacks" + ("" if len(ms) == sent else f" (expected {sent}: MISMATCH)")
    )
    print(
        f"latency observation -> callback: p50 {figures['p50_ms']:.1f} ms, "
        f"p90 {figures['p90_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms, "
        f"max {figures['max_ms']:.1f} ms  (target p99 <= 100 ms)"
    )
    print(orjson.dumps(figures).decode())
    return figures


if __name__ == "__main__":
    main()
