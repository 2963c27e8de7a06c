"""Helpers for tests that run the pipeline: drain the queues with a real rq worker,
read the site stream and meta, drive the PBS stand-in, check against the
simulation's ground truth."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import orjson
import redis

from jobtap.entries import xrange_events
from jobtap.events import changes_of, record_of
from jobtap.keys import SiteKeys
from jobtap.packing import NATIVE_FIELDS, native_read
from jobtap.workers.service import run_worker
from sim.rig.paths import FAKE_BIN


def drain(r: redis.Redis, site: str) -> None:
    """Apply every chunk waiting on the site's queues with a real rq worker (burst)."""
    level = logging.getLogger().level
    run_worker(r, r, site, burst=True)
    logging.getLogger().setLevel(level)


def chunks_not_applied(r: redis.Redis) -> int:
    """How many chunks are shipped and not applied yet.  The shipper enqueues
    each chunk as an rq job with ``result_ttl=0``: its ``rq:job:ID`` hash is made
    with the enqueue and deleted once a worker applied it (queued, taken or
    running, it exists; a failed one stays for ``failure_ttl``)."""
    return sum(1 for _ in r.scan_iter(match="rq:job:*", count=1000))


def site_events(r: redis.Redis, site: str) -> list[dict]:
    return [orjson.loads(f[b"event"]) for _, f in xrange_events(r, SiteKeys(site).events) if f]


def whole_event(event: dict) -> dict:
    """``event`` as a check reads it, whatever its format: its whole normalised
    record (``jobtap.events.record_of``) and its ``changes``, ``{attr: [old,
    new]}`` (``changes_of``)."""
    return {**event, "record": record_of(event), "changes": changes_of(event)}


def final_record(r: redis.Redis, site: str, event: dict) -> dict:
    """A job's ``final`` event's record with the job's native record, which
    events leave in the hash (format 2): a final's hash is not written again,
    so its ``native`` is the final's, kept packed (``None`` once the hash has
    expired)."""
    key = SiteKeys(site).job(event["user"], event["object_id"])
    return {**record_of(event), "native": native_read(r.hmget(key, NATIVE_FIELDS))}


def meta(r: redis.Redis, site: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(SiteKeys(site).meta).items()}


class FakePBS:
    """Controls the qstat/pbsnodes stand-in (sim/standins) through its control file."""

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
        kw.setdefault("qselect", str(FAKE_BIN / "qselect"))
        return PBSBackend(
            qstat=str(FAKE_BIN / "qstat"), pbsnodes=str(FAKE_BIN / "pbsnodes"), tz="UTC", **kw
        )


def check_against_truth(
    r: redis.Redis, site: str, sim, stat_times: list[float]
) -> tuple[dict[str, list[dict]], int]:
    """Check the site stream against the simulation's ground truth; return the
    job events by job id and how many finished jobs were checked.

    Every event id is unique; each job's versions are 1, 2, 3... (in each site
    epoch: a new one begins when Redis may have lost data, e.g. after a Redis
    Cluster failover, and versions count from 1 again in it); a job that
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
        for epoch in dict.fromkeys(e.get("epoch", "") for e in evs):
            versions = [e["version"] for e in evs if e.get("epoch", "") == epoch]
            assert versions == list(range(1, len(versions) + 1)), (jid, epoch, versions)
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
        rec = record_of(finals[0])
        if truth.purged:
            assert (rec["state"], rec["reason"]) == ("unknown", "vanished"), (jid, rec)
        else:
            assert rec["state"] == truth.final_state, (jid, rec["state"], truth)
            assert rec["exit_status"] == truth.exit_status, (jid, rec["exit_status"], truth)
            assert rec["state"] in TERMINAL
        checked += 1
    return by_job, checked
