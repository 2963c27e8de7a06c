"""stream(): plain resume, consumer groups with acks and crash recovery, dropping
duplicates, resuming after Redis went away."""

from __future__ import annotations

import threading

import orjson
import pytest

import jobtap
from jobtap.dedupe import VersionMemory
from jobtap.entries import xrange_events
from jobtap.events import format_of
from jobtap.packing import native_of
from jobtap.sim.localredis import RedisServer
from jobtap.workers.apply import Settings
from sim.rig.wait import eventually
from tests.support.ids import eid
from tests.support.sdk import SITE, K, Writer


def all_ids(r, key=K.events) -> list[str]:
    return [f[b"id"].decode() for _, f in r.xrange(key)]


def fill(writer, jobs=10, versions=5) -> None:
    for v in range(versions):
        for i in range(jobs):
            if v == 0:
                writer.job(f"{i}.pbs", user="alice" if i % 2 else "bob")
            else:
                writer.job(f"{i}.pbs", comment=str(v))


def test_plain_from_the_start_and_resume_from_last_id(client, writer, r):
    fill(writer)
    expected = all_ids(r)
    s = client.stream(since="0", count=7, idle_timeout=0.3)
    first = [next(s) for _ in range(12)]
    assert [c.id for c in first] == expected[:12]
    assert isinstance(first[0].record, jobtap.Job) and first[0].type == "new"
    assert first[0].event["id"] == first[0].id and orjson.loads(first[0].json) == first[0].event
    position = s.last_id
    s.close()
    rest = list(client.stream(since=position, idle_timeout=0.3))
    assert [c.id for c in rest] == expected[12:]


def test_a_reader_behind_by_more_than_the_stream_keeps_is_told(client, writer, r, caplog):
    """Events trimmed away after a plain reader's position before it read them:
    counted in gaps and logged with the range, and reading goes on from the
    oldest event the stream holds; trims of what it read already are no gap."""
    fill(writer)  # 50 events
    expected = all_ids(r)
    sids = [sid for sid, _ in r.xrange(K.events)]
    s = client.stream(since="0", count=10, idle_timeout=0.3)
    assert [next(s).id for _ in range(10)] == expected[:10]
    r.xtrim(K.events, minid=sids[5], approximate=False)  # behind the reader: no gap
    assert [next(s).id for _ in range(10)] == expected[10:20] and s.gaps == 0
    # the reader is at 20: the stream lets go of 20..29 before it reads them
    r.xtrim(K.events, minid=sids[30], approximate=False)
    assert [c.id for c in s] == expected[30:]
    assert s.gaps == 1 and s.last_id == sids[-1].decode()
    assert f"let go of 10 event(s) after {sids[19].decode()}" in caplog.text


def test_a_reader_resumed_from_an_id_the_stream_let_go_of_is_told(client, writer, r, caplog):
    fill(writer)
    expected = all_ids(r)
    sids = [sid for sid, _ in r.xrange(K.events)]
    r.xtrim(K.events, minid=sids[30], approximate=False)
    s = client.stream(since=sids[9].decode(), idle_timeout=0.3)
    assert [c.id for c in s] == expected[30:]
    assert s.gaps == 1 and f"let go of some event(s) after {sids[9].decode()}" in caplog.text


def test_old_events_aging_out_behind_a_reader_at_the_end_are_no_gap(client, writer, r):
    """A reader that read everything; then a new event comes and the stream lets
    go of all it held before (aged out: MINID) before the reader reads again: the
    stream's first event is newer than the reader's position, and nothing was
    missed."""
    fill(writer, jobs=2, versions=1)
    s = client.stream(since="0", idle_timeout=0.3)
    assert len([next(s) for _ in range(2)]) == 2
    writer.job("0.pbs", comment="new")
    newest = r.xrange(K.events)[-1][0]
    r.xtrim(K.events, minid=newest, approximate=False)  # the two it read aged out
    assert [c.id for c in s] == all_ids(r) and s.gaps == 0


def test_a_consumer_group_behind_by_more_than_the_stream_keeps_is_told(client, writer, r, caplog):
    """Redis keeps a group's place (entries-read): events the stream let go of
    past it are counted; a group made from "0" on a stream that had let go of
    events starts at what it holds, which is no gap."""
    fill(writer)  # 50 events
    expected = all_ids(r)
    sids = [sid for sid, _ in r.xrange(K.events)]
    r.xtrim(K.events, minid=sids[5], approximate=False)
    s = client.stream(group="g", since="0", count=10, idle_timeout=0.3)
    assert [next(s).id for _ in range(10)] == expected[5:15] and s.gaps == 0
    r.xtrim(K.events, minid=sids[25], approximate=False)  # 15..24 go before they are read
    assert [c.id for c in s] == expected[25:]
    assert s.gaps == 1 and f"let go of 10 event(s) after {sids[14].decode()}" in caplog.text
    s.close()


def test_default_is_new_events_only(client, writer, r):
    fill(writer, jobs=2, versions=1)
    s = client.stream(idle_timeout=1.0, block=0.1)
    got: list[str] = []
    t = threading.Thread(target=lambda: got.extend(c.id for c in s))
    t.start()
    # it reads with XREAD BLOCK once it knows where "new" starts
    eventually(lambda: r.info("clients")["blocked_clients"], what="the stream blocked reading")
    writer.job("0.pbs", comment="after")
    t.join(5)
    assert got == [eid(writer.applier.redis, SITE, "0.pbs", 2)]


def test_user_stream(client, writer):
    fill(writer, jobs=4, versions=2)
    got = [c for c in client.stream(user="alice", since="0", idle_timeout=0.3)]
    assert {c.user for c in got} == {"alice"} and len(got) == 4


def test_duplicates_in_the_stream_are_dropped(client, writer, r):
    fill(writer, jobs=3, versions=3)
    entries = xrange_events(r, K.events)
    # a replayed batch: the same events appended again, and an old version late
    for _, fields in entries[:4]:
        r.xadd(K.events, fields)
    s = client.stream(since="0", idle_timeout=0.3)
    got = [c.id for c in s]
    assert got == [f[b"id"].decode() for _, f in entries]
    assert s.duplicates == 4


def test_version_not_newer_than_the_last_seen_is_dropped(client, writer, r):
    writer.job("1.pbs")
    writer.job("1.pbs", comment="a")
    v1 = xrange_events(r, K.events)[0][1]
    writer.job("1.pbs", comment="b")
    r.xadd(K.events, v1)  # v1 again, after v3
    got = [c.version for c in client.stream(since="0", idle_timeout=0.3)]
    assert got == [1, 2, 3]


def test_version_memory_rules():
    m = VersionMemory(maxsize=2)
    assert m.accept("s:a", 1, "new", (1, 0)) and not m.accept("s:a", 1, "new", (9, 0))
    assert m.accept("s:a", 3, "update", (3, 0))
    assert not m.accept("s:a", 2, "update", (4, 0))  # older version, later in the stream
    assert m.accept("s:a", 2, "update", (2, 0))  # older version, earlier: never handed out
    assert not m.accept("s:a", 2, "update", (2, 0))  # ... but only once
    m = VersionMemory(maxsize=2)
    assert m.accept("s:b", 1, "new") and m.accept("s:c", 1, "new") and m.accept("s:d", 1, "new")
    assert len(m) == 2 and m.accept("s:b", 1, "new")  # forgotten: accepted again (bounded)
    m = VersionMemory()
    assert m.accept("s:node:n1", 1, "new", (1, 0)) and m.accept("s:node:n1", 2, "removed", (2, 0))
    assert not m.accept("s:node:n1", 2, "update", (3, 0))
    assert m.accept("s:node:n1", 1, "new", (4, 0))  # the node came back
    assert m.accept("s:node:n1", 2, "update", (5, 0))


def test_group_shares_events_and_acks_after_they_were_taken(client, writer, r):
    fill(writer)
    expected = all_ids(r)
    a = client.stream(group="g", consumer="a", since="0", count=10, block=0.1)
    b = client.stream(group="g", consumer="b", count=10, block=0.1, idle_timeout=0.5)
    got_a = [next(a).id for _ in range(10)]
    assert r.xpending(K.events, "g")["pending"] == 10  # taken, not acked yet
    got_b = [c.id for c in b]
    a.close()
    assert sorted(got_a + got_b) == sorted(expected)
    assert r.xpending(K.events, "g")["pending"] == 0


def test_group_survives_a_consumer_crash(client, writer, r):
    fill(writer)  # 50 events
    expected = all_ids(r)
    a = client.stream(group="g", consumer="a", since="0", count=10, claim_idle=0.3, block=0.1)
    taken_a = [next(a).id for _ in range(15)]  # batch 1 acked when batch 2 was fetched
    del a  # consumer "a" crashes: batch 2 (10 events, 5 handed out) stays pending
    assert r.xpending(K.events, "g")["pending"] == 10
    # a replay of some events lands in the stream meanwhile
    for _, fields in xrange_events(r, K.events)[20:23]:
        r.xadd(K.events, fields)
    b = client.stream(
        group="g", consumer="b", count=10, claim_idle=0.3, block=0.1, idle_timeout=1.5
    )
    got_b = [c.id for c in b]
    assert b.claimed >= 10  # a's unacked events, redelivered
    assert set(taken_a) | set(got_b) == set(expected)  # nothing lost
    assert len(got_b) == len(set(got_b))  # duplicates dropped
    assert b.duplicates == 3
    assert set(got_b) >= set(expected[10:20])
    assert r.xpending(K.events, "g")["pending"] == 0  # b acked all on close


def test_restarted_consumer_first_reads_its_own_pending(client, writer, r):
    fill(writer, jobs=2, versions=5)
    a = client.stream(group="g", consumer="a", since="0", count=4)
    [next(a) for _ in range(3)]
    del a  # crash, then the same consumer comes back
    again = client.stream(group="g", consumer="a", count=4, idle_timeout=0.5, block=0.1)
    ids = [c.id for c in again]
    assert ids == all_ids(r)  # its 4 pending first, then the rest


def test_leaving_the_block_with_an_error_acks_nothing_more(client, writer, r):
    fill(writer, jobs=2, versions=2)
    with pytest.raises(RuntimeError):
        with client.stream(group="g", consumer="a", since="0", count=2) as s:
            next(s)
            raise RuntimeError("processing failed")
    assert r.xpending(K.events, "g")["pending"] == 2


@pytest.mark.parametrize(("group", "native"), [(None, False), ("g", False), (None, True)])
def test_resumes_after_redis_restarts(tmp_path, hermetic, group, native):
    (tmp_path / "redis").mkdir()
    server = RedisServer(
        tmp_path / "redis", args=["--appendonly", "yes", "--appendfsync", "always"]
    ).start()
    try:
        r = server.client()
        w = Writer(r)
        for i in range(5):
            w.job(f"{i}.pbs")
        client = jobtap.Client(server.url, site=SITE, backoff=(0.1, 0.5))
        s = client.stream(
            group=group, since="0", count=3, block=0.2, idle_timeout=5.0, native=native
        )
        changes = [next(s) for _ in range(4)]
        server.stop()  # the stream finds out at its next read
        server.start()
        for i in range(5):
            w.job(f"{i}.pbs", state="running")
        changes += [next(s) for _ in range(6)]  # idle_timeout bounds the wait
        assert [c.id for c in changes] == all_ids(r)
        if native:  # joined before and after the restart alike
            assert all(c.event["record"]["native"]["Job_Owner"] for c in changes)
        s.close()
        client.close()
    finally:
        server.stop()


def test_unreachable_redis_is_a_clear_error(hermetic):
    from jobtap.sim.localredis import free_port

    client = jobtap.Client(f"redis://127.0.0.1:{free_port()}/0", site=SITE)
    with pytest.raises(jobtap.RedisUnavailable, match="cannot reach Redis"):
        next(client.stream(since="0"))
    with pytest.raises(ConnectionError):
        client.job("1.pbs")


def test_bad_since(client):
    with pytest.raises(jobtap.ConfigError):
        client.stream(since="yesterday")


def write_both_formats(writer) -> None:
    """1.pbs's first two versions in format 1 (a worker at --event-version 1),
    its next two in format 2: a stream in the middle of a site's upgrade."""
    writer.applier.settings = Settings(event_version=1)
    writer.job("1.pbs")
    writer.job("1.pbs", state="running")
    writer.applier.settings = Settings()
    writer.job("1.pbs", comment="hi")
    writer.finish("1.pbs", exit_status=0)


def test_both_event_formats_are_delivered_the_same_way(client, writer, r):
    write_both_formats(writer)
    stored = [orjson.loads(f[b"event"]) for _, f in xrange_events(r, K.events)]
    assert [format_of(e) for e in stored] == [1, 1, 2, 2]
    assert ["native" in e["record"] for e in stored] == [True, True, False, False]
    got = list(client.stream(since="0", idle_timeout=0.3))
    assert [(c.type, c.version) for c in got] == [("new", 1), ("state", 2), ("update", 3),
                                                  ("final", 4)]  # fmt: skip
    assert [c.record.native for c in got] == [None] * 4  # whatever the format
    assert [c.record.state for c in got] == ["queued", "running", "running", "completed"]
    assert got[1].changes["native.job_state"] == ["Q", "R"]  # format 1: with its values
    assert "native.job_state" not in got[3].changes  # format 2: named, values in the hash
    assert [c.native_changed for c in got] == [(), ("job_state",), (), ("job_state",)]
    assert got[3].record.final and got[3].record.exit_status == 0
    assert [c.json for c in got] == [
        f[b"event"] for _, f in xrange_events(r, K.events)
    ]  # as written


def test_native_joined_in_per_batch_from_the_hashes(client, writer, r):
    """stream(native=True): each event gets its object's native record from the
    hash (null once the hash is gone); a format-1 event keeps its own."""
    write_both_formats(writer)
    writer.job("2.pbs", user="bob")
    writer.node("n1")
    writer.remove_node("n1")
    r.delete(K.job("bob", "2.pbs"))  # as when a finished job's hash expires
    plain = list(client.stream(since="0", idle_timeout=0.3))
    got = list(client.stream(since="0", count=3, idle_timeout=0.3, native=True))
    assert [c.id for c in got] == [c.id for c in plain]
    key = K.job("alice", "1.pbs")
    assert r.hget(key, "native") == b""  # ended: its native record is kept packed
    stored = orjson.dumps(native_of(r.hgetall(key)))
    natives = [c.event["record"]["native"] for c in got]
    assert natives == [
        {"job_state": "Q", "Job_Owner": "alice@vm"},  # format 1: its own, of version 1
        {"job_state": "R", "Job_Owner": "alice@vm"},  # of version 2
        orjson.loads(stored),  # format 2: the hash's
        orjson.loads(stored),
        None,  # 2.pbs: its hash expired
        None,  # n1: removed, its hash with it
        None,
    ]
    assert [orjson.loads(c.json) for c in got] == [c.event for c in got]
    assert {k: v for k, v in got[2].event["record"].items() if k != "native"} == (
        plain[2].event["record"]
    )
    assert all(c.record.native is None for c in got)  # a change's record: never
