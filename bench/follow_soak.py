"""Push and poll together, in real time, on the simulated cluster.

    python -m bench.follow_soak [--minutes 10] [--speed 10]

A real ``jobtap collector --follow`` service (interval 5 s) and two real
``jobtap worker`` processes run against a local redis-server while the
simulated cluster advances in real time (``--speed`` simulated seconds per
second) and pokes every state change, as scheduler hooks would.  At the end
the site stream is checked against the simulation's ground truth: no event id
twice, versions 1, 2, 3... per job, exactly one final per ended job with the
right state and exit status, none for a live one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time

from jobtap.collector.backends.base import PokedReads
from jobtap.collector.cycle import Collector
from jobtap.collector.follow.pokes import poke
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from jobtap.sim.localredis import RedisServer

SITE = "soak"


class SharedSim:
    """The simulation behind a lock (the driver advances it while the
    collector stats it), noting the simulated time of every full stat."""

    def __init__(self, backend: SimBackend):
        self.backend = backend
        self.scheduler = backend.scheduler
        self.cost = backend.cost
        self.lock = threading.Lock()
        self.stat_times: list[float] = []

    def poked_reads(self):
        return PokedReads()

    def stat_jobs(self):
        with self.lock:
            self.stat_times.append(self.backend.simulation.now)
            return self.backend.stat_jobs()

    def __getattr__(self, name):
        method = getattr(self.backend, name)

        def locked(*args, **kw):
            with self.lock:
                return method(*args, **kw)

        return locked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--speed", type=float, default=10.0, help="simulated seconds per second")
    ap.add_argument("--jobs", type=int, default=1000)
    args = ap.parse_args()
    from sim.rig.pipeline import check_against_truth, site_events

    server = RedisServer().start()
    keys = SiteKeys(SITE)
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobtap.cli",
                "worker",
                "--redis",
                server.url,
                "--site",
                SITE,
                "--log-level",
                "WARNING",
            ]
        )  # fmt: skip
        for _ in range(2)
    ]
    try:
        r = server.client()
        shared = SharedSim(SimBackend(seed=7, nodes=max(20, args.jobs // 10), jobs=args.jobs,
                                      tick=0))  # fmt: skip
        sim = shared.backend.simulation
        col = Collector(shared, r, site=SITE, nodes_every=6, reconcile_every=0)
        service = CollectorService(col, interval=5.0, follow=True)
        runner = threading.Thread(target=service.run, daemon=True)
        runner.start()
        started = time.monotonic()
        end = started + args.minutes * 60
        pokes = 0
        while time.monotonic() < end:
            time.sleep(0.25)
            with shared.lock:
                sim.advance(0.25 * args.speed)
                ids = sim.take_pokes()
            if ids:
                poke(r, keys, ids)
                pokes += len(ids)
        service.stop_event.set()
        runner.join(30)
        with shared.lock:  # a last look, so every ended job has had its chance
            shared.stat_times.append(sim.now)
        col.run_cycle()
        deadline = time.monotonic() + 120
        queues = [f"rq:queue:{keys.rq_queue(p)}" for p in ("state", "update")]
        wips = [f"rq:wip:{keys.rq_queue(p)}" for p in ("state", "update")]
        while time.monotonic() < deadline:
            if not any(r.llen(q) for q in queues) and not any(r.zcard(w) for w in wips):
                break
            time.sleep(0.2)
        meta = {k.decode(): v.decode() for k, v in r.hgetall(keys.meta).items()}
        events = site_events(r, SITE)
        finals = sum(1 for e in events if e["type"] == "final")
        print(f"ran {args.minutes:g} min at {args.speed:g}x: {sim.now - sim.start_time:.0f}"
              f" simulated seconds, {len(sim.truth)} jobs")  # fmt: skip
        print(f"full cycles {meta.get('cycles_ok')} ok / {meta.get('cycles_failed', 0)} failed;"
              f" targeted refreshes {meta.get('refreshes', 0)}; pokes {pokes}")  # fmt: skip
        print(f"events {len(events)}, finals {finals}")
        try:
            by_job, checked = check_against_truth(r, SITE, sim, shared.stat_times)
        except AssertionError as exc:
            print(f"FAIL: {exc}")
            sys.exit(1)
        print(
            f"PASS: {len(by_job)} jobs with events, {checked} finished jobs checked against"
            " the ground truth; no duplicate id, versions contiguous, no missed final"
        )
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            w.wait(30)
        server.stop()


if __name__ == "__main__":
    main()
