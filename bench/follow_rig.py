"""A site in follow mode, for the follow-latency benchmarks: its own
redis-server, a real ``jobtap worker``, the collector service in this process
(``--follow``, a full stat every ``interval`` seconds) and an SDK client that
notes when each job's final event reaches its callback."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import jobtap
from jobtap.collector.backends.base import Backend
from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from sim.rig.paths import ROOT

JOBTAP = Path(sys.executable).with_name("jobtap")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p99 of 40 values is the largest)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def print_table(
    title: str, columns: list[str], results: list[dict], rows: dict[str, Callable[[dict], str]]
) -> None:
    """A markdown table: p50, p99 and max of each result's ``latencies``, how many
    jobs were measured (``missing``), then the ``rows`` given."""
    print("| " + " | ".join([title, *columns]) + " |")
    print("|---" + "|---:" * len(columns) + "|")
    cells: dict[str, Callable[[dict], str]] = {
        label: (lambda x, p=p: ms(percentile(x["latencies"], p)))
        for label, p in (("p50", 50), ("p99", 99), ("max", 100))
    }
    cells["jobs measured (missing)"] = lambda x: f"{len(x['latencies'])} ({x['missing']})"
    for label, cell in {**cells, **rows}.items():
        print(f"| {label} | " + " | ".join(cell(x) for x in results) + " |")


class FollowRig:
    def __init__(
        self, workdir: Path, site: str, *, interval: float = 5.0, nodes_every: int = 10**6
    ) -> None:
        """``nodes_every``: cycles between two stats of nodes and queues (the
        collector's default is 6; by default only the first cycle has them)."""
        self.site, self.interval, self.nodes_every = site, interval, nodes_every
        self.keys = SiteKeys(site)
        self.server = RedisServer(workdir / "redis").start()
        self.redis = self.server.client()
        self.finals: dict[str, float] = {}  # job id -> time its final reached the callback
        self.got = threading.Condition()
        self.worker: subprocess.Popen | None = None
        self.client: jobtap.Client | None = None
        self.service: CollectorService | None = None
        self.runner: threading.Thread | None = None

    def on_change(self, change: jobtap.Change) -> None:
        if change.final:
            with self.got:
                self.finals.setdefault(change.object_id, time.time())
                self.got.notify_all()

    def start(self, backend: Backend, backend_name: str) -> FollowRig:
        self.worker = subprocess.Popen(
            [str(JOBTAP), "worker", "--redis", self.server.url, "--site", self.site],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = jobtap.Client(self.server.url, site=self.site)
        self.client.subscribe(self.on_change, all_jobs=True, initial=False)
        collector = Collector(backend, self.redis, site=self.site,
                              nodes_every=self.nodes_every)  # fmt: skip
        self.service = CollectorService(collector, interval=self.interval, follow=True,
                                        backend_name=backend_name)  # fmt: skip
        self.runner = threading.Thread(target=self.service.run, daemon=True)
        self.runner.start()
        return self

    def wait_finals(self, job_ids: set[str], timeout: float) -> dict[str, str]:
        """Wait for the finals of these jobs; return the site's meta."""
        with self.got:
            self.got.wait_for(lambda: job_ids <= set(self.finals), timeout=timeout)
        return {k.decode(): v.decode() for k, v in self.redis.hgetall(self.keys.meta).items()}

    def stop(self) -> None:
        if self.service is not None:
            self.service.stop_event.set()
        if self.runner is not None:
            self.runner.join(timeout=30)
        if self.client is not None:
            self.client.close()
        if self.worker is not None:
            self.worker.terminate()
            self.worker.wait(timeout=30)
        self.server.stop()
