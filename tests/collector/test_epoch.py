"""The collector and the site epoch: its state kept on the host, and what it
ships again when Redis' data is not what it wrote (Redis came back empty, or
went back to an older snapshot, with or without a restart)."""

from __future__ import annotations

import json
import logging

from jobtap.collector.cycle import Collector
from jobtap.collector.hoststate import FILENAME, HostState, default_state_dir
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from jobtap.sim.localredis import RedisServer
from sim.rig.epochs import Written, check_finals_against_truth
from sim.rig.pipeline import drain
from sim.rig.redisloss import reload_from, restart_empty, restart_from, snapshot

SITE = "ce"
K = SiteKeys(SITE)
TICK = 120.0


# -- the state file ---------------------------------------------------------------------------
def test_host_state_round_trip_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "deep" / "site" / FILENAME
    state = HostState.load(path)
    assert (state.epoch, state.cycle) == (None, 0)
    state.save("mg3k1x2a7f3c", 41)
    state.save("mg3k1x2a7f3c", 42)
    assert json.loads(path.read_text()) == {"epoch": "mg3k1x2a7f3c", "cycle": 42}
    assert [p.name for p in path.parent.iterdir()] == [FILENAME]
    again = HostState.load(path)
    assert (again.epoch, again.cycle) == ("mg3k1x2a7f3c", 42)


def test_a_damaged_state_file_is_ignored_and_an_unwritable_one_only_logged(tmp_path, caplog):
    path = tmp_path / FILENAME
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="jobtap.collector"):
        state = HostState.load(path)
        assert (state.epoch, state.cycle) == (None, 0)
        blocked = tmp_path / "file-not-dir"
        blocked.write_text("")
        stuck = HostState(blocked / FILENAME)
        for n in range(3):
            stuck.save("mg3k1x2a7f3c", n)  # no exception: the collector goes on
    assert sum("cannot keep the collector state" in m for m in caplog.messages) == 1
    assert any("ignoring the collector state" in m for m in caplog.messages)
    assert stuck.cycle == 2  # still remembered in memory


def test_default_state_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("STATE_DIRECTORY", f"{tmp_path}/a:{tmp_path}/b")
    assert default_state_dir("hpc1") == tmp_path / "a" / "hpc1"
    monkeypatch.delenv("STATE_DIRECTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir("hpc1") == tmp_path / "xdg" / "jobtap" / "hpc1"


# -- losses ------------------------------------------------------------------------------------
class Site:
    """A sim cluster, an in-process collector service keeping its state in a
    file, and a real rq worker draining after each cycle."""

    def __init__(self, server: RedisServer, state_path, seed: int = 3):
        self.server = server
        self.backend = SimBackend(seed=seed, nodes=20, jobs=300, tick=0)
        self.sim = self.backend.simulation
        self.state_path = state_path
        self.svc = self._service()
        self.written = Written()
        self.last_stat = 0.0

    def _service(self) -> CollectorService:
        col = Collector(self.backend, self.server.client(), site=SITE, nodes_every=2)
        return CollectorService(col, interval=0, state=HostState.load(self.state_path))

    def cycles(self, n: int) -> None:
        for _ in range(n):
            self.sim.advance(TICK)
            self.last_stat = self.sim.now
            assert self.svc.run_one()
            r = self.server.client()
            drain(r, SITE)
            self.written.gather(r, K.events)

    def restart_collector(self) -> None:
        self.svc.release_lock()
        self.svc = self._service()

    def check_cache(self) -> int:
        """Every job the cache holds that ended before the last stat is final in
        it: what the loss took from Redis was shipped again.  Return how many."""
        r = self.server.client()
        ended = 0
        for jid, user in r.hgetall(K.owner).items():
            truth = self.sim.truth[jid.decode()]
            if truth.final_state and truth.transitions[-1][0] <= self.last_stat:
                rec = r.hgetall(K.job(user.decode(), jid.decode()))
                assert rec.get(b"final") == b"1", (jid, rec.get(b"state"), truth)
                ended += 1
        return ended

    def meta(self) -> dict[str, str]:
        raw = self.server.client().hgetall(K.meta)
        return {k.decode(): v.decode() for k, v in raw.items()}


def test_an_older_snapshot_without_a_restart_is_caught_by_the_collector(reloadable_redis, tmp_path):
    reloadable = reloadable_redis
    site = Site(reloadable, tmp_path / "state" / FILENAME)
    site.cycles(4)
    aside = snapshot(reloadable)
    known = len(site.written.order)
    site.cycles(4)  # jobs start and end: events the snapshot does not have
    old = site.meta()["epoch"]
    ended_meanwhile = sum(e["type"] == "final" for e in site.written.order[known:])
    reload_from(reloadable, aside)  # the same run_id
    assert int(site.meta()["cycle"]) < site.svc.collector.last_cycle
    site.cycles(3)
    m = site.meta()
    assert (m["epoch_cause"], m["epoch_previous"]) == ("behind", old)
    assert site.written.epochs() == [old, m["epoch"]]
    site.written.check_versions()
    assert ended_meanwhile > 0
    assert check_finals_against_truth(site.written, site.sim, site.last_stat) > 0
    assert site.check_cache() >= ended_meanwhile


def test_redis_back_empty_gets_every_job_again_and_the_finals_it_lost(redis_server, tmp_path):
    site = Site(redis_server, tmp_path / "state" / FILENAME)
    site.cycles(5)
    first = site.meta()["epoch"]
    last_cycle = site.svc.collector.last_cycle
    restart_empty(redis_server)
    site.sim.advance(3 * TICK)  # jobs end while Redis is empty
    site.cycles(3)
    m = site.meta()
    assert m["epoch_cause"] == "empty" and m["epoch"] != first
    assert int(m["cycle"]) > last_cycle  # cycle numbers kept growing
    live = site.sim.live_count
    assert redis_server.client().hlen(K.owner) >= live * 0.9
    site.written.check_versions()
    assert check_finals_against_truth(site.written, site.sim, site.last_stat) > 0
    assert site.check_cache() > 0


def test_a_restarted_collector_on_an_older_snapshot_keeps_counting_from_its_state(
    redis_server, tmp_path
):
    site = Site(redis_server, tmp_path / "state" / FILENAME)
    site.cycles(3)
    aside = snapshot(redis_server)
    site.cycles(3)
    before = site.svc.collector.last_cycle
    assert json.loads(site.state_path.read_text())["cycle"] == before
    restart_from(redis_server, aside)
    site.restart_collector()  # a new process: only its state file remembers
    site.cycles(2)
    m = site.meta()
    assert m["epoch_cause"] == "restart"
    assert site.svc.collector.last_cycle > before
    site.written.check_versions()
    check_finals_against_truth(site.written, site.sim, site.last_stat)
    site.check_cache()
