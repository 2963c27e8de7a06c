"""A slow subscriber beside a normal one, under a burst of the simulated site.

    python -m bench.slow_subscriber [--seconds 20] [--step 120] [--delay 0.02] [--wait 120]

Issue 28.  Its own redis-server with ``client-output-buffer-limit pubsub 4mb 1mb
5``; the simulated PBS site (``jobtap.sim``) read by a real collector cycle and
applied by a real rq worker (burst) each cycle, each cycle letting ``--step``
simulated seconds pass, one cycle every ``--interval`` s (when the machine keeps
up) for ``--seconds``: both runs get the same burst at the same pace.  Two subscriber
processes subscribe to every job of the site: a normal one and a slow one (a
``--delay`` s callback).  It runs twice with the same seed: "before" (clients
with ``max_lag=None``: every missed event replayed, as before the bound) and
"after" (the default bound).  Per subscriber it prints the finals it had when
the load stopped (of those the site stream holds), the time after that until it
had every one, its peak RSS, the peak length of its queue, its resyncs (by
state) and the callbacks run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import resource
import time
from typing import Any

SITE = "slowsub"


def subscriber(url: str, delay: float, max_lag: float | None, conn: Any) -> None:
    import jobtap

    finals: dict[str, float] = {}
    calls = 0

    def on_change(change: jobtap.Change) -> None:
        nonlocal calls
        calls += 1
        if delay:
            time.sleep(delay)
        if change.final and change.object_id not in finals:
            finals[change.object_id] = time.monotonic()

    client = jobtap.Client(url, site=SITE, max_lag=max_lag)
    sub = client.subscribe(on_change, all_jobs=True, initial=False)
    conn.send("ready")
    expected, deadline = conn.recv()  # the finals the site wrote, and until when to wait
    while time.monotonic() < deadline and not expected <= finals.keys():
        time.sleep(0.05)
    conn.send(
        {
            "finals": {j: finals[j] for j in expected if j in finals},
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "queue_peak": sub.queue_peak,
            "resyncs": sub.resyncs,
            "by_state": sub.caught_up_by_state,
            "calls": calls,
        }
    )
    client.close()


def run(args: argparse.Namespace, max_lag: float | None) -> dict[str, dict]:
    from jobtap.collector.cycle import Collector
    from jobtap.sim import SimBackend, Simulation
    from jobtap.sim.localredis import RedisServer
    from sim.rig.pipeline import drain

    server = RedisServer().start()
    procs = []
    try:
        r = server.client()
        r.config_set("client-output-buffer-limit", "pubsub 4mb 1mb 5")
        sim = Simulation(seed=args.seed, initial_jobs=args.jobs)
        backend = SimBackend(simulation=sim, tick=0)
        col = Collector(backend, r, site=SITE, nodes_every=10**9, clock=lambda: sim.now)
        col.run_cycle()
        drain(r, SITE)
        start_id = r.xrevrange(f"jobtap:{{{SITE}}}:events", count=1)
        since = start_id[0][0].decode() if start_id else "0-0"
        ctx = mp.get_context("spawn")
        pipes = {}
        for name, delay in (("normal", 0.0), ("slow", args.delay)):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=subscriber, args=(server.url, delay, max_lag, child))
            p.start()
            procs.append(p)
            pipes[name] = parent
        for conn in pipes.values():
            assert conn.poll(60) and conn.recv() == "ready"
        started = time.monotonic()
        cycles = round(args.seconds / args.interval)
        for k in range(cycles):  # the same burst each run: a cycle every --interval s
            time.sleep(max(0.0, started + k * args.interval - time.monotonic()))
            sim.advance(args.step)
            col.run_cycle()
            drain(r, SITE)
        stopped = time.monotonic()
        expected = set()
        for _sid, fields in r.xrange(f"jobtap:{{{SITE}}}:events", min=f"({since}"):
            if fields.get(b"type") == b"final":
                expected.add(fields[b"id"].decode().split(":")[2])
        for conn in pipes.values():
            conn.send((expected, stopped + args.wait))
        out: dict[str, dict] = {}
        for name, conn in pipes.items():
            rep = conn.recv()
            times = rep["finals"]
            rep["expected"] = len(expected)
            rep["at_stop"] = sum(1 for t in times.values() if t <= stopped)
            rep["all_after"] = (
                max(times.values()) - stopped if len(times) == len(expected) and times else None
            )
            rep["cycles"] = cycles
            rep["load_took"] = stopped - started
            out[name] = rep
        return out
    finally:
        for p in procs:
            p.join(10)
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="real seconds of load")
    ap.add_argument("--step", type=float, default=120.0, help="simulated seconds per cycle")
    ap.add_argument(
        "--interval", type=float, default=0.5, help="real seconds between cycles (if kept up)"
    )
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--delay", type=float, default=0.02, help="the slow callback, seconds")
    ap.add_argument("--wait", type=float, default=120.0, help="seconds to wait after the load")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f};"
        f" {args.seconds:g} s of load, {args.step:g} sim s/cycle, {args.jobs} jobs,"
        f" slow callback {args.delay * 1000:g} ms, pubsub limit 4mb 1mb 5"
    )
    results = {"before (max_lag=None)": run(args, None), "after (max_lag=2)": run(args, 2.0)}
    head = (
        f"{'run':22} {'subscriber':10} {'finals at stop':>16} {'all finals after':>17}"
        f" {'peak RSS':>9} {'queue peak':>10} {'resyncs':>8} {'by state':>8} {'callbacks':>9}"
    )
    print(head)
    for run_name, subs in results.items():
        rep = next(iter(subs.values()))
        print(f"{run_name}: {rep['cycles']} cycles in {rep['load_took']:.1f} s")
    for run_name, subs in results.items():
        for name, rep in subs.items():
            after = f"{rep['all_after']:.1f} s" if rep["all_after"] is not None else "never"
            if rep["all_after"] is None:
                after = f"{len(rep['finals'])}/{rep['expected']} at {args.wait:g} s"
            print(
                f"{run_name:22} {name:10} {rep['at_stop']:>7}/{rep['expected']:<8}"
                f" {after:>17} {rep['rss_mb']:>6.0f} MB {rep['queue_peak']:>10}"
                f" {rep['resyncs']:>8} {rep['by_state']:>8} {rep['calls']:>9}"
            )


if __name__ == "__main__":
    main()
