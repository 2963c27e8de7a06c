"""How fast stream() hands out events, with each job event stored once and copied.

    python -m bench.stream [--events 200000] [--count 1000]

For each side, starts its own redis-server on a free port, fills the site stream
through the real apply step (workers.apply.Applier: 20 changes of each of
``--events``/20 jobs of 100 users), then consumes it from the start with the SDK,
each way timed separately.  The sides: "copied", each event whole in the site
stream and its user's (``jobtap worker --copy-events``), and "once", the default,
the site stream's entries naming the users' streams that hold the events
(``jobtap.entries``: the reader follows them, one pipelined read a batch).  The
ways:

- plain: ``XREAD`` batches, deduplicated, touching each change's id;
- export: as ``jobtap export`` does (each event's JSON written to /dev/null);
- group: a consumer group with acks (XREADGROUP + XACK per batch);
- typed: building the typed record of each change (``change.record``).

Target: >= 50,000 events/s.  Printed with each side's figures: the ratio
once/copied, and the redis-server's ``used_memory`` after the fill.
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import UTC, datetime

import orjson

SITE = "bench"
VERSIONS = 20


def record(n: int, version: int) -> dict:
    return {
        "id": f"{n}.pbs", "site": SITE, "scheduler": "pbs", "user": f"user{n % 100:03d}",
        "group": "g", "account": None, "name": f"job{n}", "queue": "workq",
        "state": "running", "native_state": "R", "reason": None, "comment": None,
        "submit_time": "2026-11-21T14:40:20+00:00", "start_time": "2026-11-21T14:41:00+00:00",
        "end_time": None, "exit_status": None, "requested": {"ncpus": 4, "walltime": "01:00:00"},
        "allocated": ["n1/0*4"], "resources_used": {"cput": f"00:00:{version:02d}"},
        "array_parent": None, "array_index": None, "priority": 0,
        "native": {"job_state": "R", "Job_Owner": f"user{n % 100:03d}@login1",
                   "resources_used": {"cput": f"00:00:{version:02d}"}},
    }  # fmt: skip


SIDES = {"copied": False, "once": True}  # side -> Settings.store_events_once


def fill(url: str, events: int, once: bool = True) -> int:
    import redis

    from jobtap.contract.chunk import Chunk
    from jobtap.workers.apply import Applier, Settings

    settings = Settings(site_maxlen=events * 2, store_events_once=once)
    applier = Applier(redis.Redis.from_url(url), settings)
    jobs = max(1, events // VERSIONS)
    cycle = 0
    for version in range(VERSIONS):
        for start in range(0, jobs, 1000):
            cycle += 1
            items = [
                {"op": "upsert", "id": f"{n}.pbs", "fp": "fp", "state": "running",
                 "record": record(n, version)}
                for n in range(start, min(jobs, start + 1000))
            ]  # fmt: skip
            now = datetime.now(UTC).isoformat()
            applier.apply(Chunk(SITE, cycle, now, "job", items))
    return jobs * VERSIONS


def consume(client, mode: str, count: int, total: int) -> tuple[int, float]:
    group = "bench-" + mode if mode == "group" else None
    stream = client.stream(group=group, since="0", count=count, idle_timeout=1.0)
    n = 0
    sink = open(os.devnull, "wb") if mode == "export" else None
    started = time.perf_counter()
    for change in stream:
        if mode == "export":
            sink.write(change.json + b"\n")
        elif mode == "typed":
            _ = change.record.state
        else:
            _ = change.id
        n += 1
        if n == total:
            break
    elapsed = time.perf_counter() - started
    stream.close()
    if sink is not None:
        sink.close()
    return n, elapsed


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--count", type=int, default=1000, help="events per XREAD batch")
    args = ap.parse_args(argv)

    import jobtap
    from jobtap.sim.localredis import RedisServer

    os.environ["JOBTAP_CREDENTIALS"] = os.devnull + ".none"  # no credential file here
    modes = ("plain", "export", "group", "typed")
    figures: dict[str, dict[str, float]] = {}
    for side, once in SIDES.items():
        server = RedisServer().start()
        got = figures[side] = {}
        try:
            t0 = time.perf_counter()
            total = fill(server.url, args.events, once)
            mb = got["used_memory_mb"] = server.client().info("memory")["used_memory"] / 1e6
            took = time.perf_counter() - t0
            print(f"{side}: filled the stream with {total} events in {took:.1f} s; "
                  f"used_memory {mb:,.1f} MB")  # fmt: skip
            with jobtap.Client(server.url, site=SITE) as client:
                for mode in modes:
                    n, elapsed = consume(client, mode, args.count, total)
                    got[mode] = n / elapsed
                    flag = "" if n == total else f"  (got {n} of {total}: MISMATCH)"
                    print(f"{side:<7} {mode:<7} {n} events in {elapsed:.2f} s: "
                          f"{n / elapsed:,.0f} events/s{flag}")  # fmt: skip
        finally:
            server.stop()
    a, b = SIDES
    print(f"\n| mode | {a} (events/s) | {b} (events/s) | {b}/{a} |\n|---|---:|---:|---:|")
    for mode in modes:
        x, y = figures[a][mode], figures[b][mode]
        print(f"| {mode} | {x:,.0f} | {y:,.0f} | {y / x:.2f}x |")
    x, y = figures[a]["used_memory_mb"], figures[b]["used_memory_mb"]
    print(f"| used_memory after the fill | {x:,.1f} MB | {y:,.1f} MB | {y / x:.2f}x |")
    print("target: >= 50,000 events/s")
    print(orjson.dumps(figures).decode())
    return figures


if __name__ == "__main__":
    main()
