"""The SDK across a new site epoch (Redis lost data), against real redis-server
processes: a stream consumer carries on without dropping the new epoch's events,
a subscription catches up like a watch after "410 Gone" (the new epoch's events,
a ``resync`` for a record that went back, no made-up ``removed``), and
``jobtap.aio``'s wait ends when the client is closed or the subscription fails."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

import jobtap
import jobtap.aio
from jobtap.events import RESYNC
from jobtap.keys import SiteKeys
from sim.rig.redisloss import reload_from, restart_empty, restart_from, snapshot
from sim.rig.wait import eventually
from tests.support.sdk import SITE, Barrier, K, Recorder, Writer


def stream_ids(r) -> list[str]:
    return [f[b"id"].decode() for _, f in r.xrange(K.events)]


def test_a_stream_consumer_keeps_every_event_of_a_new_epoch(redis_server, hermetic):
    w = Writer(redis_server.client())
    for i in range(5):
        w.job(f"{i}.pbs")
    client = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.2))
    s = client.stream(since="0", block=0.2, idle_timeout=10.0)
    before = [next(s).id for _ in range(5)]
    restart_empty(redis_server)
    w = Writer(redis_server.client())  # versions start again at 1 ...
    for i in range(5):
        w.job(f"{i}.pbs")
        w.job(f"{i}.pbs", state="running")
    after = [next(s).id for _ in range(10)]
    assert after == stream_ids(redis_server.client())  # ... and none is taken for a duplicate
    assert not set(before) & set(after) and s.duplicates == 0
    assert s.epochs == 1 and s.epoch == after[-1].split(":")[1]
    s.close()
    client.close()


def test_a_group_consumer_drops_the_old_epoch_read_again_and_keeps_the_new(redis_server, hermetic):
    """Back on an older snapshot, the group's position went back too: the events
    after it come again (dropped: same ids), then the new epoch's (kept)."""
    w = Writer(redis_server.client())
    for i in range(4):
        w.job(f"{i}.pbs")
    client = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.2))
    s = client.stream(group="g", since="0", count=2, block=0.2, idle_timeout=10.0)
    first = [next(s).id for _ in range(2)]
    s.ack()
    aside = snapshot(redis_server)  # the group stands after the first two
    rest = [next(s).id for _ in range(2)]
    s.ack()
    restart_from(redis_server, aside)
    w.job("0.pbs", state="running")  # the same writer: its cycles go on
    w.job("9.pbs")
    new = [next(s).id for _ in range(2)]
    assert s.duplicates == 2  # the two events after the restored position, read again
    assert [i.split(":")[1] for i in new] == [new[0].split(":")[1]] * 2
    assert new[0].split(":")[1] != first[0].split(":")[1]
    assert len(set(first + rest + new)) == 6
    s.close()
    client.close()


def test_an_all_jobs_subscriber_gets_every_event_written_after_the_loss(redis_server, hermetic):
    r = redis_server.client()
    w = Writer(r)
    for i in range(6):
        w.job(f"{i}.pbs")
    w.finish("0.pbs")  # finished before the loss
    client = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.2))
    rec = Recorder()
    sub = client.subscribe(rec, all_jobs=True)
    w.job("1.pbs", state="running")
    rec.wait_for(lambda cs: any(c.object_id == "1.pbs" and c.type == "state" for c in cs))
    seen_before = len(rec.changes)
    restart_empty(redis_server)
    r = redis_server.client()
    w = Writer(r)  # the collector writes everything again, in the new epoch
    w.finish("0.pbs")  # its final again (the old epoch's is gone with Redis)
    for i in range(1, 6):
        w.job(f"{i}.pbs", state="running")
    for i in range(1, 4):
        w.finish(f"{i}.pbs", exit_status=i)
    written = stream_ids(r)
    rec.wait_for(lambda cs: {c.id for c in cs} >= set(written), timeout=15)
    after = [c for c in rec.changes[seen_before:] if c.type not in ("initial", RESYNC)]
    assert [c.id for c in after] == written  # every one, in order, once
    assert {c.object_id for c in after if c.final} == {"0.pbs", "1.pbs", "2.pbs", "3.pbs"}
    assert not [c for c in rec.changes if c.type == "removed"]
    assert sub.resyncs >= 1 and not sub.closed
    client.close()


def test_jobs_that_ended_just_before_a_new_epoch_are_not_delivered_again(redis_server, hermetic):
    """A job born and ended live after the subscription's stream position, then
    a new epoch: the catch-up no longer takes the old epoch's finished jobs as the
    boundary of its scan (their new-epoch events would be news), so it scans back
    over that job's old-epoch events.  They were delivered: they must not come
    again (they did, as "missed", when the feed forgot the job altogether)."""
    r = redis_server.client()
    w = Writer(r)
    w.job("1.pbs")
    client = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.2))
    barrier = Barrier(client, w)
    rec = Recorder()
    sub = client.subscribe(rec, all_jobs=True)
    w.job("2.pbs")
    w.finish("2.pbs")
    rec.wait_for(lambda cs: any(c.object_id == "2.pbs" and c.final for c in cs))
    r.hdel(K.meta, "epoch")  # as after Redis came back empty: the next write begins an epoch
    w.job("3.pbs")
    rec.wait_for(lambda cs: any(c.object_id == "3.pbs" for c in cs))
    barrier()  # a duplicate would come before the marker: in the catch-up itself
    got = [c.id for c in rec.changes if c.type != "initial"]
    assert len(got) == len(set(got)), got
    assert [c.version for c in rec.changes if c.object_id == "2.pbs"] == [1, 2]
    assert sub.resyncs == 1
    client.close()


def test_a_new_epoch_on_one_site_does_not_bring_back_another_sites_finished_jobs(
    redis_server, hermetic
):
    """One subscription to two sites; a job of t1 ends live, then t2 (not t1)
    begins a new epoch.  The catch-up after it is of both sites: t2's loss must
    not make the feed forget t1's finished jobs, whose events it would then find
    "missed" in t1's stream and deliver again."""
    r = redis_server.client()
    one, two = Writer(r, site="t1"), Writer(r, site="t2")
    one.job("1.pbs")
    two.job("1.pbs")
    # t2 first: its catch-up (and its new epoch) comes before t1's in the resync
    client = jobtap.Client(
        sites={"t2": redis_server.url, "t1": redis_server.url}, site="t2", backoff=(0.05, 0.2)
    )
    assert client.sites == ["t2", "t1"]
    barrier = Barrier(client, one)
    rec = Recorder()
    sub = client.subscribe(rec, all_jobs=True)
    one.job("2.pbs")
    one.finish("2.pbs")
    rec.wait_for(lambda cs: any(c.site == "t1" and c.object_id == "2.pbs" and c.final for c in cs))
    r.hdel(SiteKeys("t2").meta, "epoch")  # t2 alone begins a new epoch at its next write
    two.job("3.pbs")
    rec.wait_for(lambda cs: any(c.site == "t2" and c.object_id == "3.pbs" for c in cs))
    barrier()  # a duplicate would come before the marker: in the catch-up itself
    got = [c.id for c in rec.changes if c.type != "initial"]
    assert len(got) == len(set(got)), got
    assert [c.version for c in rec.changes if c.site == "t1" and c.object_id == "2.pbs"] == [1, 2]
    assert sub.resyncs == 1
    client.close()


def test_a_record_that_went_back_is_delivered_as_a_resync(reloadable_redis, hermetic):
    """Same server, older data (no restart): the record of 1.pbs went back to
    version 1 and nothing writes it again.  The next chunk is ahead of meta's
    cycle: a new epoch; the subscription catches up and says what the record is
    now."""
    server = reloadable_redis
    r = server.client()
    r.hset(K.meta, "cycle", 10)  # as a collector counts its cycles before shipping
    w = Writer(r)
    w.job("1.pbs")
    w.job("2.pbs")
    aside = snapshot(server)
    r.hset(K.meta, "cycle", 20)
    w.job("1.pbs", comment="lost")
    client = jobtap.Client(server.url, site=SITE, backoff=(0.05, 0.2))
    rec = Recorder()
    client.subscribe(rec, all_jobs=True)
    reload_from(server, aside)  # meta counts 10 cycles again
    w.cycle = 14
    w.job("2.pbs", state="running")  # a chunk of cycle 15: Redis went back
    assert r.hget(K.meta, "epoch_cause") == b"behind"
    rec.wait_for(lambda cs: any(c.object_id == "2.pbs" and c.type == "state" for c in cs))
    rec.wait_for(lambda cs: any(c.type == RESYNC for c in cs))
    (back,) = [c for c in rec.changes if c.type == RESYNC]
    assert (back.object_id, back.version, back.record.comment) == ("1.pbs", 1, None)
    moved = [c for c in rec.changes if c.object_id == "2.pbs"][-1]
    assert (moved.type, moved.version) == ("state", 1) and moved.epoch != back.epoch
    client.close()


def test_aio_wait_ends_within_a_second_of_close(redis_server, hermetic, writer):
    writer.job("1.pbs", state="running")

    async def main() -> tuple[type, float]:
        client = jobtap.aio.Client(redis_server.url, site=SITE)
        waiter = asyncio.create_task(client.wait("1.pbs", timeout=30))

        def waiting() -> bool:  # the wait's subscription is live
            dispatcher = client.sync._dispatcher
            return dispatcher is not None and any(f.active for f in dispatcher.feeds)

        await asyncio.to_thread(eventually, waiting, what="the wait's subscription")
        closed = time.monotonic()
        await client.close()
        with pytest.raises(jobtap.JobtapError, match="the client was closed") as err:
            await asyncio.wait_for(waiter, 1.0)
        return type(err.value), time.monotonic() - closed

    kind, took = asyncio.run(main())
    assert kind is jobtap.JobtapError and took < 1.0


def test_aio_wait_ends_with_the_error_of_a_failed_subscription(redis_server, hermetic, writer):
    """The user is disabled while waiting: the reconnect is refused, the
    subscription fails, and wait() raises what the sync one would."""
    r = redis_server.client()
    r.acl_setuser("bob", enabled=True, passwords=["+pw"], keys=["*"], channels=["*"],
                  commands=["+@all"])  # fmt: skip
    writer.job("1.pbs", state="running", user="bob")

    async def main() -> BaseException:
        client = jobtap.aio.Client(redis_server.url, site=SITE, username="bob", password="pw",
                                   backoff=(0.05, 0.2))  # fmt: skip
        waiter = asyncio.create_task(client.wait("1.pbs", timeout=30))
        await asyncio.to_thread(
            eventually,
            lambda: any(c.get("user") == "bob" and int(c.get("sub", 0)) for c in r.client_list()),
            what="bob's subscription",
        )
        r.acl_setuser("bob", enabled=False)
        r.client_kill_filter(user="bob")
        try:
            await asyncio.wait_for(waiter, 5.0)
        except BaseException as exc:  # noqa: BLE001 - returned for the asserts
            return exc
        finally:
            await client.close()
        raise AssertionError("wait() returned")

    error = asyncio.run(main())
    assert isinstance(error, jobtap.AuthenticationFailed), repr(error)


def test_stream_events_of_two_epochs_are_never_compared(r):
    from jobtap.dedupe import VersionMemory

    memory = VersionMemory()
    assert memory.accept("s:1.pbs", 1, "new", (1, 0), "aaaaaaaaaaaa")
    assert memory.accept("s:1.pbs", 2, "state", (2, 0), "aaaaaaaaaaaa")
    assert memory.accept("s:1.pbs", 1, "new", (3, 0), "bbbbbbbbbbbb")  # a new epoch's v1
    assert not memory.accept("s:1.pbs", 2, "state", (2, 0), "aaaaaaaaaaaa")  # read again
    assert memory.accept("s:1.pbs", 2, "update", (4, 0), "bbbbbbbbbbbb")
    assert not memory.accept("s:1.pbs", 1, "new", (5, 0), "bbbbbbbbbbbb")  # late duplicate


def test_change_epoch_and_legacy_ids():
    event = orjson.loads(orjson.dumps({"id": "s:mg3k1x2a7f3c:1.pbs:3", "type": "state",
                                       "version": 3}))  # fmt: skip
    assert jobtap.Change.from_event(event).epoch == "mg3k1x2a7f3c"
    legacy = jobtap.Change("s:1.pbs:3", "state", 3)
    assert legacy.epoch == ""
    from jobtap.events import split_event_id

    assert split_event_id("s:node:n1:2") == ("s:node:n1", "", 2)
    assert split_event_id("s:mg3k1x2a7f3c:node:n1:2") == ("s:node:n1", "mg3k1x2a7f3c", 2)
