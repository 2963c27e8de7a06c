"""Small helpers shared by the end-to-end tests (real Redis, real rq)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import orjson
import redis

from jobtap.keys import SiteKeys
from jobtap.workers.service import run_worker

ROOT = Path(__file__).resolve().parent.parent
FAKE_BIN = ROOT / "tests" / "fakes" / "bin"


def job_record(
    jid: str = "1.pbs", user: str = "alice", state: str = "queued", site: str = "t1", **extra
) -> dict:
    """A normalised job record as a backend would produce it (for tests that
    drive the real apply step directly)."""
    rec = {
        "id": jid, "site": site, "scheduler": "pbs", "user": user, "group": "g",
        "account": None, "name": "j", "queue": "workq", "state": state,
        "native_state": state[0].upper(), "reason": None, "comment": None,
        "submit_time": "2026-11-21T14:40:20+00:00", "start_time": None, "end_time": None,
        "exit_status": None, "requested": {"ncpus": 1}, "allocated": [],
        "resources_used": {}, "array_parent": None, "array_index": None, "priority": 0,
        "native": {"job_state": state[0].upper(), "Job_Owner": f"{user}@vm"},
    }  # fmt: skip
    rec.update(extra)
    return rec


def node_record(name: str = "n1", state: str = "free", site: str = "t1", **extra) -> dict:
    rec = {
        "id": name, "site": site, "scheduler": "pbs", "state": state, "native_state": state,
        "reason": None, "jobs": [], "resources": {}, "native": {"state": state},
    }  # fmt: skip
    rec.update(extra)
    return rec


def drain(r: redis.Redis, site: str) -> None:
    """Apply every chunk waiting on the site's queues with a real rq worker (burst)."""
    level = logging.getLogger().level
    run_worker(r, r, site, burst=True)
    logging.getLogger().setLevel(level)


def site_events(r: redis.Redis, site: str) -> list[dict]:
    return [orjson.loads(f[b"event"]) for _, f in r.xrange(SiteKeys(site).events)]


def meta(r: redis.Redis, site: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(SiteKeys(site).meta).items()}


class FakePBS:
    """Controls the qstat/pbsnodes stand-in (tests/fakes) through its control file."""

    def __init__(self, tmp_path: Path, fixtures: Path, monkeypatch):
        self.control = tmp_path / "fake-pbs.json"
        self.fixtures = fixtures
        monkeypatch.setenv("JOBTAP_FAKE_PBS", str(self.control))
        self.set("00-empty")

    def set(self, stage: str, mode: str = "ok", **extra) -> None:
        doc = {"dir": str(self.fixtures), "stage": stage, "mode": mode, **extra}
        self.control.write_text(json.dumps(doc))

    def backend(self, **kw):
        from jobtap.collector.backends.pbs import PBSBackend

        kw.setdefault("timeout", 10)
        return PBSBackend(
            qstat=str(FAKE_BIN / "qstat"), pbsnodes=str(FAKE_BIN / "pbsnodes"), tz="UTC", **kw
        )


def check_against_truth(
    r: redis.Redis, site: str, sim, stat_times: list[float]
) -> tuple[dict[str, list[dict]], int]:
    """Check the site stream against the simulation's ground truth; return the
    job events by job id and how many finished jobs were checked.

    Every event id is unique; each job's versions are 1, 2, 3...; a job that
    ended before the last stat has exactly one final, last, with the right
    terminal state and exit status (or ``vanished`` when the server forgot
    it); a job still alive has none; a job with no event at all lived and died
    between two stats.
    """
    from collections import defaultdict

    from jobtap.schema import TERMINAL

    everything = site_events(r, site)
    assert len({e["id"] for e in everything}) == len(everything), "an event id repeats"
    by_job: dict[str, list[dict]] = defaultdict(list)
    for e in everything:
        if e["kind"] == "job":
            by_job[e["object_id"]].append(e)
    last_stat = stat_times[-1]
    checked = 0
    for jid, truth in sim.truth.items():
        evs = by_job.get(jid, [])
        versions = [e["version"] for e in evs]
        assert versions == list(range(1, len(versions) + 1)), (jid, versions)
        finals = [e for e in evs if e["type"] == "final"]
        ended_at = truth.transitions[-1][0] if truth.final_state else None
        if ended_at is None or ended_at > last_stat:
            assert not finals, (jid, "final for a job that has not ended", truth)
            continue
        born = truth.transitions[0][0]
        if not evs:
            assert not any(born <= t < ended_at for t in stat_times), (jid, "never seen", truth)
            continue
        assert len(finals) == 1, (jid, [e["type"] for e in evs])
        assert evs[-1]["type"] == "final", (jid, "something after the final")
        rec = finals[0]["record"]
        if truth.purged:
            assert (rec["state"], rec["reason"]) == ("unknown", "vanished"), (jid, rec)
        else:
            assert rec["state"] == truth.final_state, (jid, rec["state"], truth)
            assert rec["exit_status"] == truth.exit_status, (jid, rec["exit_status"], truth)
            assert rec["state"] in TERMINAL
        checked += 1
    return by_job, checked
