"""Follow mode: pokes refresh just the poked jobs between full cycles, through
the same path, so push and poll never duplicate each other."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobtap.collector.cycle import Collector
from jobtap.collector.follow import PokeReader, poke
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from tests.support.paths import fixtures_dir
from tests.support.pipeline import check_against_truth, drain, site_events
from tests.support.wait import eventually

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
    svc.pokes = PokeReader(r, K)
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
            svc.pokes.read(block_ms=10)
            assert svc.serve_pokes()
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
    from jobtap.collector.follow import FeedThread

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


def test_a_job_poked_while_exiting_is_looked_at_again(r):
    """The epilog pokes while the job is still exiting (Slurm's COMPLETING, PBS's
    E); the collector looks again shortly, so the final needs no second poke."""
    import copy
    import time

    import orjson

    from jobtap.collector.backends.pbs import normalise_job

    base = fixtures_dir() / "pbs"
    running = orjson.loads((base / "10-busy.qstat-f.json").read_bytes())["Jobs"]["1.vm"]
    done = orjson.loads((base / "80-final.qstat-f-x.json").read_bytes())["Jobs"]["1.vm"]
    exiting = dict(copy.deepcopy(running), job_state="E", substate=50)

    class Scheduler:
        scheduler = "pbs"
        answers = [exiting, done]

        def stat_jobs(self):
            return {"1.vm": copy.deepcopy(running)}

        def stat_some(self, ids):
            return {"1.vm": copy.deepcopy(self.answers.pop(0) if len(self.answers) > 1
                                          else self.answers[0])}  # fmt: skip

        def history(self, ids):
            return {}

        def normalise_job(self, jid, native):
            return normalise_job(jid, native, tz="UTC")

        stat_nodes = stat_queues = lambda self: {}
        normalise_node = normalise_queue = normalise_job

    svc = CollectorService(Collector(Scheduler(), r, site=SITE, nodes_every=10**6),
                           interval=60, follow=True)  # fmt: skip
    svc.pokes = PokeReader(r, K)
    assert svc.run_one()
    poke(r, K, ["1.vm"])  # once only: at the epilog, while the job is exiting
    seen = svc.collector.tracker.of("job")

    def served_until_final() -> bool:
        svc.wait_serving_pokes(time.monotonic() + 1)  # the service's loop, a second at a time
        return seen["1.vm"].state == "cancelled"

    eventually(served_until_final, timeout=20, interval=0, what="the re-checked final")
    drain(r, SITE)
    types = [(e["type"], e["record"]["state"]) for e in site_events(r, SITE)]
    assert types == [("new", "running"), ("state", "exiting"), ("final", "cancelled")]
    assert not svc.rechecks
