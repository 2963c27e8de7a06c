"""A multi-site deployment for the tests: simulated sites, each with its real
collector (data on a Redis Cluster, rq's queues on a plain Redis), a pool of
real ``jobtap worker --all-sites`` processes, and what SDK subscribers and
stream consumers received, checked against the sites' streams and the
simulations' ground truth."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections import defaultdict
from typing import Any

from rq import Queue, Worker

import jobtap
from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.contract.chunk import PRIORITIES
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from sim.rig.pipeline import check_against_truth, site_events
from sim.rig.wait import eventually
from tests.support.sdk import Writer

TICK = 300.0  # simulated seconds between two stats


class SimSite:
    """One simulated site and its collector."""

    def __init__(self, name: str, data, queues, *, seed: int, jobs: int = 200, nodes: int = 16):
        self.name = name
        self.backend = SimBackend(seed=seed, nodes=nodes, jobs=jobs, tick=0)
        self.sim = self.backend.simulation
        # every cycle a full stat: the ground truth is checked at each stat's time
        collector = Collector(
            self.backend, data, queues, site=name, nodes_every=2, reconcile_every=0
        )
        self.service = CollectorService(collector, interval=0)
        self.stat_times: list[float] = []
        self.failed = 0

    def cycle(self, *, advance: bool = True) -> bool:
        """One collector cycle (the simulation moves on first); False if it
        failed, as during a failover: the caller tries again without advancing."""
        if advance:
            self.sim.advance(TICK)
        if not self.service.run_one():
            self.failed += 1
            return False
        self.stat_times.append(self.sim.now)
        return True

    def cycle_until_done(self, attempts: int = 200) -> None:
        ok = self.cycle()
        for _ in range(attempts):
            if ok:
                return
            threading.Event().wait(0.1)  # a failover takes a few seconds
            ok = self.cycle(advance=False)
        raise AssertionError(f"site {self.name}: no successful cycle in {attempts} attempts")


class WorkerPool:
    """``n`` real ``jobtap worker --all-sites`` processes."""

    def __init__(self, data_url: str, queue_url: str, n: int = 2):
        cmd = [sys.executable, "-m", "jobtap.cli", "worker", "--redis", data_url,
               "--queue-redis", queue_url, "--all-sites", "--log-level", "WARNING"]  # fmt: skip
        self.procs = [
            subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for _ in range(n)
        ]

    def stop(self) -> list[str]:
        """Stop them (SIGTERM: the chunk in hand is finished); their stderr."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        errors = []
        for p in self.procs:
            try:
                _, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            errors.append(err)
        return errors

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def serving(self, queues) -> bool:
        """Whether every process has an rq worker registered on ``queues`` (its
        name holds the pid): started, past its own check of the queue Redis."""
        names = [w.name for w in Worker.all(connection=queues)]
        return all(any(f".{p.pid}." in name for name in names) for p in self.procs)


def drained(queues, sites) -> bool:
    """No chunk waiting or being applied for any of ``sites``."""
    for site in sites:
        for priority in PRIORITIES:
            q = Queue(SiteKeys(site).rq_queue(priority), connection=queues)
            if q.count or q.started_job_registry.count:
                return False
    return True


class Deliveries:
    """What one client's subscription to every job of its sites received."""

    def __init__(self) -> None:
        self.changes: list[jobtap.Change] = []
        self.lock = threading.Lock()

    def __call__(self, change: jobtap.Change) -> None:
        with self.lock:
            self.changes.append(change)

    def ids(self, site: str) -> list[str]:
        with self.lock:
            return [c.id for c in self.changes if c.site == site and c.type != "initial"]


class StreamReader(threading.Thread):
    """A consumer of one site's stream (``client.stream(since="0")``)."""

    def __init__(self, client: jobtap.Client, site: str):
        super().__init__(daemon=True)
        self.stream = client.stream(site=site, since="0", block=0.2)
        self.ids: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for change in self.stream:
                self.ids.append(change.id)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def stop(self) -> None:
        self.stream.interrupt()
        self.join(10)


class Audience:
    """One SDK client of every site: a subscription to every job (made before
    the first event, so it sees them all) and a consumer of each site's stream."""

    def __init__(self, url: str, names: list[str]):
        self.client = jobtap.Client(url, sites=dict.fromkeys(names))
        self.delivered = Deliveries()
        self.sub = self.client.subscribe(self.delivered, all_jobs=True)
        self.readers = {name: StreamReader(self.client, name) for name in names}
        for reader in self.readers.values():
            reader.start()

    def close(self) -> None:
        self.sub.close()
        for reader in self.readers.values():
            reader.stop()
        self.client.close()


def job_event_ids(r, site: str) -> list[str]:
    return [e["id"] for e in site_events(r, site) if e["kind"] == "job"]


def check_site(r, site: SimSite, audience: Audience) -> dict[str, Any]:
    """The site's stream against its simulation's ground truth, then what the
    subscriber and the stream consumer got against the stream: every event,
    once, each object's versions in order, nothing made up from a record."""
    delivered, reader = audience.delivered, audience.readers[site.name]
    by_job, finished = check_against_truth(r, site.name, site.sim, site.stat_times)
    stream_jobs = job_event_ids(r, site.name)
    everything = [e["id"] for e in site_events(r, site.name)]
    got = delivered.ids(site.name)
    assert len(got) == len(set(got)), f"{site.name}: a subscriber got an event twice"
    assert sorted(got) == sorted(stream_jobs), (
        f"{site.name}: subscriber missed {sorted(set(stream_jobs) - set(got))[:5]}, "
        f"extra {sorted(set(got) - set(stream_jobs))[:5]}"
    )
    versions: dict[tuple[str, str], list[int]] = defaultdict(list)
    for c in delivered.changes:
        if c.site == site.name and c.type != "initial":
            versions[(c.object_id, c.epoch)].append(c.version)
    for (oid, epoch), vs in versions.items():
        assert vs == sorted(vs), (site.name, oid, epoch, vs)
    assert reader.error is None, reader.error
    assert reader.ids == everything, f"{site.name}: the stream consumer's events differ"
    return {"jobs": len(by_job), "finished": finished, "events": len(stream_jobs)}


def wait_for_everything(r, queues, sites: list[SimSite], audience: Audience, timeout=60.0):
    """Until the queues are drained and every subscriber and consumer has
    caught up with the streams."""
    names = [s.name for s in sites]
    delivered, readers = audience.delivered, audience.readers
    eventually(lambda: drained(queues, names), timeout=timeout, interval=0.1, what="drained")

    def caught_up() -> bool:
        for s in sites:
            want = job_event_ids(r, s.name)
            if len(delivered.ids(s.name)) < len(want):
                return False
            if len(readers[s.name].ids) < len(site_events(r, s.name)):
                return False
        return True

    eventually(caught_up, timeout=timeout, interval=0.1, what="subscribers caught up")
    # A barrier: a marker job written after everything, on each site.  Each site's
    # events reach a client on one connection, in order: once the marker is
    # there, any duplicate that was coming has come too.
    for s in sites:
        Writer(r, site=s.name).job("1.barrier", user="barrier")
        marker = site_events(r, s.name)[-1]["id"]  # its id carries the site's epoch

        def arrived(name: str = s.name, marker: str = marker) -> bool:
            return marker in delivered.ids(name) and marker in readers[name].ids

        eventually(arrived, timeout=timeout, interval=0.05, what=f"the marker of {s.name}")
