"""A job whose first record has already ended (submitted, run and ended between
two stats of the collector) still gets exactly one ``new`` and one ``final``."""

from __future__ import annotations

import orjson

from jobtap.contract.chunk import Chunk, upsert
from jobtap.entries import xrange_events
from jobtap.keys import SiteKeys
from jobtap.schema import from_hash
from jobtap.workers.apply import Applier
from sim.rig.records import job_record

SITE = "t2"
K = SiteKeys(SITE)


def chunk(cycle: int, items: list) -> Chunk:
    return Chunk(SITE, cycle, f"2026-11-21T15:00:{cycle:02d}+00:00", "job", items)


def events(r, key=K.events) -> list[dict]:
    return [orjson.loads(f[b"event"]) for _, f in xrange_events(r, key)]


def test_a_job_first_seen_ended_gets_new_then_final(r):
    ended = job_record("7.pbs", "alice", "failed", SITE, exit_status=3)
    live = job_record("8.pbs", "alice", "queued", SITE)
    Applier(r).apply(chunk(1, [upsert("7.pbs", "fp7", ended), upsert("8.pbs", "fp8", live)]))
    evs = [e for e in events(r) if e["object_id"] == "7.pbs"]
    assert [(e["type"], e["version"]) for e in evs] == [("new", 1), ("final", 2)]
    assert [e["record"]["state"] for e in evs] == ["failed", "failed"]
    assert evs[1]["record"]["exit_status"] == 3 and evs[1]["was"] == {}
    assert [e["id"] for e in events(r, K.user_events("alice"))][:2] == [e["id"] for e in evs]
    stored = from_hash({k.decode(): v.decode() for k, v in r.hgetall(K.job("alice", "7.pbs"))
                        .items()})  # fmt: skip
    assert stored["version"] == 2 and r.hget(K.job("alice", "7.pbs"), "final") == b"1"
    assert not r.sismember(K.user_jobs("alice"), "7.pbs")  # ended: not a live job
    assert r.sismember(K.user_jobs("alice"), "8.pbs")
    assert r.hget(K.owner, "7.pbs") == b"alice" and r.ttl(K.job("alice", "7.pbs")) > 0


def test_the_pair_is_written_once_whatever_the_retries(r):
    ended = job_record("9.pbs", "bob", "completed", SITE, exit_status=0)
    for applier in (Applier(r), Applier(r)):  # a retried chunk, another worker
        applier.apply(chunk(4, [upsert("9.pbs", "fp9", ended)]))
    Applier(r).apply(chunk(5, [upsert("9.pbs", "fp9", ended)]))  # a later cycle: after final
    assert [(e["type"], e["version"]) for e in events(r)] == [("new", 1), ("final", 2)]
