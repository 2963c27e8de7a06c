"""Follow mode: pokes refresh just the poked jobs between full cycles, through
the same path, so push and poll never duplicate each other."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobtap.collector.backends.base import PokedReads
from jobtap.collector.cycle import Collector
from jobtap.collector.follow.pokes import PokeReader, poke
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from sim.rig.paths import fixtures_dir
from sim.rig.pipeline import check_against_truth, drain, site_events
from sim.rig.wait import eventually

SITE = "follow1"
K = SiteKeys(SITE)


def test_pokes_coalesce_and_a_flood_is_bounded(r):
    reader = PokeReader(r, K, max_pending=5)
    poke(r, K, ["1.x", "2.x", "1.x"])
    poke(r, K, ["2.x", "3.x"])
    assert reader.read(block_ms=100) == 2
    assert reader.take(10) == ["1.x", "2.x", "3.x"]
    poke(r, K, [f"{i}.y" for i in range(20)])
    reader.read(block_ms=100)
    assert len(reader.pending) == 5 and reader.dropped == 15
    assert reader.take(2) == ["0.y", "1.y"] and len(reader.pending) == 3


def test_reader_starts_after_what_was_already_poked(r):
    poke(r, K, ["old.x"])
    reader = PokeReader(r, K)
    assert reader.read(block_ms=50) == 0
    poke(r, K, ["new.x"])
    reader.read(block_ms=100)
    assert reader.take(10) == ["new.x"]


def test_an_ended_poke_waits_for_the_record_another_poke_will_carry(r):
    """Slurm's epilog pokes an ended job before jobcomp's script sends its
    completion record: once the stream has carried a record, such a poke is
    held (not ready) until its record comes or ``carried_soon`` passes; before
    any record, or for a poke that does not say the job ended, nothing waits."""
    now = [100.0]
    reader = PokeReader(r, K, carried_soon=0.5, clock=lambda: now[0])
    poke(r, K, ["1"], ended=True)  # no record seen yet: this site may send none
    r.xadd(K.pokes, {"ids": "2", "record": b"{}", "ended": "1"})
    poke(r, K, ["3"], ended=True)  # records come here: 3's is on its way
    poke(r, K, ["4"])  # a start: nothing to wait for
    assert reader.read(block_ms=1000) == 4
    assert reader.ready() == ["1", "2", "4"] and list(reader.pending) == ["1", "2", "3", "4"]
    assert reader.take(10) == ["1", "2", "4"] and reader.next_release() == 100.5
    r.xadd(K.pokes, {"ids": "3", "record": b"{}", "ended": "1"})  # the record came
    assert reader.read(block_ms=1000) == 1
    assert reader.ready() == ["3"] and reader.records == {"2": b"{}", "3": b"{}"}
    poke(r, K, ["5"], ended=True)  # its record never comes
    assert reader.read(block_ms=1000) == 1 and reader.take(10) == ["3"]
    now[0] += 0.49
    assert reader.ready() == []
    now[0] += 0.01
    assert reader.take(10) == ["5"] and reader.next_release() == float("inf")


def test_a_start_poke_settles_before_its_job_is_read(r):
    """``settle``: a record-less poke that does not say the job ended (Slurm's
    prolog) is held that long, so the read does not meet slurmctld while it
    launches the job; an ended poke of the same job meanwhile holds it for
    its record as long as that takes, and the record releases it at once."""
    now = [100.0]
    reader = PokeReader(r, K, carried_soon=0.5, settle=0.25, clock=lambda: now[0])
    r.xadd(K.pokes, {"ids": "9", "record": b"{}", "ended": "1"})  # records come here
    poke(r, K, ["1"])  # a start
    poke(r, K, ["2"])  # another
    assert reader.read(block_ms=1000) == 3
    assert reader.take(10) == ["9"] and reader.next_release() == 100.25
    now[0] += 0.2
    poke(r, K, ["2"], ended=True)  # it ended before its start was read: wait for its record
    assert reader.read(block_ms=1000) == 1
    now[0] += 0.05
    assert reader.take(10) == ["1"] and reader.next_release() == 100.7
    r.xadd(K.pokes, {"ids": "2", "record": b"{}", "ended": "1"})
    assert reader.read(block_ms=1000) == 1
    assert reader.take(10) == ["2"] and reader.records["2"] == b"{}"


def test_an_ended_poke_after_the_end_record_keeps_the_record(r):
    """jobcomp's record may come before the epilog's record-less poke (20 of 62
    jobs at a job a second on 24.11): that poke says nothing the record does
    not, so the record stays and nothing waits for another one; any other
    record-less poke after a record still drops it (ask the scheduler)."""
    reader = PokeReader(r, K, carried_soon=0.5, clock=lambda: 100.0)
    for jid in ("1", "2"):
        r.xadd(K.pokes, {"ids": jid, "record": b"{}", "ended": "1"})
    poke(r, K, ["1"], ended=True)  # the epilog, late
    poke(r, K, ["2"])  # something else moved: the record may be stale
    assert reader.read(block_ms=1000) == 4
    assert reader.records == {"1": b"{}"} and reader.take(10) == ["1", "2"]


def test_unknown_and_hostile_pokes_are_harmless(r):
    col = Collector(SimBackend(seed=3, nodes=10, jobs=50, tick=0), r, site=SITE)
    col.run_cycle()
    drain(r, SITE)
    before = r.xlen(K.events)
    report = col.refresh(["999999.simhost", "", "a b", "-x", "x" * 400])
    drain(r, SITE)
    assert r.xlen(K.events) == before
    assert report.counts.get("changed", 0) == 0


def test_jobtap_poke_command_never_fails_the_caller(redis_server, r):
    res = subprocess.run(
        [sys.executable, "-m", "jobtap.cli", "poke", "--redis", redis_server.url, "--site", SITE,
         "12.x", "13.x"], capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    entries = r.xrange(K.pokes)
    assert entries[-1][1][b"ids"] == b"12.x 13.x"
    res = subprocess.run(
        [sys.executable, "-m", "jobtap.cli", "poke", "--redis", "redis://127.0.0.1:1/0",
         "--site", SITE, "12.x"], capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert res.returncode == 0 and "not delivered" in res.stderr


@pytest.mark.timeout(300)
def test_push_and_poll_together_on_the_sim(r):
    """An hour of the simulated cluster: every state change is poked (as hooks
    would) and refreshed within its 5-second step, and a full cycle runs every
    30 s as reconciliation; checked against the ground truth."""
    backend = SimBackend(seed=11, nodes=40, jobs=500, tick=0)
    sim = backend.simulation
    svc = CollectorService(Collector(backend, r, site=SITE, nodes_every=4, reconcile_every=0),
                           interval=30, follow=True)  # fmt: skip
    svc.follower.pokes = PokeReader(r, K)
    pushed: list[int] = []  # jobs each targeted refresh found changed
    refresh = svc.collector.refresh

    def counting_refresh(ids):
        report = refresh(ids)
        pushed.append(report.counts.get("changed", 0))
        return report

    svc.collector.refresh = counting_refresh
    stat_times: list[float] = []
    refreshes = 0
    for step in range(720):  # 720 steps of 5 s: one simulated hour
        sim.advance(5)
        if step % 6 == 0:
            assert svc.run_one()
            stat_times.append(sim.now)
            if step == 0:  # everything is new at first: count from here on
                drain(r, SITE)
                first = r.xlen(K.events)
        ids = sim.take_pokes()
        if ids:
            poke(r, K, ids)
            svc.follower.pokes.read(block_ms=10)
            assert svc.follower.serve_pokes()
            refreshes += 1
        if step % 20 == 0:
            drain(r, SITE)
    assert svc.run_one()
    stat_times.append(sim.now)
    drain(r, SITE)
    by_job, checked = check_against_truth(r, SITE, sim, stat_times)
    assert refreshes > 100 and checked > 100
    # the pushes carried most state changes (the full cycles most usage updates)
    later = site_events(r, SITE)[first:]
    transitions = [e for e in later if e["type"] in ("new", "state", "final")]
    print(f"{sum(pushed)} jobs refreshed by pokes; {len(transitions)} new/state/final events")
    assert sum(pushed) > 0.5 * len(transitions)


def test_flux_journal_feed_pokes_every_job(r, flux):
    """The feed thread runs the Flux journal reader (the replay stand-in of
    `flux python READER`) and turns its batches into pokes naming every job."""
    from jobtap.collector.follow.feed import FeedThread

    backend = flux
    expected = set(backend.stat_jobs())
    feed = FeedThread(backend, r, K)
    feed.start()
    poked: set[str] = set()

    def every_job_poked() -> bool:
        for _id, fields in r.xrange(K.pokes):
            poked.update(fields[b"ids"].decode().split())
        assert expected <= poked, expected - poked
        return True

    try:
        eventually(every_job_poked, timeout=30, interval=0.1)
    finally:
        feed.stop()


def test_fast_poke_speaks_to_redis_with_auth_and_db(redis_server, r):
    """`jobtap poke` talks the Redis protocol itself (no redis-py import): with a
    user and password, a database number, and a clear failure otherwise."""
    from jobtap.cli import poke as fast

    r.execute_command("ACL", "SETUSER", "poker", "on", ">pw", "+xadd", "~jobtap:*")
    url = f"redis://poker:pw@127.0.0.1:{redis_server.port}/0"
    entry = fast.poke(url, SITE, ["7.x", "8.x"])
    assert r.xrange(K.pokes)[-1][0] == entry
    fast.poke(f"redis://127.0.0.1:{redis_server.port}/3", SITE, ["9.x"])
    assert redis_server.client(db=3).xrange(K.pokes)[-1][1][b"ids"] == b"9.x"
    with pytest.raises(fast.PokeError, match="WRONGPASS"):
        fast.poke(f"redis://poker:nope@127.0.0.1:{redis_server.port}/0", SITE, ["7.x"])
    assert fast.main(["--redis", f"redis://poker:nope@127.0.0.1:{redis_server.port}/0",
                      "--site", SITE, "--strict", "7.x"]) == 1  # fmt: skip
    assert fast.main(["--site", "bad site", "7.x"]) == 2


def _job_1vm(name: str) -> dict:
    """PBS job 1.vm as a capture shows it: ``running`` (10-busy) or ``done``
    (80-final, cancelled)."""
    import orjson

    base = fixtures_dir() / "pbs"
    capture = {"running": "10-busy.qstat-f.json", "done": "80-final.qstat-f-x.json"}[name]
    return orjson.loads((base / capture).read_bytes())["Jobs"]["1.vm"]


class _OneJobScheduler:
    """A scheduler of one job, 1.vm, whose records are PBS captures; subclasses
    say what its listing and its single reads answer."""

    scheduler = "pbs"

    def history(self, ids):
        return {}

    def normalise_job(self, jid, native):
        from jobtap.collector.backends.pbs import normalise_job

        return normalise_job(jid, native, tz="UTC")

    stat_nodes = stat_queues = lambda self: {}
    normalise_node = normalise_queue = normalise_job

    def poked_reads(self):
        return PokedReads()


def test_a_job_poked_while_exiting_is_looked_at_again(r):
    """The epilog pokes while the job is still exiting (Slurm's COMPLETING, PBS's
    E); the collector looks again shortly, so the final needs no second poke."""
    import copy
    import time

    running, done = _job_1vm("running"), _job_1vm("done")
    exiting = dict(copy.deepcopy(running), job_state="E", substate=50)

    class Scheduler(_OneJobScheduler):
        answers = [exiting, done]

        def stat_jobs(self):
            return {"1.vm": copy.deepcopy(running)}

        def stat_some(self, ids):
            return {"1.vm": copy.deepcopy(self.answers.pop(0) if len(self.answers) > 1
                                          else self.answers[0])}  # fmt: skip

    svc = CollectorService(Collector(Scheduler(), r, site=SITE, nodes_every=10**6),
                           interval=60, follow=True)  # fmt: skip
    svc.follower.pokes = PokeReader(r, K)
    assert svc.run_one()
    poke(r, K, ["1.vm"])  # once only: at the epilog, while the job is exiting
    seen = svc.collector.ledger.of("job")

    def served_until_final() -> bool:
        svc.wait_serving_pokes(time.monotonic() + 1)  # the service's loop, a second at a time
        return seen["1.vm"].state == "cancelled"

    eventually(served_until_final, timeout=20, interval=0, what="the re-checked final")
    drain(r, SITE)
    types = [(e["type"], e["record"]["state"]) for e in site_events(r, SITE)]
    assert types == [("new", "running"), ("state", "exiting"), ("final", "cancelled")]
    assert not svc.follower.rechecks


class _GatedListing(_OneJobScheduler):
    """After the first one, the reconciliation's listing waits for the test
    (``gate``); single reads and their costs are those of Slurm through
    slurmrestd (``PokedReads.costs``): a listing of 10,000 jobs takes slurmctld
    35 ms and the collector seconds, a single read 0.4 ms."""

    def __init__(self) -> None:
        import threading

        self.listings = 0
        self.listing_started = threading.Event()
        self.gate = threading.Event()
        self.read: list[list[str]] = []

    def stat_jobs(self):
        self.listings += 1
        if self.listings > 1:
            self.listing_started.set()
            assert self.gate.wait(60), "the test never opened the gate"
        return {"1.vm": _job_1vm("running")}

    def stat_some(self, ids):
        self.read.append(list(ids))
        return {j: _job_1vm("done") for j in ids if j == "1.vm"}

    def poked_reads(self):
        return PokedReads(costs=lambda: {"listing": 0.035, "single": 0.0004})


def _gated_service(r):
    scheduler = _GatedListing()
    collector = Collector(scheduler, r, site=SITE, nodes_every=10**6, pushed=True)
    svc = CollectorService(collector, interval=60, follow=True)
    svc.follower.pokes = PokeReader(r, K)
    assert svc.run_one()  # the first reconciliation
    collector.plan.last_reconcile = None  # the next cycle reconciles too
    return svc, scheduler


def test_a_poke_is_read_while_a_reconciliation_lists(r):
    """A reconciliation's listing takes seconds on a large queue; a job poked
    meanwhile is read on its own and its final shipped without waiting for
    it.  The listing, older than that read, ships nothing after the final."""
    import threading

    svc, scheduler = _gated_service(r)
    cycle = threading.Thread(target=svc.run_one, name="test-cycle", daemon=True)
    cycle.start()
    try:
        assert scheduler.listing_started.wait(30)
        poke(r, K, ["1.vm"])

        def final_shipped() -> bool:
            drain(r, SITE)
            return any(e["type"] == "final" for e in site_events(r, SITE))

        eventually(final_shipped, timeout=30, what="the final, read beside the listing")
        assert cycle.is_alive()  # the listing still waits: the final did not wait for it
        assert scheduler.read == [["1.vm"]] and scheduler.listings == 2
    finally:
        scheduler.gate.set()
        cycle.join(60)
    assert not cycle.is_alive()
    drain(r, SITE)
    types = [(e["type"], e["record"]["state"]) for e in site_events(r, SITE)]
    assert types == [("new", "running"), ("final", "cancelled")]
    assert svc.collector.ledger.of("job")["1.vm"].state == "cancelled"
    assert not svc.follower.rechecks and not svc.follower.pokes.pending


def test_beside_a_listing_pokes_wait_when_reading_them_costs_more(r):
    """Pokes that single reads would cost more than a listing for wait for the
    cycle's end: no second listing runs beside a reconciliation's."""
    import threading

    svc, scheduler = _gated_service(r)
    cycle = threading.Thread(target=svc.run_one, name="test-cycle", daemon=True)
    cycle.start()
    many = [f"{i}.vm" for i in range(2, 200)]
    try:
        assert scheduler.listing_started.wait(30)
        poke(r, K, many)
        eventually(lambda: svc.follower.pokes.received >= 1, timeout=30, what="the pokes read")
        poke(r, K, many[:1])  # read only after the loop served (or kept) the first ones
        pokes = svc.follower.pokes
        eventually(lambda: pokes.received >= 2, timeout=30, what="the loop's next turn")
        assert svc.follower.pokes.pending and scheduler.read == [] and scheduler.listings == 2
    finally:
        scheduler.gate.set()
        cycle.join(60)
    assert not cycle.is_alive() and scheduler.read == []
    assert list(svc.follower.pokes.pending) == many  # served by the loop between cycles, not here


def test_a_refresh_that_fails_unexpectedly_is_counted_and_the_next_one_runs(r):
    """A bug in reading poked jobs (what no stat raises) fails that refresh,
    counted in meta, and does not stop follow mode: the next poke is served."""

    class Buggy(SimBackend):
        broken = True

        def stat_some(self, job_ids):
            if self.broken:
                self.broken = False
                raise RuntimeError("dictionary changed size during iteration")
            return super().stat_some(job_ids)

    svc = CollectorService(Collector(Buggy(jobs=20, nodes=4, tick=30), r, site=SITE),
                           interval=3600, follow=True)  # fmt: skip
    svc.follower.pokes = PokeReader(r, K)
    assert svc.run_one()
    job = sorted(svc.collector.ledger.of("job"))[0]
    poke(r, K, [job])
    assert svc.follower.pokes.read(block_ms=1000) == 1
    assert not svc.follower.serve_pokes()
    assert r.hget(K.meta, "refreshes_failed") == b"1"
    poke(r, K, [job])
    assert svc.follower.pokes.read(block_ms=1000) == 1
    assert svc.follower.serve_pokes()
