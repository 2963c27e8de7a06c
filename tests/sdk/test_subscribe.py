"""subscribe(): list-then-watch, filters, ending after final, one thread and one
pub/sub connection per client, callbacks that raise."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import jobtap
from jobtap.events import format_of
from jobtap.workers.apply import Settings
from sim.rig.wait import eventually
from tests.support.sdk import K, Recorder, pubsub_clients


def test_initial_record_then_every_change_then_final_ends_it(client, writer, barrier):
    writer.job("1.pbs")
    rec = Recorder()
    sub = client.subscribe(rec, jobs=["1.pbs"])
    # subscribe() returns after the initial record was delivered
    assert [(c.type, c.version) for c in rec.changes] == [("initial", 1)]
    assert rec.changes[0].record.state == "queued" and not rec.changes[0].final
    writer.job("1.pbs", comment="hello")
    writer.job("1.pbs", state="running")
    writer.finish("1.pbs", exit_status=3)
    rec.wait_count(4)
    assert [(c.type, c.version) for c in rec.changes] == [
        ("initial", 1), ("update", 2), ("state", 3), ("final", 4),
    ]  # fmt: skip
    last = rec.changes[-1]
    assert last.final and last.record.terminal and last.record.exit_status == 3
    assert last.changes["state"] == ["running", "completed"]
    assert sub.wait_closed(5) and sub.closed and sub.jobs == frozenset()
    writer.job("2.pbs")  # nothing more for this subscription
    barrier()
    assert len(rec.changes) == 4


def test_callbacks_run_on_one_background_thread_and_one_pubsub_connection(client, writer, r):
    users = ["alice", "bob", "carol"]
    for i, u in enumerate(users):
        writer.job(f"{i}.pbs", user=u)
    recs = [Recorder() for _ in range(9)]
    subs = [client.subscribe(rec, jobs=[f"{i % 3}.pbs"]) for i, rec in enumerate(recs[:6])]
    subs += [client.subscribe(rec, user=users[i % 3]) for i, rec in enumerate(recs[6:])]
    assert pubsub_clients(r) == 1
    channels = {c.decode() for c in r.pubsub_channels()}
    assert channels == {K.user_channel(u) for u in users}
    for i in range(3):
        writer.job(f"{i}.pbs", comment="x")
    for rec in recs:
        rec.wait_count(2)
    threads = set().union(*(rec.threads for rec in recs))
    assert len(threads) == 1 and threading.main_thread().name not in threads
    # channels are reference-counted: closing all but one keeps that one
    for s in subs:
        if s is not subs[-1]:
            s.close()

    def only_carol_left() -> bool:
        assert {c.decode() for c in r.pubsub_channels()} == {K.user_channel("carol")}
        return True

    eventually(only_carol_left)
    subs[-1].close()


def test_attrs_limit_updates_but_not_state_changes(client, writer, barrier):
    writer.job("1.pbs")
    rec = Recorder()
    client.subscribe(rec, jobs=["1.pbs"], attrs=["comment"])
    writer.job("1.pbs", resources_used={"cput": "00:01:00"})  # filtered out
    writer.job("1.pbs", comment="look")  # delivered
    writer.job("1.pbs", state="running")  # state changes always
    writer.job("1.pbs", resources_used={"cput": "00:02:00"})  # filtered out
    writer.job("1.pbs", comment="again")
    writer.job("1.pbs", resources_used={"cput": "00:03:00"})  # filtered out, and the last
    rec.wait_for(lambda cs: 6 in [c.version for c in cs])
    barrier()
    assert [(c.type, c.version) for c in rec.changes] == [
        ("initial", 1), ("update", 3), ("state", 4), ("update", 6),
    ]  # fmt: skip


def test_attrs_native_matches_native_subkeys(client, writer):
    writer.job("1.pbs")
    rec = Recorder()
    client.subscribe(rec, jobs=["1.pbs"], attrs=["native"], initial=False)
    writer.job("1.pbs", native={"job_state": "Q", "Job_Owner": "alice@vm", "substate": 11})
    rec.wait_count(1)
    assert rec.changes[0].changes == {}  # format 2: native values stay in the hash
    assert rec.changes[0].native_changed == ("substate",)
    assert rec.changes[0].changed() == {"native.substate"}


def test_both_event_formats_and_initial_records_look_alike_to_a_callback(client, writer):
    """An initial change (made from the hash, which has native), format-1 events
    (native in them) and format-2 events (none): the same record to a callback,
    without native, and the native keys that changed named in every event."""
    writer.job("1.pbs")
    rec = Recorder()
    client.subscribe(rec, jobs=["1.pbs"])
    writer.applier.settings = Settings(event_version=1)
    writer.job("1.pbs", state="running")
    writer.applier.settings = Settings()
    writer.finish("1.pbs", exit_status=0)
    rec.wait_count(3)
    assert [(c.type, format_of(c.event)) for c in rec.changes] == [
        ("initial", 2), ("state", 1), ("final", 2),
    ]  # fmt: skip
    assert [c.record.native for c in rec.changes] == [None] * 3
    assert "native" not in rec.changes[0].event["record"]  # made in format 2
    assert "native" in rec.changes[1].event["record"]  # as written
    assert rec.changes[1].changes["native.job_state"] == ["Q", "R"]  # format 1: with values
    assert "native.job_state" not in rec.changes[2].changes  # format 2: named only
    assert [c.native_changed for c in rec.changes] == [(), ("job_state",), ("job_state",)]
    assert [c.record.state for c in rec.changes] == ["queued", "running", "completed"]
    # the native record, on request: from the hash
    assert client.native("1.pbs") == {"job_state": "C", "Job_Owner": "alice@vm"}


def test_user_scope_sees_new_jobs_and_keeps_going_after_finals(client, writer, barrier):
    writer.job("1.pbs", user="alice")
    writer.job("9.pbs", user="bob")
    rec = Recorder()
    sub = client.subscribe(rec, user="alice")
    writer.finish("1.pbs")
    writer.job("2.pbs", user="alice")
    writer.job("3.pbs", user="bob")
    rec.wait_count(3)
    barrier()
    assert [(c.type, c.object_id) for c in rec.changes] == [
        ("initial", "1.pbs"), ("final", "1.pbs"), ("new", "2.pbs"),
    ]  # fmt: skip
    assert not sub.closed


def test_without_a_scope_the_user_name_must_be_known(client):
    # (with credentials, the default is the user's own jobs: see test_sdk_cache)
    assert client.user is None
    with pytest.raises(jobtap.ConfigError, match="say what to watch"):
        client.subscribe(print)
    with pytest.raises(jobtap.ConfigError, match="kinds"):
        client.subscribe(print, user="alice", kinds=["jobs"])
    with pytest.raises(jobtap.ConfigError, match="all_jobs"):
        client.subscribe(print, user="alice", all_jobs=True)


def test_all_jobs_and_nodes(client, writer, barrier):
    writer.job("1.pbs", user="alice")
    writer.job("2.pbs", user="bob")
    writer.finish("2.pbs")  # finished before: not part of the snapshot
    writer.node("n1")
    jobs_rec, nodes_rec = Recorder(), Recorder()
    client.subscribe(jobs_rec, all_jobs=True)
    client.subscribe(nodes_rec, kinds=["node", "queue"])
    writer.job("3.pbs", user="carol")
    writer.node("n1", state="down")
    writer.job("1.pbs", state="running")
    marker = barrier()  # a job of the site too: every-job subscriptions see it, last
    jobs_rec.wait_for(lambda cs: marker in [c.object_id for c in cs])
    assert [(c.type, c.object_id) for c in jobs_rec.changes] == [
        ("initial", "1.pbs"), ("new", "3.pbs"), ("state", "1.pbs"), ("new", marker),
    ]  # fmt: skip
    assert [(c.type, c.kind, c.object_id) for c in nodes_rec.changes] == [
        ("initial", "node", "n1"), ("state", "node", "n1"),
    ]  # fmt: skip
    assert isinstance(nodes_rec.changes[-1].record, jobtap.Node)
    assert nodes_rec.changes[-1].record.state == "down"


def test_removed_node_that_comes_back_is_seen_again(client, writer):
    writer.node("n1")
    rec = Recorder()
    client.subscribe(rec, kinds=["node"])
    writer.remove_node("n1")
    writer.node("n1")  # back, its versions start again at 1
    rec.wait_count(3)
    assert [(c.type, c.version) for c in rec.changes] == [
        ("initial", 1),
        ("removed", 2),
        ("new", 1),
    ]


def test_a_job_not_collected_yet_is_waited_for_when_its_user_is_known(client, writer):
    with pytest.raises(jobtap.JobNotFound):
        client.subscribe(print, jobs=["7.pbs"])
    rec = Recorder()
    sub = client.subscribe(rec, jobs=["7.pbs"], user="alice")
    assert rec.changes == []
    writer.job("7.pbs", user="alice")
    writer.finish("7.pbs")
    rec.wait_count(2)
    assert [(c.type, c.version) for c in rec.changes] == [("new", 1), ("final", 2)]
    assert sub.wait_closed(5)


def test_already_finished_job_is_delivered_once_and_ends(client, writer):
    writer.job("1.pbs")
    writer.finish("1.pbs")
    rec = Recorder()
    sub = client.subscribe(rec, jobs=["1.pbs"])
    assert [(c.type, c.final) for c in rec.changes] == [("initial", True)]
    assert sub.closed


def test_initial_false_delivers_only_later_changes(client, writer, barrier):
    writer.job("1.pbs")
    writer.job("1.pbs", comment="before")
    rec = Recorder()
    client.subscribe(rec, jobs=["1.pbs"], initial=False)
    writer.job("1.pbs", comment="after")
    rec.wait_for(lambda cs: 3 in [c.version for c in cs])
    barrier()
    assert [(c.type, c.version) for c in rec.changes] == [("update", 3)]


def test_a_raising_callback_is_logged_and_the_thread_goes_on(client, writer, caplog):
    writer.job("1.pbs")

    def bad(change):
        raise RuntimeError("boom")

    client.subscribe(bad, jobs=["1.pbs"])
    rec = Recorder()
    client.subscribe(rec, jobs=["1.pbs"])
    with caplog.at_level(logging.ERROR, logger="jobtap.sdk"):
        writer.job("1.pbs", comment="x")
        rec.wait_count(2)
    assert any("callback raised" in r.message and r.exc_info for r in caplog.records)
    writer.job("1.pbs", comment="y")
    rec.wait_count(3)


def test_close_stops_callbacks_and_subscribe_from_a_callback_works(client, writer, barrier):
    writer.job("1.pbs")
    writer.job("2.pbs")
    inner = Recorder()
    started = []

    def outer(change):
        if not started:
            started.append(client.subscribe(inner, jobs=["2.pbs"]))

    sub = client.subscribe(outer, jobs=["1.pbs"])
    inner.wait_count(1)
    assert [(c.type, c.object_id) for c in inner.changes] == [("initial", "2.pbs")]
    sub.close()
    started[0].close()
    writer.job("2.pbs", comment="late")
    barrier()
    assert len(inner.changes) == 1


def test_wait_from_a_callback_is_refused(client, writer):
    writer.job("1.pbs")
    errors = []

    def cb(change):
        try:
            client.wait("1.pbs", timeout=1)
        except jobtap.JobtapError as exc:
            errors.append(exc)

    client.subscribe(cb, jobs=["1.pbs"])
    assert len(errors) == 1 and "callback thread" in str(errors[0])


def test_closed_client_refuses_new_subscriptions(redis_server, hermetic):
    c = jobtap.Client(redis_server.url, site="t1")
    c.close()
    with pytest.raises(jobtap.JobtapError, match="closed"):
        c.subscribe(print, user="alice")


class TrickleProxy:
    """A loopback TCP proxy in front of Redis that hands the server's replies to
    the client a few hundred bytes at a time, so messages arrive in pieces."""

    def __init__(self, port: int, piece: int = 512, pause: float = 0.0005):
        import socket

        self.target, self.piece, self.pause = port, piece, pause
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(
                target=self._pipe, args=(client, upstream, 65536, 0), daemon=True
            ).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self.piece, self.pause),
                             daemon=True).start()  # fmt: skip

    def _pipe(self, src, dst, piece: int, pause: float) -> None:
        try:
            while data := src.recv(piece):
                dst.sendall(data)
                if pause:
                    time.sleep(pause)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.closed.set()
        self.listener.close()


def test_large_events_arriving_in_pieces_do_not_break_the_link(redis_server, writer, hermetic,
                                                               caplog):  # fmt: skip
    """A large event reaches the socket in pieces; reading it must wait for the
    whole message rather than give up and reconnect."""
    proxy = TrickleProxy(redis_server.port)
    client = jobtap.Client(f"redis://127.0.0.1:{proxy.port}/0", site=K.site, backoff=(0.05, 0.5))
    try:
        rec = Recorder()
        sub = client.subscribe(rec, user="alice")
        writer.job("1.pbs", "alice")
        rec.wait_count(1)
        with caplog.at_level(logging.WARNING, logger="jobtap"):
            for i in range(3):
                writer.job("1.pbs", comment=f"{i}" + "x" * 200_000)
            rec.wait_for(lambda changes: len(changes) >= 4, timeout=60)
        assert rec.versions("1.pbs") == [1, 2, 3, 4]
        assert sub.resyncs == 0
        assert "lost the pub/sub connection" not in caplog.text
        sub.close()
    finally:
        client.close()
        proxy.close()


def test_a_damaged_native_record_neither_stops_a_subscription_nor_is_read(
    client, writer, r, caplog
):
    """Changes made from hashes leave the native record out, so a finished job's
    packed record made unreadable (its hash edited by hand) is not even read:
    the subscription delivers both jobs; asked for, that record is a one-line
    error, and a stream joining native records gives it as None with a warning."""
    writer.job("1.pbs")
    writer.finish("1.pbs", exit_status=0)
    writer.job("2.pbs")
    key = K.job("alice", "1.pbs")
    assert r.hget(key, "native_zd")
    r.hset(key, "comment", "edited by hand")
    rec = Recorder()
    client.subscribe(rec, jobs=["1.pbs", "2.pbs"])
    rec.wait_count(2)
    assert sorted((c.object_id, c.record.state) for c in rec.changes) == [
        ("1.pbs", "completed"), ("2.pbs", "queued"),
    ]  # fmt: skip
    assert [c.record.comment for c in rec.changes if c.object_id == "1.pbs"] == ["edited by hand"]
    with pytest.raises(ValueError, match=r"^native_zd is not a packed native record: "):
        client.native("1.pbs")
    assert client.native("2.pbs") == writer.jobs["2.pbs"]["native"]
    with caplog.at_level(logging.WARNING, logger="jobtap"):
        got = list(client.stream(since="0", idle_timeout=0.3, native=True))
    by_job = {c.object_id: c.event["record"]["native"] for c in got}
    assert by_job == {"1.pbs": None, "2.pbs": writer.jobs["2.pbs"]["native"]}
    assert f"jobtap: {key}: native_zd is not a packed native record" in caplog.text


def test_a_field_edited_to_garbage_is_read_as_empty_with_a_warning(client, writer, r, caplog):
    """A hash whose JSON field holds no JSON (edited by hand) does not stop a
    subscription: its record comes with that field empty, and a warning says
    which field and what it held (it made subscribe() time out after 10 s,
    blaming Redis, and the subscription thread fail again every 0.2 s)."""
    writer.job("1.pbs")
    writer.job("2.pbs")
    r.hset(K.job("alice", "1.pbs"), "requested", "{not json")
    rec = Recorder()
    with caplog.at_level(logging.WARNING, logger="jobtap"):
        client.subscribe(rec, jobs=["1.pbs", "2.pbs"])
    got = {c.object_id: c.record.requested for c in rec.changes}
    assert got == {"1.pbs": None, "2.pbs": writer.jobs["2.pbs"]["requested"]}
    assert "a record's requested is not JSON" in caplog.text and "'{not json'" in caplog.text
