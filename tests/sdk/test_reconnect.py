"""Subscriptions survive Redis going away: a restart, a slow subscriber cut off at
the pub/sub output-buffer limit, a finished job's hash expiring meanwhile.  Each
change is delivered exactly once, in order, and no final is missed."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import jobtap
from jobtap.sim.localredis import RedisServer
from jobtap.workers.apply import Settings
from sim.rig.wait import eventually
from tests.support.sdk import SITE, CountingClient, Recorder, Writer


@pytest.fixture
def durable(tmp_path):
    """A redis-server that keeps its data across restarts (AOF, fsync always)."""
    (tmp_path / "redis").mkdir()
    server = RedisServer(
        tmp_path / "redis", args=["--appendonly", "yes", "--appendfsync", "always"]
    ).start()
    yield server
    server.stop()


def noticed_the_loss(caplog) -> bool:
    """The client saw its pub/sub connection go (its first reconnect attempt follows
    at once, and fails while Redis is down)."""
    return "lost the pub/sub connection" in caplog.text


def by_job(rec: Recorder) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = {}
    for c in rec.changes:
        out.setdefault(c.object_id, []).append((c.type, c.version))
    return out


def test_restart_under_a_live_subscription_delivers_the_missed_changes(durable, hermetic, caplog):
    r = durable.client()
    w = Writer(r)
    w.job("1.pbs")
    w.job("2.pbs")
    w.job("3.pbs", user="alice")
    # the first reconnect attempt comes 1-2 s after the failed immediate one
    client = jobtap.Client(durable.url, site=SITE, backoff=(1.0, 2.0))
    named, mine = Recorder(), Recorder()
    sub = client.subscribe(named, jobs=["1.pbs", "2.pbs"])
    client.subscribe(mine, user="alice")
    w.job("1.pbs", comment="a")
    named.wait_count(3)
    with caplog.at_level(logging.WARNING, logger="jobtap.sdk"):
        durable.stop()
        eventually(lambda: noticed_the_loss(caplog))
        durable.start()
        # while the client is still backing off:
        w.job("1.pbs", state="running")
        w.finish("2.pbs", exit_status=0)  # a final during the outage
        w.job("1.pbs", comment="b")
        w.job("4.pbs", user="alice")  # a new job: the user subscription must see it
        w.finish("4.pbs")  # ... and its end, though it is no longer a live job
        named.wait_for(lambda cs: len(cs) >= 6, timeout=15)
        mine.wait_for(lambda cs: any(c.object_id == "4.pbs" and c.final for c in cs), 15)
    # a restart begins a new epoch: versions count from 1 in it
    assert by_job(named) == {
        "1.pbs": [("initial", 1), ("update", 2), ("state", 1), ("update", 2)],
        "2.pbs": [("initial", 1), ("final", 1)],
    }
    epochs = [c.epoch for c in named.changes if c.object_id == "1.pbs"]
    assert epochs[0] == epochs[1] != epochs[2] == epochs[3]
    assert by_job(mine)["4.pbs"] == [("new", 1), ("final", 2)]
    assert sub.resyncs == 1 and not sub.closed
    messages = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any("lost the pub/sub connection" in m for m in messages)
    assert any("reconnected" in m and "Redis restarted" in m for m in messages)
    # and it is live again afterwards
    w.finish("1.pbs")
    named.wait_count(7)
    assert named.changes[-1].type == "final" and sub.wait_closed(5)
    client.close()


def test_final_is_not_missed_when_the_hash_expired_during_the_outage(durable, hermetic, caplog):
    r = durable.client()
    w = Writer(r, Settings(retention=1))  # finished jobs' hashes live one second
    w.job("1.pbs")
    client = CountingClient(durable.url, site=SITE, backoff=(2.5, 3.0))
    rec = Recorder()
    sub = client.subscribe(rec, jobs=["1.pbs"])
    result: dict = {}
    waiter = threading.Thread(target=lambda: result.update(job=client.wait("1.pbs", timeout=20)))
    waiter.start()
    eventually(lambda: client.subscribed == 2, what="the wait in place")
    with caplog.at_level(logging.WARNING, logger="jobtap.sdk"):
        durable.stop()
        eventually(lambda: noticed_the_loss(caplog))
    durable.start()
    w.job("1.pbs", state="running")
    w.finish("1.pbs", state="failed", exit_status=2)
    key = f"jobtap:{{{SITE}}}:u:alice:job:1.pbs"
    eventually(lambda: not r.exists(key), timeout=5)  # gone before the client is back
    rec.wait_count(3, timeout=15)
    assert [(c.type, c.version) for c in rec.changes] == [
        ("initial", 1),
        ("state", 1),  # the restart began a new epoch: versions count from 1 in it
        ("final", 2),
    ]
    assert rec.changes[0].epoch != rec.changes[1].epoch == rec.changes[2].epoch
    assert rec.changes[-1].record.state == "failed"
    waiter.join(15)
    assert result["job"].state == "failed" and result["job"].exit_status == 2
    assert sub.wait_closed(5)
    client.close()


def test_lost_data_is_a_new_epoch_not_the_end_of_a_job(redis_server, hermetic, caplog):
    """Redis back empty: the job's record and events are gone, but the job is not
    (a new epoch began).  The subscription waits for it to be written again (as
    the collector does after a loss) and ends at its final, never with a made-up
    'removed'."""
    w = Writer(redis_server.client())
    w.job("1.pbs")
    client = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.2))
    rec = Recorder()
    sub = client.subscribe(rec, jobs=["1.pbs"])
    with caplog.at_level(logging.WARNING, logger="jobtap.sdk"):
        redis_server.restart()  # no persistence: the hash and the streams are gone
        eventually(lambda: sub.resyncs >= 1, what="the resync after the restart")
    w = Writer(redis_server.client())  # the collector ships it again ...
    w.job("1.pbs", state="running")
    w.finish("1.pbs", exit_status=0)  # ... and it ends
    rec.wait_count(3, timeout=10)
    assert [(c.type, c.version) for c in rec.changes] == [
        ("initial", 1),
        ("new", 1),
        ("final", 2),
    ]
    assert rec.changes[0].epoch != rec.changes[1].epoch == rec.changes[2].epoch
    assert sub.wait_closed(5) and sub.error is None
    assert any("a new epoch began" in m for m in caplog.messages)
    client.close()


def test_slow_subscriber_cut_off_without_a_bound_replays_every_event(
    redis_server, hermetic, caplog
):
    r = redis_server.client()
    r.config_set("client-output-buffer-limit", "pubsub 64kb 32kb 1")
    w = Writer(r)
    jobs = [f"{i}.pbs" for i in range(10)]
    for jid in jobs:
        w.job(jid)
    # no bound: the replay of every missed event (the behaviour before the bound)
    client = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.5), max_lag=None)
    stall = threading.Event()

    class Slow(Recorder):
        def __call__(self, change):
            if change.type != "initial" and not stall.is_set():
                stall.set()
                time.sleep(1.5)  # meanwhile Redis buffers, then cuts the connection
            super().__call__(change)

    rec = Slow()
    sub = client.subscribe(rec, user="alice")
    rounds = 30
    with caplog.at_level(logging.WARNING, logger="jobtap.sdk"):
        # ~15 MB of events while the callback sleeps: more than the kernel's socket
        # buffers absorb, so Redis' output buffer for this client passes 64 kB
        for n in range(rounds):
            for jid in jobs:
                w.job(jid, comment=f"{n} " + "x" * 50_000)
        for jid in jobs:
            w.finish(jid)
        rec.wait_for(lambda cs: sum(c.final for c in cs) == len(jobs), timeout=30)
    for jid, seen in by_job(rec).items():
        assert [v for _, v in seen] == list(range(1, rounds + 3)), jid
        assert seen[0][0] == "initial" and seen[-1][0] == "final"
    assert sub.resyncs >= 1
    warnings = [x.getMessage() for x in caplog.records if x.levelno == logging.WARNING]
    assert any("output-buffer limit" in m for m in warnings)
    client.close()


def test_subscribing_while_a_job_changes_sees_every_version_exactly_once(redis_server, hermetic):
    w = Writer(redis_server.client())
    w.job("1.pbs")
    shared = jobtap.Client(redis_server.url, site=SITE)
    fresh: list[jobtap.Client] = []
    recorders: list[Recorder] = []
    last_version = 300
    stop = threading.Event()

    def churn():
        for n in range(2, last_version):
            w.job("1.pbs", comment=str(n))
            time.sleep(0.001)  # the scenario: a job that keeps changing
        w.finish("1.pbs")
        stop.set()

    t = threading.Thread(target=churn)
    t.start()
    i = 0
    while not stop.is_set():
        rec = Recorder()
        if i % 2:  # a new client: SUBSCRIBE, confirmation, snapshot
            c = jobtap.Client(redis_server.url, site=SITE)
            fresh.append(c)
        else:  # the channel is already subscribed: snapshot at once
            c = shared
        c.subscribe(rec, jobs=["1.pbs"])
        recorders.append(rec)
        i += 1
        time.sleep(0.01)  # the scenario: subscribers arriving all along the churn
    t.join()
    assert len(recorders) >= 10
    for rec in recorders:
        rec.wait_for(lambda cs: bool(cs) and cs[-1].final, timeout=10)
        versions = rec.versions()
        assert versions == list(range(versions[0], last_version + 1))
        assert rec.changes[0].type == "initial"
    for c in [shared, *fresh]:
        c.close()
