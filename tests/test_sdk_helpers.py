"""Helpers for the SDK tests (no tests here): real events come from the real
Applier (workers.apply), written into a real redis-server."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import helpers
import pytest

import jobtap
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier, Settings
from jobtap.workers.chunk import Chunk

SITE = "t1"
K = SiteKeys(SITE)


def job_record(jid: str = "1.pbs", user: str = "alice", state: str = "queued", **extra) -> dict:
    return helpers.job_record(jid, user, state, **{"site": SITE, **extra})


def node_record(name: str = "n1", state: str = "free", **extra) -> dict:
    return helpers.node_record(name, state, **{"site": SITE, "resources": {"ncpus": 8}, **extra})


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


@pytest.fixture
def hermetic(monkeypatch, tmp_path):
    """No credential file, no JOBTAP_* settings from the environment."""
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    monkeypatch.delenv("JOBTAP_REDIS", raising=False)
    monkeypatch.delenv("JOBTAP_SITE", raising=False)


@pytest.fixture
def writer(r):
    return Writer(r)


@pytest.fixture
def client(redis_server, hermetic):
    c = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.5))
    yield c
    c.close()


def pubsub_clients(r) -> int:
    """How many pub/sub connections the server has."""
    return sum(1 for c in r.client_list() if int(c.get("sub", 0)) or int(c.get("psub", 0)))
