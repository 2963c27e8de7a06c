"""What a replica adds to sharded pub/sub, without jobtap: the time from SPUBLISH
on a shard's primary to the message on a subscriber of that primary, and on a
subscriber of its replica (the message crosses the cluster bus).

    python -m bench.cluster_bus [--messages 2000] [--every-ms 1]

Starts a local Redis Cluster (3 primaries, 3 replicas; sim/rig/cluster.py),
subscribes one raw connection to a channel on the primary that holds it and one
on its replica (READONLY, then SSUBSCRIBE), and publishes ``--messages`` messages
carrying their send time, one every ``--every-ms``.  Explains the difference
between the two cluster rows of bench.latency (JOBTAP_SUBSCRIBE_ON).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import redis

from sim.rig.cluster import LocalCluster

CHANNEL = "jobtap:{bench}:all"


def listen(port: int, readonly: bool, ready: threading.Event, out: list[float]) -> None:
    conn = redis.Connection(host="127.0.0.1", port=port, protocol=2, socket_timeout=30)
    conn.connect()
    if readonly:
        conn.send_command("READONLY")
        conn.read_response()
    conn.send_command("SSUBSCRIBE", CHANNEL)
    conn.read_response()
    ready.set()
    while True:
        _, _, data = conn.read_response()
        sent = float(data)
        if sent < 0:
            break
        out.append((time.perf_counter() - sent) * 1000)
    conn.disconnect()


def percentiles(values: list[float]) -> str:
    v = sorted(values)
    pick = lambda p: v[min(len(v) - 1, int(p / 100 * len(v)))]  # noqa: E731
    return f"p50 {pick(50):.2f} ms, p90 {pick(90):.2f} ms, p99 {pick(99):.2f} ms"


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--every-ms", type=float, default=1.0)
    ap.add_argument("--hz", type=int, default=10, help="the nodes' hz (Redis' default: 10)")
    args = ap.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="jobtap-bench-bus-"))
    cluster = LocalCluster(workdir, node_args=["--hz", str(args.hz)]).start()
    try:
        primary = cluster.primary_of("bench")
        replica = cluster.replicas_of(primary)[0]
        got: dict[str, list[float]] = {"primary": [], "replica": []}
        threads = []
        for name, node in (("primary", primary), ("replica", replica)):
            ready = threading.Event()
            t = threading.Thread(
                target=listen, args=(node.port, name == "replica", ready, got[name])
            )
            t.start()
            ready.wait(10)
            threads.append(t)
        with primary.client() as pub:
            for _ in range(args.messages):
                pub.execute_command("SPUBLISH", CHANNEL, repr(time.perf_counter()))
                time.sleep(args.every_ms / 1000)
            pub.execute_command("SPUBLISH", CHANNEL, "-1")
        for t in threads:
            t.join(30)
    finally:
        cluster.stop()
    for name, values in got.items():
        print(f"SPUBLISH on the primary -> subscriber on the {name}: {len(values)} messages, "
              f"{percentiles(values)}")  # fmt: skip
    return got


if __name__ == "__main__":
    main()
