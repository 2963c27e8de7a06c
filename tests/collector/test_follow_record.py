"""Follow mode with the PBS jobobit hook's record: the hook
(deploy/pbs/jobtap_poke_hook.py, run with a stand-in of PBS's ``pbs`` module
on the job as ``pbs.event().job`` holds it at jobobit, built from a real
capture) writes the poke with the job's final record; the collector ships the
final without a qstat, and the reconciliations that follow ship nothing more
for the job.  A record-less poke is re-checked with qstat as before.  Through
the qstat stand-in (its log counts the calls) and a real redis-server."""

from __future__ import annotations

import json
import threading
import time

import pytest

from jobtap.collector.cycle import Collector
from jobtap.collector.follow.pokes import PokeReader, poke
from jobtap.collector.service import CollectorService
from jobtap.keys import POKES_MAXLEN, SiteKeys
from jobtap.schema import TERMINAL
from sim.rig.paths import fixtures_dir
from sim.rig.pbs_hook import at_jobobit, pbs_job, run_hook
from sim.rig.pipeline import FakePBS, drain, site_events

FIXTURES = fixtures_dir() / "pbs"
SITE = "pbsrecord"
K = SiteKeys(SITE)


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")  # the stand-in's captures are read in UTC (tz="UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def captured(stage: str, job_id: str) -> dict:
    return json.loads((FIXTURES / f"{stage}.qstat-t-f-x.json").read_text())["Jobs"][job_id]


def service(fake: FakePBS, r) -> CollectorService:
    svc = CollectorService(Collector(fake.backend(), r, site=SITE, nodes_every=10**6),
                           interval=3600, follow=True)  # fmt: skip
    svc.follower.pokes = PokeReader(r, K)
    assert svc.run_one()
    return svc


def jobobit(tmp_path, redis_server, stage: str, job_id: str, **config) -> None:
    """The server hook's jobobit for ``job_id`` as it ended in ``stage``."""
    conf = {"site": SITE, "redis": f"redis://127.0.0.1:{redis_server.port}/0",
            "stream": K.pokes, "maxlen": POKES_MAXLEN, "jobtap": "/bin/true", **config}  # fmt: skip
    job = pbs_job(at_jobobit(captured(stage, job_id)))
    run = run_hook(conf, tmp_path / "hook.json", "JOBOBIT", job_id, job=job)
    assert run.accepted == [True] and run.logged == []


def qstat_calls(log) -> list[list[str]]:
    if not log.exists():
        return []
    return [c["args"] for c in map(json.loads, log.read_text().splitlines())
            if c["program"] == "qstat"]  # fmt: skip


@pytest.mark.parametrize(
    ("stage", "job_id", "substate"),
    [("30-array-running", "1.vm", 91), ("40-drained", "3.vm", 93), ("40-drained", "4.vm", 92)],
)
def test_a_final_from_the_hooks_record_needs_no_qstat(tmp_path, monkeypatch, r, redis_server,
                                                      stage, job_id, substate):  # fmt: skip
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    log = tmp_path / "calls.jsonl"
    fake.set("10-busy", log=str(log))
    svc = service(fake, r)
    fake.set(stage, log=str(log))  # the server moved the job to history
    before = len(qstat_calls(log))
    jobobit(tmp_path, redis_server, stage, job_id)
    (_id, fields), = r.xrange(K.pokes)  # fmt: skip
    assert fields[b"ids"] == job_id.encode() and b"record" in fields
    svc.follower.pokes.read(block_ms=1000)
    assert svc.follower.serve_pokes()
    assert len(qstat_calls(log)) == before  # no qstat for the job's end
    seen = svc.collector.ledger.of("job")[job_id]
    assert seen.state in TERMINAL
    assert int(r.hget(K.meta, "poked_jobs_refreshed")) == 1
    # The next reconciliation (the job left the live list) ships nothing for it.
    report = svc.collector.run_cycle(tier="reconcile")
    assert job_id not in svc.collector.ledger.of("job")
    assert report.counts.get("bad", 0) == 0
    drain(r, SITE)
    events = [e for e in site_events(r, SITE) if e["object_id"] == job_id]
    assert [e["type"] for e in events] == ["new", "final"]
    assert captured(stage, job_id)["substate"] == substate


def test_a_record_less_poke_after_a_final_from_a_record_is_not_read(
    tmp_path, monkeypatch, r, redis_server
):
    """Slurm's completion record can come before the epilog's record-less poke:
    once a job's final went out from a carried record, a later poke of it asks
    the scheduler nothing (a read could ship nothing: a final is the last)."""
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    log = tmp_path / "calls.jsonl"
    fake.set("10-busy", log=str(log))
    svc = service(fake, r)
    fake.set("40-drained", log=str(log))
    jobobit(tmp_path, redis_server, "40-drained", "3.vm")
    svc.follower.pokes.read(block_ms=1000)
    assert svc.follower.serve_pokes()
    before = len(qstat_calls(log))
    poke(r, K, ["3.vm"], ended=True)
    assert svc.follower.pokes.read(block_ms=1000) == 1
    report = svc.collector.refresh(svc.follower.pokes.take(10))
    assert report.counts == {"poked_after_carried_final": 1}
    assert len(qstat_calls(log)) == before


def test_the_fingerprint_agrees_with_the_listing(tmp_path, monkeypatch, r, redis_server):
    """A subjob of a running array stays in the live listing (X): the
    reconciliation compares its fingerprint with the one the hook's record
    gave, and they agree."""
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    fake.set("10-busy")
    svc = service(fake, r)
    fake.set("30-array-running")
    jobobit(tmp_path, redis_server, "30-array-running", "2[1].vm")
    svc.follower.pokes.read(block_ms=1000)
    assert svc.follower.serve_pokes()
    shipped = svc.collector.ledger.of("job")["2[1].vm"].fingerprint
    report = svc.collector.run_cycle(tier="reconcile")
    assert svc.collector.ledger.of("job")["2[1].vm"].fingerprint == shipped
    assert report.counts.get("poked_final_unchanged", 0) == 0  # equal, not merely held back


def test_a_later_listing_that_differs_does_not_ship_the_job_again(
    tmp_path, monkeypatch, r, redis_server
):
    """The last subjob of an array: the hook sees it X, but the server turns
    every subjob F when the array ends, in the same second.  The record
    ``qstat -x`` prints then is not the hook's; the job is not read again
    after its final (a later poke, a reconciliation) and the final is not
    shipped twice."""
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    log = tmp_path / "calls.jsonl"
    fake.set("30-array-running", log=str(log))
    svc = service(fake, r)
    fake.set("40-drained", log=str(log))
    native = dict(captured("40-drained", "2[4].vm"), job_state="X")
    job = pbs_job(at_jobobit(native))
    conf = {"site": SITE, "redis": f"redis://127.0.0.1:{redis_server.port}/0",
            "stream": K.pokes, "maxlen": POKES_MAXLEN, "jobtap": "/bin/true"}  # fmt: skip
    run_hook(conf, tmp_path / "hook.json", "JOBOBIT", "2[4].vm", job=job)
    svc.follower.pokes.read(block_ms=1000)
    assert svc.follower.serve_pokes()
    drain(r, SITE)
    finals = [e for e in site_events(r, SITE) if e["object_id"] == "2[4].vm"]
    assert [e["type"] for e in finals][-1] == "final"
    calls = len(qstat_calls(log))
    again = svc.collector.refresh(["2[4].vm"])  # a record-less poke: nothing is read
    assert again.counts == {"poked_after_carried_final": 1} and len(qstat_calls(log)) == calls
    svc.collector.run_cycle(tier="reconcile")  # neither listed nor looked up again
    assert not any("2[4].vm" in args for args in qstat_calls(log)[calls:])
    drain(r, SITE)
    assert [e for e in site_events(r, SITE) if e["object_id"] == "2[4].vm"] == finals


def test_a_record_less_poke_is_rechecked_with_qstat(tmp_path, monkeypatch, r, redis_server):
    """Without a record (too long for "max_record", another event, an old
    hook), the poke is served as before: one qstat -E -x."""
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    log = tmp_path / "calls.jsonl"
    fake.set("10-busy", log=str(log))
    svc = service(fake, r)
    fake.set("40-drained", log=str(log))
    jobobit(tmp_path, redis_server, "40-drained", "3.vm", max_record=100)  # too long: no record
    (_id, fields), = r.xrange(K.pokes)  # fmt: skip
    assert fields[b"ids"] == b"3.vm" and b"record" not in fields  # a plain poke
    before = len(qstat_calls(log))
    svc.follower.pokes.read(block_ms=100)
    assert svc.follower.serve_pokes()
    calls = qstat_calls(log)[before:]
    assert len(calls) == 1 and "-x" in calls[0] and "3.vm" in calls[0]
    assert svc.collector.ledger.of("job")["3.vm"].state in TERMINAL


def test_a_record_is_shipped_while_a_cycle_waits_for_qstat(tmp_path, monkeypatch, r, redis_server):
    """A cycle's commands (here a reconciliation's qstat, slowed to seconds)
    do not hold up a final that needs none: the poke is served meanwhile, and
    what the collector remembers of it is noted once the cycle is over."""
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    fake.set("10-busy")
    svc = service(fake, r)
    fake.set("40-drained", costs={"scale": 40})  # 1.4 s per server connection
    served: list[float] = []
    refresh = svc.collector.refresh

    def noting_refresh(ids, given=None, **kw):
        served.append(time.monotonic())
        return refresh(ids, given, **kw)

    monkeypatch.setattr(svc.collector, "refresh", noting_refresh)
    timer = threading.Timer(0.5, jobobit, args=(tmp_path, redis_server, "40-drained", "3.vm"))
    timer.start()
    try:
        assert svc.run_one()  # the reconciliation
    finally:
        timer.join()
    ended = time.monotonic()
    assert served and ended - served[0] > 0.5  # served long before the cycle ended
    assert svc.collector.ledger.of("job")["3.vm"].state in TERMINAL
    assert "3.vm" in svc.collector.poked_finals
    drain(r, SITE)
    events = [e for e in site_events(r, SITE) if e["object_id"] == "3.vm"]
    assert [e["type"] for e in events] == ["new", "final"]


def test_a_record_is_shipped_while_a_record_less_poke_waits_for_qstat(
    tmp_path, monkeypatch, r, redis_server
):
    """A record-less poke's qstat -E (here held until the barrier below) does
    not hold up a final that needs none: the jobobit poke that arrives while
    it waits is shipped meanwhile.  Barrier: the read of the record-less job
    waits for that final to be shipped, and would time out if it were not."""
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    fake.set("10-busy")
    svc = service(fake, r)
    fake.set("40-drained")
    final_shipped = threading.Event()
    refresh = svc.collector.refresh

    def noting_refresh(ids, given=None, **kw):
        report = refresh(ids, given, **kw)
        if given and "3.vm" in given:
            final_shipped.set()
        return report

    monkeypatch.setattr(svc.collector, "refresh", noting_refresh)
    backend = svc.collector.backend
    stat_some = backend.stat_some
    waited: list[bool] = []

    def held_stat_some(ids):
        if "1.vm" in ids:  # the record-less poke: its answer waits for the record's final
            jobobit(tmp_path, redis_server, "40-drained", "3.vm")
            waited.append(final_shipped.wait(30))
        return stat_some(ids)

    monkeypatch.setattr(backend, "stat_some", held_stat_some)
    svc.follower.pokes.pending["1.vm"] = None  # a runjob or modifyjob poke: no record
    assert svc.follower.serve_pokes()
    assert waited == [True]
    seen = svc.collector.ledger.of("job")
    assert seen["3.vm"].state in TERMINAL and seen["1.vm"].state in TERMINAL
    assert "3.vm" in svc.collector.poked_finals  # noted once the refresh was over


def test_a_record_poked_after_the_final_went_out_is_neither_read_nor_shipped(
    tmp_path, monkeypatch, r, redis_server
):
    """A read found the job's end first (Slurm: the epilog's poke, then the
    completion record of jobcomp/script a moment later) while the job is still
    listed: the record that comes after the final adds nothing, and nothing is
    asked of the scheduler for it."""
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    log = tmp_path / "calls.jsonl"
    fake.set("10-busy", log=str(log))
    svc = service(fake, r)
    fake.set("30-array-running", log=str(log))
    svc.collector.run_cycle(tier="reconcile")  # 2[1].vm's final, from the listing
    assert svc.collector.ledger.of("job")["2[1].vm"].state in TERMINAL  # still listed (X)
    drain(r, SITE)
    calls = len(qstat_calls(log))
    jobobit(tmp_path, redis_server, "30-array-running", "2[1].vm")
    svc.follower.pokes.read(block_ms=1000)
    ids = list(svc.follower.pokes.pending)
    report = svc.collector.refresh(ids, svc.follower.carried_records(ids))
    assert report.counts.get("poked_record_after_final") == 1
    assert report.counts.get("chunks", 0) == 0 and len(qstat_calls(log)) == calls
    events = [e for e in site_events(r, SITE) if e["object_id"] == "2[1].vm"]
    assert [e["type"] for e in events].count("final") == 1
