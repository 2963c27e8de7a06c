"""How fast stream() hands out events.

    python -m bench.stream [--events 200000] [--count 1000]

Starts its own redis-server on a free port, fills the site stream through the real
apply step (workers.apply.Applier: 20 changes of each of ``--events``/20 jobs),
then consumes it from the start with the SDK, each way timed separately:

- plain: ``XREAD`` batches, deduplicated, touching each change's id;
- export: as ``jobtap export`` does (each event's JSON written to /dev/null);
- group: a consumer group with acks (XREADGROUP + XACK per batch);
- typed: building the typed record of each change (``change.record``).

Target: >= 50,000 events/s.
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


def fill(url: str, events: int) -> int:
    import redis

    from jobtap.contract.chunk import Chunk
    from jobtap.workers.apply import Applier, Settings

    applier = Applier(redis.Redis.from_url(url), Settings(site_maxlen=events * 2))
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
    server = RedisServer().start()
    figures: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        total = fill(server.url, args.events)
        print(f"filled the stream with {total} events in {time.perf_counter() - t0:.1f} s")
        with jobtap.Client(server.url, site=SITE) as client:
            for mode in ("plain", "export", "group", "typed"):
                n, elapsed = consume(client, mode, args.count, total)
                figures[mode] = n / elapsed
                flag = "" if n == total else f"  (got {n} of {total}: MISMATCH)"
                print(f"{mode:<7} {n} events in {elapsed:.2f} s: {n / elapsed:,.0f} events/s{flag}")
    finally:
        server.stop()
    print("target: >= 50,000 events/s")
    print(orjson.dumps(figures).decode())
    return figures


if __name__ == "__main__":
    main()
