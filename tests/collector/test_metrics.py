"""The collector's Prometheus series and meta facts: they say what the cycles
did, failures are counted by cause (each way a stat really fails), follow mode's
pokes and the feed's restarts are counted, and the health goes out on its
channel after every cycle."""

from __future__ import annotations

import sys

import orjson
import pytest

from jobtap.collector.backends.pbs import PBSBackend
from jobtap.collector.cycle import Collector
from jobtap.collector.follow.feed import FeedThread
from jobtap.collector.follow.pokes import poke
from jobtap.collector.metrics import REFRESH, CollectorMetrics, failure_cause
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from sim.rig.pipeline import drain, meta
from sim.rig.wait import eventually

SITE = "m1"
K = SiteKeys(SITE)


def sample(metrics: CollectorMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, {"site": SITE, **labels})
    return 0.0 if value is None else value


def health_messages(r):
    """A pub/sub connection on the site's health channel, subscribed."""
    ps = r.pubsub(ignore_subscribe_messages=True)
    ps.subscribe(K.health_channel)
    eventually(lambda: ps.get_message(timeout=0.1) is None and ps.subscribed)
    return ps


def next_health(ps) -> dict:
    msg = eventually(lambda: ps.get_message(timeout=0.1), what="a health message")
    return orjson.loads(msg["data"])


def test_cycle_series_match_what_the_cycles_did(r):
    metrics = CollectorMetrics(SITE)
    col = Collector(SimBackend(jobs=200, nodes=20, tick=30), r, site=SITE, nodes_every=1,
                    reconcile_every=0)  # fmt: skip  # every cycle a full stat (tier "full")
    svc = CollectorService(col, interval=0.1, backend_name="sim", metrics=metrics)
    ps = health_messages(r)
    changed = vanished = 0
    for n in range(1, 4):
        assert svc.run_one()
        m = meta(r, SITE)
        changed += int(m["count_changed"])
        vanished += int(m["count_vanished"])
        health = next_health(ps)
        assert health["status"] == "ok" and health["last_cycle"] == int(m["last_cycle"])
        assert health["epoch"] == m["epoch"] and health["interval"] == 0.1
        assert sample(metrics, "jobtap_collector_cycle_duration_seconds_count", tier="full") == n
        # the backlog is read from rq when scraped: what waits now, nothing once drained
        waiting = r.llen("rq:queue:jobtap.m1.state") + r.llen("rq:queue:jobtap.m1.update")
        assert waiting > 0
        backlog = [sample(metrics, "jobtap_queue_backlog_chunks", priority=p)
                   for p in ("state", "update")]  # fmt: skip
        assert sum(backlog) == waiting
        drain(r, SITE)
        assert sample(metrics, "jobtap_queue_backlog_chunks", priority="state") == 0
    m = meta(r, SITE)
    assert sample(metrics, "jobtap_collector_objects_seen", kind="job") == int(m["count_jobs"])
    assert sample(metrics, "jobtap_collector_objects_seen", kind="node") == int(m["count_nodes"])
    assert sample(metrics, "jobtap_collector_objects_changed_total", kind="job") == changed
    assert sample(metrics, "jobtap_collector_objects_vanished_total", kind="job") == vanished
    assert vanished > 0  # jobs finished on the sim during those 90 simulated seconds
    shipped = sample(metrics, "jobtap_collector_chunks_shipped_total")
    assert shipped == int(m["chunks_shipped"]) > 0
    probes = [sample(metrics, "jobtap_collector_probe_duration_seconds_count", tier="full",
                     probe=p) for p in ("jobs", "nodes", "queues")]  # fmt: skip
    assert probes == [3, 3, 3]
    from datetime import datetime

    last_ok = datetime.fromisoformat(m["last_ok_at"]).timestamp()
    assert sample(metrics, "jobtap_collector_last_success_timestamp_seconds") == last_ok
    assert sample(metrics, "jobtap_site_epoch_info", epoch=m["epoch"]) == 1
    ps.close()


def test_a_new_epoch_replaces_the_old_one(r):
    metrics = CollectorMetrics(SITE)
    col = Collector(SimBackend(jobs=20, nodes=4, tick=30), r, site=SITE)
    svc = CollectorService(col, interval=0.1, metrics=metrics)
    assert svc.run_one()
    first = meta(r, SITE)["epoch"]
    r.flushdb()  # Redis lost the site's data
    assert svc.run_one()
    second = meta(r, SITE)["epoch"]
    assert second != first
    assert sample(metrics, "jobtap_site_epoch_info", epoch=second) == 1
    assert metrics.registry.get_sample_value(
        "jobtap_site_epoch_info", {"site": SITE, "epoch": first}
    ) is None  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "cause"),
    [("fail", "exit_status"), ("garbage", "bad_output"), ("hang", "timeout"),
     ("missing", "not_found")],
)  # fmt: skip
def test_failed_cycles_are_counted_by_cause(pbs, r, tmp_path, mode, cause):
    metrics = CollectorMetrics(SITE)
    pbs.set("10-busy", mode="ok" if mode == "missing" else mode)
    timeout = 1 if mode == "hang" else 10  # only the hang may time out, however loaded
    backend = pbs.backend(timeout=timeout)
    if mode == "missing":
        backend = PBSBackend(qstat=str(tmp_path / "no-qstat"), pbsnodes=str(tmp_path / "no"),
                             tz="UTC", timeout=1)  # fmt: skip
    svc = CollectorService(Collector(backend, r, site=SITE), interval=0.1, metrics=metrics)
    ps = health_messages(r)
    assert not svc.run_one()
    m = meta(r, SITE)
    assert failure_cause(m["last_error"]) == cause, m["last_error"]
    assert m[f"failures_{cause}"] == "1"
    assert sample(metrics, "jobtap_collector_stat_failures_total", tier="full", cause=cause) == 1
    assert sample(metrics, "jobtap_collector_cycle_duration_seconds_count", tier="full") == 0
    health = next_health(ps)
    assert health["status"] == "failing" and health["last_error"] == m["last_error"]
    ps.close()


def test_redis_going_away_is_its_own_cause(redis_server, r):
    metrics = CollectorMetrics(SITE)
    col = Collector(SimBackend(jobs=20, nodes=4, tick=30), r, site=SITE)
    svc = CollectorService(col, interval=0.1, metrics=metrics)
    assert svc.run_one()
    redis_server.stop()
    assert not svc.run_one()  # a probe cycle: the plan reconciled at the first one
    assert sample(metrics, "jobtap_collector_stat_failures_total", tier="probe", cause="redis") == 1


def test_pokes_are_counted_received_coalesced_and_refreshed(pbs, r):
    metrics = CollectorMetrics(SITE)
    pbs.set("10-busy")
    col = Collector(pbs.backend(), r, site=SITE)
    svc = CollectorService(col, interval=0.1, follow=True, metrics=metrics)
    assert svc.run_one()
    svc.start_follow()
    poke(r, K, ["1.vm", "3.vm"])
    poke(r, K, ["1.vm"])  # coalesced into the first
    pokes = svc.follower.pokes
    assert eventually(lambda: pokes.read(block_ms=100) or pokes.received) == 2
    assert svc.follower.serve_pokes()
    assert sample(metrics, "jobtap_collector_pokes_received_total") == 2
    assert sample(metrics, "jobtap_collector_pokes_coalesced_total") == 1
    assert sample(metrics, "jobtap_collector_poked_jobs_refreshed_total") == 2
    assert sample(metrics, "jobtap_collector_cycle_duration_seconds_count", tier=REFRESH) == 1
    m = meta(r, SITE)
    assert (m["pokes_received"], m["pokes_coalesced"], m["poked_jobs_refreshed"]) == ("2", "1", "2")
    # a refresh that fails is counted as such
    pbs.set("10-busy", mode="fail")
    poke(r, K, ["3.vm"])
    eventually(lambda: svc.follower.pokes.read(block_ms=100))
    assert not svc.follower.serve_pokes()
    failed = sample(metrics, "jobtap_collector_stat_failures_total", tier=REFRESH,
                    cause="exit_status")  # fmt: skip
    assert failed == 1


def test_feed_restarts_are_counted(r, flux):
    """The Flux journal replay (the stand-in of `flux python READER`) ends when
    its journal does, like a reader whose broker restarted: each end is a restart."""
    metrics = CollectorMetrics(SITE)
    feed = FeedThread(flux, r, K)
    metrics.watch_feed(feed)
    feed.start()
    try:
        eventually(lambda: feed.restarts >= 1, timeout=20)
    finally:
        feed.stop()
    assert sample(metrics, "jobtap_collector_feed_restarts_total") == feed.restarts


def test_failure_causes_of_every_message_the_code_writes():
    assert failure_cause("redis: Connection refused") == "redis"
    assert failure_cause("qstat timed out after 1s: qstat -f") == "timeout"
    assert failure_cause("/x/qstat: command not found") == "not_found"
    assert failure_cause("/x/qstat: permission denied") == "permission"
    assert failure_cause("squeue exited with status 1: slurm_load_jobs error") == "exit_status"
    assert failure_cause("qstat printed JSON that is not an object: list") == "bad_output"


def test_the_sdk_loads_no_metrics_or_terminal_library():
    """`import jobtap` (and reading with it) must not pull in the services' libraries."""
    import subprocess

    code = (
        "import sys, jobtap, jobtap.client, jobtap.subscribe\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('prometheus_client', 'rich', 'rq', 'click')]\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_cycle_that_fails_unexpectedly_is_a_failed_cycle_not_a_dead_collector(r):
    """A bug in a cycle (a backend raising what no stat raises) fails that cycle,
    said in meta like any failure; the collector runs the next one."""

    class Buggy(SimBackend):
        broken = True

        def stat_jobs(self):
            if self.broken:
                self.broken = False
                raise RuntimeError("dictionary changed size during iteration")
            return super().stat_jobs()

    svc = CollectorService(Collector(Buggy(seed=3), r, site=SITE), interval=0.1)
    assert not svc.run_one()
    m = meta(r, SITE)
    assert m["status"] == "failing"
    assert m["last_error"] == "unexpected RuntimeError: dictionary changed size during iteration"
    assert svc.run_one() and meta(r, SITE)["status"] == "ok"
