"""Helpers for the SDK tests: real events come from the real
Applier (workers.apply), written into a real redis-server; a Recorder callback
to wait on, a Barrier that proves nothing more is on its way, and a Client that
counts its subscriptions (to act once a wait() in another thread is in place)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import jobtap
from jobtap.contract.chunk import Chunk
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier, Settings
from sim.rig import records
from sim.rig.wait import eventually

SITE = "t1"
K = SiteKeys(SITE)


def job_record(jid: str = "1.pbs", user: str = "alice", state: str = "queued", **extra) -> dict:
    return records.job_record(jid, user, state, **{"site": SITE, **extra})


def node_record(name: str = "n1", state: str = "free", **extra) -> dict:
    return records.node_record(name, state, **{"site": SITE, "resources": {"ncpus": 8}, **extra})


class Writer:
    """Drives the real Applier: each call is one collector cycle for some objects."""

    def __init__(self, r, settings: Settings | None = None, site: str = SITE):
        self.applier = Applier(r, settings)
        self.site = site
        self.cycle = 0
        self.jobs: dict[str, dict] = {}
        self.lock = threading.Lock()

    def _apply(self, kind: str, items: list[dict]) -> dict:
        with self.lock:
            self.cycle += 1
            now = datetime.now(UTC).isoformat()
            return self.applier.apply(Chunk(self.site, self.cycle, now, kind, items))

    def job(self, jid: str = "1.pbs", user: str | None = None, **changes: Any) -> dict:
        """Create or change a job; returns the record written."""
        rec = self.jobs.get(jid)
        if rec is None:
            rec = job_record(jid, user or "alice", site=self.site)
        rec = dict(rec, **changes)
        if "state" in changes:
            rec["native_state"] = changes["state"][0].upper()
            rec["native"] = dict(rec["native"], job_state=rec["native_state"])
        self.jobs[jid] = rec
        self._apply("job", [_upsert(rec)])
        return rec

    def jobs_at_once(self, recs: list[dict]) -> None:
        for rec in recs:
            self.jobs[rec["id"]] = rec
        self._apply("job", [_upsert(rec) for rec in recs])

    def finish(self, jid: str = "1.pbs", state: str = "completed", exit_status: int = 0) -> None:
        self.job(jid, state=state, exit_status=exit_status, end_time=datetime.now(UTC).isoformat())

    def vanish(self, jid: str) -> None:
        self._apply("job", [{"op": "vanished", "id": jid}])

    def node(self, name: str = "n1", **changes: Any) -> None:
        self._apply("node", [_upsert(node_record(name, **changes))])

    def remove_node(self, name: str = "n1") -> None:
        self._apply("node", [{"op": "remove", "id": name}])


def _upsert(rec: dict) -> dict:
    return {"op": "upsert", "id": rec["id"], "fp": "fp", "state": rec["state"], "record": rec}


class Recorder:
    """A callback that records every change and lets a test wait for a condition."""

    def __init__(self, delay: float = 0.0):
        self.changes: list[jobtap.Change] = []
        self.cond = threading.Condition()
        self.delay = delay
        self.threads: set[str] = set()

    def __call__(self, change: jobtap.Change) -> None:
        self.threads.add(threading.current_thread().name)
        if self.delay:
            time.sleep(self.delay)
        with self.cond:
            self.changes.append(change)
            self.cond.notify_all()

    def wait_for(self, pred: Callable[[list[jobtap.Change]], bool], timeout: float = 10.0) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: pred(self.changes), timeout):
                got = [(c.type, c.id) for c in self.changes]
                raise AssertionError(f"condition not met within {timeout}s; got {got}")

    def wait_count(self, n: int, timeout: float = 10.0) -> None:
        self.wait_for(lambda cs: len(cs) >= n, timeout)

    def versions(self, object_id: str | None = None) -> list[int]:
        return [c.version for c in self.changes if object_id in (None, c.object_id)]

    def types(self) -> list[str]:
        return [c.type for c in self.changes]


class Barrier:
    """Proves that nothing more is on its way to a client's subscriptions.

    A Client reads all its subscriptions from one pub/sub connection (per Redis
    server) and runs their callbacks on one thread, in arrival order; Redis sends
    a connection its messages in the order they were published.  So once a marker
    job written after the thing that must not arrive has reached the barrier's own
    subscription, that thing has been delivered already if it was coming at all.

    Make the barrier before the test acts: its subscription keeps the client's
    connection open throughout.  Its markers are jobs of their own user; a
    subscription to every job of the site sees them too (``__call__`` returns the
    marker's id for that case).
    """

    def __init__(self, client: jobtap.Client, writer: Writer, user: str = "barrier"):
        self.writer = writer
        self.user = user
        self.markers = Recorder()
        self.sub = client.subscribe(self.markers, user=user)
        self.count = 0

    def __call__(self, timeout: float = 10.0) -> str:
        """Write a new marker job and wait until it arrived; return its id."""
        self.count += 1
        marker = f"{self.count}.barrier"
        self.writer.job(marker, user=self.user)
        self.markers.wait_for(lambda cs: any(c.object_id == marker for c in cs), timeout)
        return marker


class CountingClient(jobtap.Client):
    """A real :class:`jobtap.Client` that counts the subscriptions set up through
    it, those of ``wait()`` included.  ``subscribe()`` returns once the initial
    records were delivered, so a change made after the count went up is the new
    subscription's to see: a test can act once a ``wait()`` blocking in another
    thread is in place, instead of sleeping and hoping it is."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._count_lock = threading.Lock()
        self.subscribed = 0

    def subscribe(self, *args: Any, **kwargs: Any) -> jobtap.Subscription:
        sub = super().subscribe(*args, **kwargs)
        with self._count_lock:
            self.subscribed += 1
        return sub


def once_subscribed(
    client: CountingClient, n: int, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> threading.Thread:
    """Call ``fn(*args, **kwargs)`` in a new thread as soon as ``client`` has set
    up ``n`` subscriptions (a ``wait()`` the test calls next makes one)."""

    def run() -> None:
        eventually(lambda: client.subscribed >= n, what=f"{n} subscription(s) in place")
        fn(*args, **kwargs)

    t = threading.Thread(target=run)
    t.start()
    return t


def pubsub_clients(r) -> int:
    """How many pub/sub connections the server has."""
    return sum(1 for c in r.client_list() if int(c.get("sub", 0)) or int(c.get("psub", 0)))
