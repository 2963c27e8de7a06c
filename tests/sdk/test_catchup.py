"""Catching up by state: a subscription cut off by Redis, or further behind than
its bound (``Client(max_lag=..., queue_limit=...)``), is given one change per
object that moved (finals first, each final once, with ``Change.missed``)
instead of every event it missed; below the bound every event still comes."""

from __future__ import annotations

import logging
import threading
import time

import jobtap
from sim.rig.wait import eventually
from tests.support.sdk import SITE, Barrier, K, Recorder, Writer


class Gated(Recorder):
    """Blocks the client's thread on the first change of ``trigger`` (not an
    initial) until ``gate`` is set: meanwhile what arrives waits unread."""

    def __init__(self, trigger: str):
        super().__init__()
        self.trigger = trigger
        self.held = threading.Event()
        self.gate = threading.Event()

    def __call__(self, change: jobtap.Change) -> None:
        if change.object_id == self.trigger and change.type != "initial" and not self.held.is_set():
            self.held.set()
            self.gate.wait(30)
        super().__call__(change)


def finals(rec: Recorder, jid: str) -> list[jobtap.Change]:
    return [c for c in rec.changes if c.object_id == jid and c.final]


def test_a_backlog_past_the_bound_catches_up_by_state_finals_first(redis_server, hermetic):
    w = Writer(redis_server.client())
    jobs = [f"{i}.pbs" for i in range(1, 7)]
    for jid in jobs:
        w.job(jid)
    client = jobtap.Client(redis_server.url, site=SITE, queue_limit=5)
    barrier = Barrier(client, w)
    rec = Gated("1.pbs")
    sub = client.subscribe(rec, user="alice")
    w.job("1.pbs", comment="go")
    eventually(rec.held.is_set, what="the callback held")
    w.job("2.pbs", state="running")
    for jid in ("1.pbs", "2.pbs", "3.pbs"):
        w.finish(jid)
    for n in range(3):
        for jid in ("4.pbs", "5.pbs", "6.pbs"):
            w.job(jid, comment=f"c{n}")
    rec.gate.set()
    rec.wait_for(lambda cs: all(finals(rec, j) for j in jobs[:3]))
    rec.wait_for(
        lambda cs: all(any(c.version == 4 for c in cs if c.object_id == j) for j in jobs[3:])
    )
    barrier()
    after = rec.changes[len(jobs) + 1 :]  # past the initials and the held update
    assert {c.object_id for c in after[:3]} == {"1.pbs", "2.pbs", "3.pbs"}  # finals first
    for jid in jobs[:3]:
        (final,) = finals(rec, jid)  # once
        assert final.type == "final" and final.missed is not None
    two = finals(rec, "2.pbs")[0].missed
    assert two is not None and two.states == ("running", "completed") and two.events == 2
    assert two.complete and "state" in two.fields
    for c in after[3:]:
        assert c.type == "resync" and c.version == 4 and not c.final
        assert c.missed is not None and c.missed.events == 3 and "comment" in c.missed.fields
    assert len(after) == 6
    assert sub.caught_up_by_state == 1 and sub.skipped > 0
    assert sub.queue_peak <= 5 + 1 + len(jobs)  # the bound, then one change per object
    # live again, version after version
    w.job("4.pbs", comment="after")
    rec.wait_for(lambda cs: cs[-1].object_id == "4.pbs" and cs[-1].version == 5)
    assert rec.changes[-1].type == "update" and rec.changes[-1].missed is None
    barrier()
    assert len(rec.changes) == len(jobs) + 1 + 6 + 1
    client.close()


def test_the_queue_stays_bounded_under_a_burst_and_every_final_comes_once(redis_server, hermetic):
    w = Writer(redis_server.client())
    jobs = [f"{i}.pbs" for i in range(10)]
    for jid in jobs:
        w.job(jid)
    client = jobtap.Client(redis_server.url, site=SITE, queue_limit=20)
    barrier = Barrier(client, w)
    rec = Gated("0.pbs")
    sub = client.subscribe(rec, user="alice")
    w.job("0.pbs", comment="go")
    eventually(rec.held.is_set, what="the callback held")
    for n in range(30):  # 300 events for a queue of 20
        for jid in jobs:
            w.job(jid, comment=f"{n}")
    for jid in jobs:
        w.finish(jid)
    rec.gate.set()
    rec.wait_for(lambda cs: all(finals(rec, j) for j in jobs))
    barrier()
    for jid in jobs:
        assert len(finals(rec, jid)) == 1
        versions = rec.versions(jid)
        assert versions == sorted(set(versions))  # nothing twice, nothing back
    assert sub.queue_peak <= 20 + 1 + len(jobs)
    assert sub.caught_up_by_state >= 1 and len(rec.changes) < 300
    client.close()


def test_a_catch_up_cut_short_loses_nothing_it_had_not_delivered(redis_server, hermetic):
    """Jobs that were submitted and ended while the callback was held are known
    from the stream alone.  Their finals are delivered in turns; the callback
    falls behind again in the middle of them (an update arrives, the bound is
    short), the catch-up starts again from where it read, and the finals it had
    not delivered yet are carried into it: each comes, once."""
    w = Writer(redis_server.client())
    w.job("1.pbs")
    client = jobtap.Client(redis_server.url, site=SITE, max_lag=0.3, queue_limit=3)
    barrier = Barrier(client, w)
    second = threading.Event()  # held on the first final of the catch-up
    release = threading.Event()

    class Held(Gated):
        def __call__(self, change: jobtap.Change) -> None:
            if change.final and not second.is_set():
                second.set()
                release.wait(30)
            elif change.final:
                time.sleep(0.1)  # a slow consumer: the catch-up falls behind again
            super().__call__(change)

    rec = Held("1.pbs")
    sub = client.subscribe(rec, user="alice")
    w.job("1.pbs", comment="go")
    eventually(rec.held.is_set, what="the callback held")
    ended = [f"{i}.pbs" for i in range(10, 20)]
    for jid in ended:  # submitted and ended while the callback is held
        w.job(jid)
        w.finish(jid)
    rec.gate.set()
    eventually(second.is_set, what="the catch-up's first final")
    w.job("1.pbs", comment="meanwhile")  # arrives while the catch-up is delivered
    release.set()
    rec.wait_for(lambda cs: all(finals(rec, j) for j in ended), timeout=20)
    rec.wait_for(lambda cs: "meanwhile" in [c.record.comment for c in cs if c.object_id == "1.pbs"])
    barrier()
    for jid in ended:
        assert len(finals(rec, jid)) == 1
        assert [c.type for c in rec.changes if c.object_id == jid] == ["final"]
    versions = rec.versions("1.pbs")
    assert versions == sorted(set(versions))  # nothing twice, nothing back
    assert sub.caught_up_by_state >= 2  # the update came while the first was delivered
    client.close()


def test_cut_off_by_the_output_buffer_limit_catches_up_by_state(redis_server, hermetic, caplog):
    r = redis_server.client()
    r.config_set("client-output-buffer-limit", "pubsub 64kb 32kb 1")
    w = Writer(r)
    jobs = [f"{i}.pbs" for i in range(10)]
    for jid in jobs:
        w.job(jid)
    client = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.5))
    stall = threading.Event()

    class Slow(Recorder):
        def __call__(self, change):
            if change.type != "initial" and not stall.is_set():
                stall.set()
                time.sleep(1.5)  # the client's thread reads nothing: Redis cuts it off
            super().__call__(change)

    rec = Slow()
    sub = client.subscribe(rec, user="alice")
    rounds = 30
    with caplog.at_level(logging.WARNING, logger="jobtap.sdk"):
        for n in range(rounds):
            for jid in jobs:
                w.job(jid, comment=f"{n} " + "x" * 50_000)
        for jid in jobs:
            w.finish(jid)
        rec.wait_for(lambda cs: all(finals(rec, j) for j in jobs), timeout=30)
    barrier = Barrier(client, w)
    barrier()
    for jid in jobs:
        assert len(finals(rec, jid)) == 1
        versions = rec.versions(jid)
        assert versions == sorted(set(versions)) and versions[-1] == rounds + 2
    assert any("output-buffer limit" in m for m in caplog.messages)
    assert sub.caught_up_by_state >= 1
    assert any(c.missed is not None for c in rec.changes)
    assert len(rec.changes) < len(jobs) * (rounds + 2)  # not every event
    client.close()


def test_below_the_bound_every_event_comes_as_before(redis_server, hermetic):
    w = Writer(redis_server.client())
    w.job("1.pbs")
    client = jobtap.Client(redis_server.url, site=SITE)
    barrier = Barrier(client, w)
    rec = Gated("1.pbs")
    sub = client.subscribe(rec, jobs=["1.pbs"])
    w.job("1.pbs", comment="go")
    eventually(rec.held.is_set, what="the callback held")
    w.job("1.pbs", state="running")
    w.job("1.pbs", comment="a")
    w.finish("1.pbs")
    rec.gate.set()
    assert sub.wait_closed(10)
    barrier()
    assert [(c.type, c.version) for c in rec.changes] == [
        ("initial", 1),
        ("update", 2),
        ("state", 3),
        ("update", 4),
        ("final", 5),
    ]
    assert all(c.missed is None for c in rec.changes)
    assert sub.caught_up_by_state == 0 and sub.resyncs == 0 and sub.skipped == 0
    client.close()


def test_a_scan_past_a_trimmed_boundary_is_not_complete(r):
    """Trims leave ``max-deleted-entry-id`` alone (only XDEL moves it): a scan
    that reaches the stream's start without its boundary must not be taken for
    complete when the stream was trimmed past the boundary, or the events trimmed
    away would be taken for none at all (and a catch-up read no record for them)."""
    from jobtap.backfill import scan_back

    sids = [r.xadd("s", {"id": f"t1:e:{i}.pbs:1", "type": "new", "event": "{}"}) for i in range(10)]
    stop = sids[2].decode()
    assert scan_back(r, "s", stop_at=stop, processed=lambda e: False).complete
    r.xtrim("s", minid=sids[6], approximate=False)  # 3, 4 and 5 are gone
    scan = scan_back(r, "s", stop_at=stop, processed=lambda e: False)
    assert not scan.complete and [e.sid for e in scan.missed] == [s.decode() for s in sids[6:]]
    # trimmed up to the boundary, which it keeps: nothing after it went
    r.delete("s")
    sids = [r.xadd("s", {"id": f"t1:e:{i}.pbs:1", "type": "new", "event": "{}"}) for i in range(10)]
    r.xtrim("s", minid=sids[2], approximate=False)
    assert scan_back(r, "s", stop_at=sids[2].decode(), processed=lambda e: False).complete


def test_a_job_born_and_ended_in_a_gap_its_stream_let_go_of_still_ends(redis_server, hermetic):
    """The callback falls behind; meanwhile a job is submitted and ends, and the
    user's stream lets go of all of it (its retention is shorter than the lag).
    Neither the streams nor the live set know that job any more: the user's
    finished set does (workers/apply.lua), and its final is delivered, once."""
    r = redis_server.client()
    w = Writer(r)
    w.job("1.pbs")
    client = jobtap.Client(redis_server.url, site=SITE, queue_limit=3)
    barrier = Barrier(client, w)
    rec = Gated("1.pbs")
    sub = client.subscribe(rec, user="alice")
    w.job("1.pbs", comment="go")
    eventually(rec.held.is_set, what="the callback held")
    for n in range(3):  # past the bound
        w.job("1.pbs", comment=f"c{n}")
    w.job("2.pbs")
    w.finish("2.pbs")
    w.job("1.pbs", comment="last")
    stream = K.user_events("alice")
    r.xtrim(stream, minid=r.xrange(stream)[-1][0], approximate=False)  # the last event only
    rec.gate.set()
    rec.wait_for(lambda cs: bool(finals(rec, "2.pbs")))
    barrier()
    (final,) = finals(rec, "2.pbs")  # from its record: the stream let go of its final event
    assert final.type == "resync" and final.final and final.record.state == "completed"
    assert rec.changes[-1].object_id == "1.pbs" and rec.changes[-1].record.comment == "last"
    assert sub.resyncs >= 1
    client.close()
