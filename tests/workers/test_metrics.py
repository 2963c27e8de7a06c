"""The workers' facts: events by type add up to the stream's growth, objects
applied and skipped, version conflicts, the publish lag; the same counts in
Prometheus series and in the site's meta."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from jobtap.contract.chunk import Chunk
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier
from jobtap.workers.metrics import WorkerMetrics
from sim.rig.pipeline import meta, site_events
from sim.rig.records import job_record

SITE = "w1"
K = SiteKeys(SITE)


def job(jid, state="queued", **extra):
    return job_record(jid, "alice" if int(jid.split(".")[0]) % 2 else "bob", state, SITE, **extra)


def up(rec):
    return {"op": "upsert", "id": rec["id"], "fp": "fp", "state": rec["state"], "record": rec}


def chunk(cycle, items, ago: float = 0.5):
    at = (datetime.now(UTC) - timedelta(seconds=ago)).isoformat()
    return Chunk(SITE, cycle, at, "job", items)


def value(metrics, name, **labels):
    v = metrics.registry.get_sample_value(name, {"site": SITE, **labels})
    return 0.0 if v is None else v


def test_events_by_type_add_up_to_the_streams_growth(r):
    metrics = WorkerMetrics()
    a = Applier(r, metrics=metrics)
    ids = [f"{i}.pbs" for i in range(1, 121)]
    a.apply(chunk(1, [up(job(j)) for j in ids]))
    a.apply(chunk(2, [up(job(j, "running" if i % 3 else "queued", comment="c"))
                      for i, j in enumerate(ids)]))  # fmt: skip
    a.apply(chunk(3, [up(job(j, "completed", exit_status=0)) for j in ids[:30]]
                  + [{"op": "vanished", "id": j} for j in ids[30:40]]))  # fmt: skip
    a.apply(chunk(2, [up(job(j, "held")) for j in ids[:10]]))  # an older cycle: skipped
    # the same records again, but for the three of them that were queued
    a.apply(chunk(4, [up(job(j, "running", comment="c")) for j in ids[40:50]]))
    by_type = Counter(e["type"] for e in site_events(r, SITE))
    for etype in ("new", "state", "update", "final"):
        assert value(metrics, "jobtap_worker_events_total", type=etype) == by_type[etype], etype
    total = sum(v for k, v in by_type.items())
    assert total == r.xlen(K.events) == 120 + 120 + 40 + 3
    assert value(metrics, "jobtap_worker_objects_applied_total", kind="job") == 120 * 2 + 40 + 10
    assert value(metrics, "jobtap_worker_objects_skipped_total", kind="job") == 10
    assert value(metrics, "jobtap_worker_chunks_applied_total", kind="job") == 5
    assert value(metrics, "jobtap_worker_apply_duration_seconds_count", kind="job") == 5
    # the lag: observed 0.5 s before each of the 4 chunks that published events
    assert value(metrics, "jobtap_worker_publish_lag_seconds_count") == 4
    lag_sum = value(metrics, "jobtap_worker_publish_lag_seconds_sum")
    assert 2.0 <= lag_sum < 4 * 2.0
    m = meta(r, SITE)
    assert {t: int(m.get(f"events_{t}", 0)) for t in by_type} == dict(by_type)
    assert int(m["applied_objects"]) == 290 and int(m["applied_chunks"]) == 5
    assert 0.5 <= float(m["last_publish_lag_s"]) < 2.5


def test_the_meta_counts_are_kept_without_metrics_too(r):
    a = Applier(r)
    a.apply(chunk(1, [up(job("1.pbs"))]))
    a.apply(chunk(2, [up(job("1.pbs", "running"))]))
    m = meta(r, SITE)
    assert (m["events_new"], m["events_state"], m["applied_objects"]) == ("1", "1", "2")


class RacedApplier(Applier):
    """The real apply step, whose first read is overtaken by another worker
    applying a newer cycle of the same job (what two workers on one chunk's
    objects do)."""

    def __init__(self, r, rival: Applier, rival_chunk: Chunk, **kw):
        super().__init__(r, **kw)
        self.rival, self.rival_chunk = rival, rival_chunk

    def _read(self, target, keys, chunk):
        reads = super()._read(target, keys, chunk)
        if self.rival_chunk is not None:
            self.rival.apply(self.rival_chunk)
            self.rival_chunk = None
        return reads


def test_version_conflicts_are_counted(r):
    Applier(r).apply(chunk(1, [up(job("1.pbs"))]))
    metrics = WorkerMetrics()
    rival = Applier(r)
    raced = RacedApplier(r, rival, chunk(3, [up(job("1.pbs", comment="y"))]), metrics=metrics)
    totals = raced.apply(chunk(2, [up(job("1.pbs", comment="x")), up(job("2.pbs"))]))
    assert totals["conflicts"] == 1
    assert value(metrics, "jobtap_worker_version_conflicts_total") == 1
    assert meta(r, SITE)["version_conflicts"] == "1"
    # after the re-read, cycle 2 is older than the stored 3 for 1.pbs: only 2.pbs is new
    assert totals["new"] == 1 and totals["skipped"] == 1
