"""A follow feed that keeps failing shows: in ``meta`` (what ``jobtap status``
and the metrics read), in ``jobtap status``, and in the exit status of
``jobtap collector --once --follow``.  Flux's feed through the flux stand-in,
whose ``flux python`` runs the reader as a real Flux does."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from jobtap.cli.app import main
from jobtap.collector.backends.flux import FluxBackend
from jobtap.collector.follow.feed import FeedThread
from jobtap.collector.service import FEED_FAILED
from jobtap.keys import SiteKeys
from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.pipeline import meta
from sim.rig.wait import eventually
from tests.support.flux import fake_flux

FIXTURES = fixtures_dir() / "flux"
SITE = "feedhealth"
K = SiteKeys(SITE)


@pytest.fixture
def flux(tmp_path, monkeypatch):
    return fake_flux(tmp_path, monkeypatch, stage="07-final")


def started(feed: FeedThread) -> FeedThread:
    feed.start()
    return feed


def test_a_feed_that_keeps_failing_says_so_in_meta_and_status(flux, r, redis_server):
    flux(modes={"python": "fail"})
    feed = started(FeedThread(FluxBackend(flux=str(FAKE_BIN / "flux")), r, K, backoff=0.05))
    try:
        eventually(lambda: meta(r, SITE).get("feed_status") == "failing", timeout=60,
                   what="failing feed")  # fmt: skip
    finally:
        feed.stop()
        feed.join(timeout=10)
    health = meta(r, SITE)
    assert int(health["feed_restarts"]) >= FeedThread.FAILING_AFTER
    assert int(health["feed_failures"]) >= FeedThread.FAILING_AFTER
    assert "Unable to connect to Flux" in health["feed_last_error"]
    assert not feed.up.is_set() and feed.batches == 0
    # what jobtap status prints of it, while it was failing
    r.hset(K.meta, mapping={"status": "ok", "backend": "flux", "follow": 1,
                            "feed": "flux event feed", "feed_status": "failing"})  # fmt: skip
    out = CliRunner().invoke(main, ["status", "--redis", redis_server.url, "--site", SITE])
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if x.strip().startswith("feed"))
    assert "failing" in line and "Unable to connect to Flux" in line


def test_a_working_feed_is_up_and_pokes(flux, r):
    flux(journal_end="open")
    feed = started(FeedThread(FluxBackend(flux=str(FAKE_BIN / "flux")), r, K, backoff=0.05))
    try:
        assert feed.wait_started(20)
        eventually(lambda: r.xlen(K.pokes) > 0, timeout=60, what="pokes from the feed")
        health = meta(r, SITE)
        assert health["feed_status"] == "up" and health["feed_failures"] == "0"
        assert "feed_restarts" not in health
    finally:
        feed.stop()
        feed.join(timeout=10)
    assert meta(r, SITE)["feed_status"] == "stopped"


def collector_once(redis_server, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobtap.cli", "collector", "--redis", redis_server.url,
         "--site", SITE, "--backend", "flux", "--flux", str(FAKE_BIN / "flux"), "--once",
         *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_collector_once_follow_fails_when_the_feed_cannot_start(flux, redis_server, r):
    flux(modes={"python": "fail"})
    res = collector_once(redis_server, "--follow")
    assert res.returncode == FEED_FAILED, res.stderr
    assert "Unable to connect to Flux" in res.stderr
    health = meta(r, SITE)
    assert health["last_cycle"] == "1" and int(health["feed_restarts"]) >= 1


def test_collector_once_follow_passes_when_the_feed_starts(flux, redis_server, r):
    flux(journal_end="open")
    res = collector_once(redis_server, "--follow")
    assert res.returncode == 0, res.stderr
    assert meta(r, SITE)["follow"] == "1"


def test_collector_once_without_follow_does_not_start_a_feed(flux, redis_server, r):
    flux(modes={"python": "fail"})
    res = collector_once(redis_server)
    assert res.returncode == 0, res.stderr
    health = meta(r, SITE)
    assert health["follow"] == "0" and "feed_status" not in health
