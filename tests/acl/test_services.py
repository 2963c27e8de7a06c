"""The service users on a real redis-server with ACLs: the real collector (in
follow mode) and rq workers run as ``writer`` (its explicit command list is
enough: Redis logs no refusal), ``jobtap poke`` runs as ``poker``, ``operator``
reads everything and writes nothing, the default user is off; the SDK as a
user follows nodes and lists her finished jobs without the site-wide keys; and
``jobtap status`` works as ``operator``."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import redis

import jobtap
from jobtap.acl import rules as acl
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Settings
from sim.rig.paths import ROOT
from sim.rig.wait import eventually
from tests.support.acl import (
    NO_RETRY,
    OPERATOR_PW,
    POKER_PW,
    SITE,
    WRITER_PW,
    K,
    raw,
    refused,
    run,
    set_up_users,
)


def run_jobtap(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jobtap.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refusals(admin: redis.Redis, user: str) -> list[dict]:
    return [e for e in admin.acl_log() if e.get("username") == user]


SIM = [
    "--backend",
    "sim",
    "--interval",
    "0.05",
    "--sim-jobs",
    "150",
    "--sim-nodes",
    "12",
    "--sim-tick",
    "600",
    "--nodes-every",
    "1",
]


def test_collector_and_workers_run_as_writer(acl_server):
    set_up_users(acl_server, [])
    admin = acl_server.client(decode_responses=True)
    admin.acl_log_reset()
    url = acl_server.url_as(acl.WRITER, WRITER_PW)
    common = ["--redis", url, "--site", SITE, "--log-level", "WARNING"]
    done = run_jobtap("collector", *common, *SIM, "--cycles", "2")
    assert done.returncode == 0, done.stderr
    done = run_jobtap("worker", *common, "--burst")
    assert done.returncode == 0, done.stderr
    # a long-running worker (blocking dequeue, its pub/sub command channel,
    # heartbeats) while the collector goes on
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobtap.cli", "worker", *common],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        follow = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobtap.cli",
                "collector",
                *common,
                *SIM,
                "--interval",
                "0.4",
                "--cycles",
                "3",
                "--follow",
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        # poke once the collector follows the poke stream (it reads it with XREAD)
        eventually(
            lambda: any(
                c.get("user") == acl.WRITER and c.get("cmd") == "xread" for c in admin.client_list()
            ),
            timeout=20,
            what="the collector reading pokes",
        )
        poker = acl_server.url_as(acl.POKER, POKER_PW)
        done = run_jobtap("poke", "--redis", poker, "--site", SITE, "--strict", "1", "2")
        assert done.returncode == 0, done.stderr
        _, err = follow.communicate(timeout=30)
        assert follow.returncode == 0, err
        queues = [f"rq:queue:{K.rq_queue(p)}" for p in ("state", "update")]
        eventually(lambda: not any(admin.llen(q) for q in queues), timeout=20, what="queues empty")
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    status = run_jobtap("status", "--redis", url, "--site", SITE)
    assert status.returncode == 0, status.stderr
    # the whole pipeline went through, and Redis refused the writer nothing
    assert admin.xlen(K.events) > 150 and admin.hlen(K.owner) > 0
    assert admin.hget(K.meta, "cycles_ok") == "5"
    assert admin.xlen(K.pokes) == 1
    assert refusals(admin, acl.WRITER) == [] and refusals(admin, acl.POKER) == []
    assert [c for c in admin.client_list() if c.get("user") == "default"] == []


def test_writer_is_limited_to_jobtap_and_rq(acl_server):
    set_up_users(acl_server, [])
    for args in (
        ["CONFIG", "GET", "*"],
        ["FLUSHALL"],
        ["ACL", "LIST"],
        ["KEYS", "*"],
        ["SCAN", "0"],
        ["DEBUG", "SLEEP", "0"],
        ["MONITOR"],
        ["CLIENT", "LIST"],
        ["CLIENT", "KILL", "USER", "alice"],
        ["HSET", "other:key", "a", "1"],
        ["SUBSCRIBE", "other"],
        ["PUBLISH", "other", "x"],
        ["EVAL", "return 1", "0"],
        ["SHUTDOWN", "NOSAVE"],
    ):
        assert refused(run(raw(acl_server, acl.WRITER, WRITER_PW), *args)), args
    conn = raw(acl_server, acl.WRITER, WRITER_PW)
    assert run(conn, "HSET", K.meta, "a", "1") == ("ok", 1)
    assert run(conn, "RPUSH", "rq:queue:x", "1") == ("ok", 1)


def test_operator_reads_everything_and_writes_nothing(acl_server, writer):
    set_up_users(acl_server, ["alice"])
    writer.job("1.pbs", "alice")
    writer.job("2.pbs", "bob")

    def op(*args):
        conn = raw(acl_server, acl.OPERATOR, OPERATOR_PW)
        try:
            return run(conn, *args)
        finally:
            conn.disconnect()

    for args in (
        ["HGETALL", K.job("bob", "2.pbs")],
        ["HGETALL", K.owner],
        ["HGETALL", K.meta],
        ["XRANGE", K.events, "-", "+"],
        ["SCAN", "0"],
        ["INFO", "server"],
        ["LRANGE", "rq:queue:x", "0", "-1"],
        ["SUBSCRIBE", K.all_channel],
        ["PSUBSCRIBE", "jobtap:*"],
        ["XGROUP", "CREATE", K.events, "export", "0"],
        ["XREADGROUP", "GROUP", "export", "c", "STREAMS", K.events, ">"],
    ):
        assert op(*args)[0] == "ok", args
    for args in (
        ["HSET", K.job("bob", "2.pbs"), "state", "x"],
        ["DEL", K.owner],
        ["XADD", K.events, "*", "id", "x"],
        ["PUBLISH", K.all_channel, "{}"],
        ["RPUSH", "rq:queue:x", "1"],
        ["CONFIG", "GET", "*"],
        ["KEYS", "*"],
        ["FLUSHALL"],
        ["ACL", "LIST"],
        ["EVAL", "return 1", "0"],
        ["XGROUP", "CREATE", K.job("bob", "2.pbs"), "g", "0"],
        ["SHUTDOWN", "NOSAVE"],
    ):
        assert refused(op(*args)), args
    # the SDK as an operator: every job, the site channel, a consumer group
    with jobtap.Client(acl_server.url, site=SITE, username=acl.OPERATOR, password=OPERATOR_PW) as c:
        assert [(j.id, j.user) for j in c.jobs()] == [("1.pbs", "alice"), ("2.pbs", "bob")]
        got: list[jobtap.Change] = []
        with c.subscribe(got.append, all_jobs=True):
            writer.job("2.pbs", "bob", state="running")
            eventually(lambda: len(got) >= 3, timeout=5, what="three changes")
        assert [c.type for c in got] == ["initial", "initial", "state"]
        with c.stream(group="exporter", since="0", idle_timeout=0.3) as stream:
            assert len(list(stream)) == 3


def test_poker_can_only_poke(acl_server):
    set_up_users(acl_server, [])
    conn = raw(acl_server, acl.POKER, POKER_PW)
    assert run(conn, "XADD", K.pokes, "*", "ids", "1.pbs")[0] == "ok"
    for args in (
        ["XRANGE", K.pokes, "-", "+"],
        ["DEL", K.pokes],
        ["XADD", K.events, "*", "a", "b"],
        ["XADD", SiteKeys("hpc2").pokes, "*", "a", "b"],
        ["HGETALL", K.owner],
        ["PUBLISH", K.all_channel, "x"],
        ["SUBSCRIBE", K.all_channel],
        ["RPUSH", "rq:queue:x", "1"],
        ["CONFIG", "GET", "*"],
    ):
        assert refused(run(conn, *args)), args


def test_the_default_user_is_off(acl_server):
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=acl_server.port, retry=NO_RETRY).ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=acl_server.port, username="default", password="", retry=NO_RETRY).ping()


def test_user_can_subscribe_to_nodes(acl_server, writer):
    set_up_users(acl_server, ["alice"])
    writer.node("n1")
    url = acl_server.url
    with jobtap.Client(url, site=SITE, username="alice", password="pw-alice") as c:
        got: list[jobtap.Change] = []
        with c.subscribe(got.append, kinds=("job", "node")):
            writer.node("n1", state="down")
            eventually(lambda: len(got) >= 2, timeout=5, what="two changes")
        assert [(c.type, c.object_id) for c in got] == [("initial", "n1"), ("state", "n1")]


def test_user_lists_her_finished_jobs(acl_server, writer):
    set_up_users(acl_server, ["alice"])
    writer.job("1.pbs", "alice")
    writer.job("1.pbs", "alice", state="completed", exit_status=0)
    with jobtap.Client(acl_server.url, site=SITE, username="alice", password="pw-alice") as c:
        assert [j.id for j in c.jobs(user="alice", finished=True)] == ["1.pbs"]


def test_user_lists_her_finished_jobs_after_her_stream_let_them_go(acl_server, writer):
    """Her finished jobs are listed as long as their hash is kept, not as long as
    her stream holds their finals: the users' streams keep no more than the site
    stream's window (workers/apply.lua), which a busy site fills in hours."""
    set_up_users(acl_server, ["alice"])
    writer.applier.settings = Settings(site_maxlen=20)
    writer.job("1.pbs", "alice")
    writer.job("1.pbs", "alice", state="completed", exit_status=0)
    for i in range(2, 10):  # her stream's first node fills (MINID ~ trims whole nodes)
        writer.job(f"{i}.pbs", "alice")
    for i in range(5, 200):  # others' jobs move the site stream's window on
        writer.job(f"{i}.pbs", "bob")
    writer.job("200.pbs", "alice")  # her next event trims her stream to the window
    admin = acl_server.client()
    finals = [f for _, f in admin.xrange(K.user_events("alice")) if f[b"type"] == b"final"]
    assert finals == []
    with jobtap.Client(acl_server.url, site=SITE, username="alice", password="pw-alice") as c:
        assert [j.id for j in c.jobs(user="alice", finished=True)] == [
            *(f"{i}.pbs" for i in range(1, 10)),
            "200.pbs",
        ]
        assert [j.id for j in c.jobs(user="alice", state="completed")] == ["1.pbs"]


def test_a_user_of_older_rules_lists_her_finished_jobs_from_her_stream(acl_server, writer, caplog):
    """Rules made before the finished set (no ZRANGE): the listing falls back to
    the finals of her stream, and says how to grant the rest."""
    set_up_users(acl_server, ["alice"])
    acl_server.client().execute_command("ACL", "SETUSER", "alice", "-zrange")
    writer.job("1.pbs", "alice")
    writer.job("1.pbs", "alice", state="completed", exit_status=0)
    with jobtap.Client(acl_server.url, site=SITE, username="alice", password="pw-alice") as c:
        assert [j.id for j in c.jobs(user="alice", finished=True)] == ["1.pbs"]
    assert "run jobtap acl sync" in caplog.text


def test_operator_can_run_jobtap_status(acl_server, writer):
    writer.job("1.pbs", "alice")
    acl_server.client().hset(K.meta, "status", "ok")
    done = run_jobtap(
        "status", "--redis", acl_server.url_as(acl.OPERATOR, OPERATOR_PW), "--site", SITE
    )
    assert done.returncode == 0, done.stderr


def test_a_reader_of_the_site_stream_alone_is_told_it_cannot_read_job_events(
    acl_server, admin, writer
):
    """A job's event is in its user's stream, which the site stream names
    (jobtap.entries): a Redis user granted the site stream and not the users'
    streams is refused with a clear error, not handed a stream without them."""
    writer.job("1.pbs", "alice")
    admin.execute_command(
        "ACL", "SETUSER", "sitestream", "on", ">pw", "-@all", "+ping", "+hello", "+xread",
        "+xinfo|stream", "+xrange", "+xrevrange", f"%R~{K.events}",
    )  # fmt: skip
    with jobtap.Client(acl_server.url, site=SITE, username="sitestream", password="pw") as c:
        with pytest.raises(jobtap.PermissionDenied):
            list(c.stream(since="0", idle_timeout=0.3))
        # the same user, granted alice's stream too, reads her job's event
        admin.execute_command("ACL", "SETUSER", "sitestream", f"%R~{K.user_events('alice')}")
        assert [ch.object_id for ch in c.stream(since="0", idle_timeout=0.3)] == ["1.pbs"]
    with jobtap.Client(acl_server.url, site=SITE, username=acl.OPERATOR, password=OPERATOR_PW) as c:
        assert [ch.object_id for ch in c.stream(since="0", idle_timeout=0.3)] == ["1.pbs"]
