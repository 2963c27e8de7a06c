"""The lease fence in the apply step (the lease fence, jobtap.contract.lease, before the epoch check
of the same script): a chunk from a collector whose lease generation was
deposed writes nothing, whatever it holds, and is counted."""

from __future__ import annotations

from jobtap.contract.chunk import Chunk
from jobtap.contract.lease import Lease
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier
from jobtap.workers.metrics import WorkerMetrics
from sim.rig.records import job_record

SITE = "fence"
K = SiteKeys(SITE)


def _chunk(cycle: int, state: str, lease: int, jid: str = "1.pbs") -> Chunk:
    rec = job_record(jid, user="alice", state=state, site=SITE)
    item = {"op": "upsert", "id": jid, "fp": f"fp-{state}", "state": state, "record": rec}
    return Chunk(SITE, cycle, f"2026-01-01T00:00:{cycle:02d}+00:00", "job", [item], lease)


def _written(r) -> tuple[int, bytes | None]:
    return r.xlen(K.events), r.hget(K.job("alice", "1.pbs"), "state")


def test_a_chunk_of_a_deposed_generation_writes_nothing(r):
    metrics = WorkerMetrics()
    a = Applier(r, metrics=metrics)
    old, new = Lease(r, K, duration=5, host="a"), Lease(r, K, duration=5, host="b")
    assert old.acquire().ours and old.generation == 1
    assert a.apply(_chunk(1, "queued", 1))["events"] == 1
    r.delete(f"{K.base}:collector")  # generation 1 paused past its lease...
    assert new.acquire().ours and new.generation == 2  # ...and generation 2 took over
    before = _written(r), r.hgetall(K.fingerprints), r.hget(K.meta, "cycle")
    # generation 1's chunk, shipped before the takeover, applied after it: a state
    # change, a new job and a final, all dropped
    totals = a.apply(_chunk(2, "running", 1))
    assert totals["fenced"] == 1 and totals["events"] == totals["objects"] == 0
    assert a.apply(_chunk(3, "completed", 1, jid="2.pbs"))["fenced"] == 1
    assert (_written(r), r.hgetall(K.fingerprints), r.hget(K.meta, "cycle")) == before
    assert r.hget(K.meta, "fenced_chunks") == b"2"
    assert metrics.fenced.labels(SITE)._value.get() == 2
    # the new holder's chunk of the same change goes through, versions from the record
    totals = a.apply(_chunk(4, "running", 2))
    assert totals["events"] == 1 and _written(r) == (2, b"running")
    assert r.hget(K.job("alice", "1.pbs"), "version") == b"2"


def test_chunks_without_a_generation_pass_only_while_the_site_has_none(r):
    a = Applier(r)
    assert "lease" in Chunk.decode(_chunk(1, "queued", 0).encode()).__slots__
    legacy = b'{"site":"fence","cycle":1,"observed_at":"2026-01-01T00:00:01+00:00",'
    legacy += b'"kind":"job","items":[]}'
    assert Chunk.decode(legacy).lease == 0  # contract version 1: generation 0
    assert a.apply(_chunk(1, "queued", 0))["events"] == 1  # no lease ever: as before
    assert Lease(r, K, duration=5).acquire().ours
    assert a.apply(_chunk(2, "running", 0)).get("fenced") == 1
    assert a.apply(_chunk(3, "running", 1))["events"] == 1
    # Redis lost the counter (an empty restart): any generation passes until one is taken
    r.hdel(K.meta, "lease_generation")
    assert a.apply(_chunk(4, "completed", 0))["events"] == 1
