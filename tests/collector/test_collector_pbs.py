"""The PBS path end to end: stand-in qstat replaying real OpenPBS output ->
collector -> rq worker -> Redis; and every way a stat can fail."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.events import record_of
from jobtap.keys import SiteKeys
from jobtap.schema import from_hash
from sim.rig.pipeline import drain, meta, site_events

SITE = "pbs1"
K = SiteKeys(SITE)


def make_service(pbs, r, **kw):
    col = Collector(pbs.backend(**kw), r, site=SITE, nodes_every=1)
    return CollectorService(col, interval=0.1, backend_name="pbs")


def test_stages_to_final_records(pbs, r):
    svc = make_service(pbs, r)
    for stage in ("00-empty", "10-busy", "20-after-qdel", "30-array-running", "40-drained",
                  "80-final"):  # fmt: skip
        pbs.set(stage)
        assert svc.run_one(), meta(r, SITE).get("last_error")
        drain(r, SITE)
    events = site_events(r, SITE)
    jobs = [e for e in events if e["kind"] == "job"]
    finals = {e["object_id"]: e for e in jobs if e["type"] == "final"}
    # every job seen ended; each has exactly one final with the right state and exit
    counts = Counter(e["object_id"] for e in jobs if e["type"] == "final")
    assert set(counts.values()) == {1}
    expect = {
        "1.vm": ("cancelled", 271), "3.vm": ("failed", 3),
        "8.vm": ("failed", -29), "9.vm": ("cancelled", None), "4.vm": ("completed", 0),
        "5.vm": ("cancelled", None), "6.vm": ("cancelled", None), "7.vm": ("completed", 0),
    }  # fmt: skip
    for jid, (state, code) in expect.items():
        rec = record_of(finals[jid])
        assert (rec["state"], rec["exit_status"]) == (state, code), jid
    # versions per job are 1, 2, 3... and ids never repeat
    by_job: dict[str, list[int]] = {}
    for e in jobs:
        by_job.setdefault(e["object_id"], []).append(e["version"])
    for jid, versions in by_job.items():
        assert versions == list(range(1, len(versions) + 1)), jid
    assert len({e["id"] for e in events}) == len(events)
    # nothing after a final
    for jid, fe in finals.items():
        assert by_job[jid][-1] == fe["version"]
    # the node and the queue were stored too
    assert r.exists(K.node("vm")) and r.exists(K.queue("workq"))
    assert from_hash(r.hgetall(K.job("bob", "3.vm")))["state"] == "failed"


@pytest.mark.parametrize(
    "mode, message",
    [("fail", "exited with status 1"), ("garbage", "not JSON|not a job id"),
     ("hang", "timed out")],
)  # fmt: skip
def test_failed_stat_changes_nothing_and_next_cycle_resumes(pbs, r, mode, message):
    """A probe cycle (qselect, then qstat -E of what it names) or a full stat
    that fails: nothing changes; the next cycle finds the changes."""
    # the hang mode waits this long; the stand-in's other calls must never (a loaded
    # clean make test once took over 1.5 s for the cycle after the failed one)
    svc = make_service(pbs, r, timeout=5)
    pbs.set("10-busy")
    assert svc.run_one()
    drain(r, SITE)
    before = r.xlen(K.events)
    pbs.set("20-after-qdel", mode=mode)
    assert not svc.run_one()
    drain(r, SITE)
    m = meta(r, SITE)
    assert m["status"] == "failing" and re.search(message, m["last_error"]), m["last_error"]
    assert m["consecutive_failures"] == "1"
    assert r.xlen(K.events) == before  # no event at all, and certainly no final
    pbs.set("20-after-qdel")
    assert svc.run_one()
    drain(r, SITE)
    m = meta(r, SITE)
    assert m["status"] == "ok" and m["consecutive_failures"] == "0"
    assert r.xlen(K.events) > before


def test_missing_qstat_is_a_clear_failed_cycle(pbs, r, tmp_path):
    from jobtap.collector.backends.pbs import PBSBackend

    col = Collector(PBSBackend(qstat=str(tmp_path / "no-qstat")), r, site=SITE)
    svc = CollectorService(col, interval=0.1)
    assert not svc.run_one()
    assert "command not found" in meta(r, SITE)["last_error"]
    assert r.xlen(K.events) == 0


def test_empty_live_list_is_believed_only_where_history_confirms(pbs, r):
    svc = make_service(pbs, r)
    pbs.set("10-busy")
    assert svc.run_one()
    drain(r, SITE)
    # qstat suddenly prints no jobs; its history (-x) still knows 0.vm finished,
    # and still shows the others as queued/running: none of them may end.
    pbs.set("10-busy", mode="empty", modes={"qstat-x": "ok"})
    assert svc.run_one()
    drain(r, SITE)
    finals = [e for e in site_events(r, SITE) if e["type"] == "final"]
    assert {e["object_id"] for e in finals} <= {"0.vm"}
    assert from_hash(r.hgetall(K.job("bob", "1.vm")))["state"] == "running"
    assert "not confirmed by history" in meta(r, SITE)["last_warning"]
