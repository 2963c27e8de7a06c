"""The permission matrix of a cluster user (alice) on a real redis-server with
ACLs: every operation she must not do is refused with NOPERM, every operation the
SDK needs works.  The matrix is printed as a table in the test report (and
recorded as the ``acl_matrix`` property for the JUnit XML)."""

# ruff: noqa: F811  (pytest fixtures imported from test_acl)

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from test_acl import K, acl_server, raw, refused, run, set_up_users, writer  # noqa: F401

from jobtap.keys import SiteKeys

OTHER_SITE = SiteKeys("hpc2")
BOB_JOB = K.job("bob", "2.pbs")
HER_JOB = K.job("alice", "1.pbs")
HER_STREAM = K.user_events("alice")
RQ_QUEUE = f"rq:queue:{K.rq_queue('state')}"

FORBIDDEN: list[tuple[str, list[str]]] = [
    ("read bob's job hash", ["HGETALL", BOB_JOB]),
    ("read a field of bob's job", ["HGET", BOB_JOB, "state"]),
    ("probe bob's job key", ["EXISTS", BOB_JOB]),
    ("list bob's jobs", ["SMEMBERS", K.user_jobs("bob")]),
    ("XREAD bob's stream", ["XREAD", "STREAMS", K.user_events("bob"), "0"]),
    ("XRANGE bob's stream", ["XRANGE", K.user_events("bob"), "-", "+"]),
    (
        "XREADGROUP on bob's stream",
        ["XREADGROUP", "GROUP", "g", "alice", "STREAMS", K.user_events("bob"), ">"],
    ),
    ("XGROUP CREATE on bob's stream", ["XGROUP", "CREATE", K.user_events("bob"), "mine", "0"]),
    ("read the site stream (every user)", ["XRANGE", K.events, "-", "+"]),
    ("read the owner index", ["HGETALL", K.owner]),
    ("look up one job's owner", ["HGET", K.owner, "2.pbs"]),
    ("read the collector's meta", ["HGETALL", K.meta]),
    ("read the fingerprints", ["HGETALL", K.fingerprints]),
    ("her keys at a site not granted", ["HGETALL", OTHER_SITE.job("alice", "1.pbs")]),
    ("SUBSCRIBE bob's channel", ["SUBSCRIBE", K.user_channel("bob")]),
    ("SSUBSCRIBE bob's channel", ["SSUBSCRIBE", K.user_channel("bob")]),
    ("SUBSCRIBE the all-jobs channel", ["SUBSCRIBE", K.all_channel]),
    ("PSUBSCRIBE jobtap:*", ["PSUBSCRIBE", "jobtap:*"]),
    ("PSUBSCRIBE her own channel", ["PSUBSCRIBE", K.user_channel("alice")]),
    ("SCAN", ["SCAN", "0"]),
    ("SCAN MATCH her own keys", ["SCAN", "0", "MATCH", K.user_base("alice") + ":*"]),
    ("KEYS", ["KEYS", "*"]),
    ("HSET her own job", ["HSET", HER_JOB, "state", "completed"]),
    ("DEL her own job", ["DEL", HER_JOB]),
    ("COPY her own job", ["COPY", HER_JOB, HER_JOB + ":copy"]),
    ("XADD to her own stream", ["XADD", HER_STREAM, "*", "id", "forged"]),
    ("XTRIM her own stream", ["XTRIM", HER_STREAM, "MAXLEN", "0"]),
    ("XGROUP DESTROY on her own stream", ["XGROUP", "DESTROY", HER_STREAM, "g"]),
    ("PUBLISH to her own channel", ["PUBLISH", K.user_channel("alice"), "{}"]),
    ("PUBLISH to bob's channel", ["PUBLISH", K.user_channel("bob"), "{}"]),
    ("SPUBLISH to her own channel", ["SPUBLISH", K.user_channel("alice"), "{}"]),
    ("CONFIG GET", ["CONFIG", "GET", "*"]),
    ("CONFIG SET", ["CONFIG", "SET", "maxmemory", "1"]),
    ("FLUSHALL", ["FLUSHALL"]),
    ("FLUSHDB", ["FLUSHDB"]),
    ("DEBUG", ["DEBUG", "SLEEP", "0"]),
    ("MODULE LIST", ["MODULE", "LIST"]),
    ("ACL LIST", ["ACL", "LIST"]),
    ("ACL SETUSER herself", ["ACL", "SETUSER", "alice", "+@all"]),
    (
        "EVAL (a read of her own job)",
        ["EVAL", "return redis.call('hgetall', KEYS[1])", "1", HER_JOB],
    ),
    ("SCRIPT LOAD", ["SCRIPT", "LOAD", "return 1"]),
    ("FUNCTION LIST", ["FUNCTION", "LIST"]),
    ("rq: read the state queue", ["LRANGE", RQ_QUEUE, "0", "-1"]),
    ("rq: enqueue a job", ["RPUSH", RQ_QUEUE, "forged"]),
    ("rq: read a job record", ["HGETALL", "rq:job:forged"]),
    ("rq: command a worker", ["PUBLISH", "rq:pubsub:w", "{}"]),
    ("INFO", ["INFO"]),
    ("CLIENT LIST", ["CLIENT", "LIST"]),
    ("CLIENT KILL bob", ["CLIENT", "KILL", "USER", "bob"]),
    ("MULTI", ["MULTI"]),
    ("MONITOR", ["MONITOR"]),
    ("SHUTDOWN", ["SHUTDOWN", "NOSAVE"]),
]


def allowed(first_id: bytes) -> list[tuple[str, list[str], Callable[[Any], bool]]]:
    """What the SDK does as alice, and what a right reply looks like."""
    return [
        ("PING", ["PING"], lambda r: r == b"PONG"),
        ("SELECT 0", ["SELECT", "0"], lambda r: r == b"OK"),
        ("read her job hash", ["HGETALL", HER_JOB], lambda r: b"state" in r),
        ("read a field of her job", ["HGET", HER_JOB, "state"], lambda r: r == b"queued"),
        (
            "read fields of her job",
            ["HMGET", HER_JOB, "id", "user"],
            lambda r: r == [b"1.pbs", b"alice"],
        ),
        ("probe her job key", ["EXISTS", HER_JOB], lambda r: r == 1),
        ("list her jobs", ["SMEMBERS", K.user_jobs("alice")], lambda r: r == [b"1.pbs"]),
        ("XRANGE her stream", ["XRANGE", HER_STREAM, "-", "+"], lambda r: len(r) == 1),
        (
            "XREVRANGE her stream",
            ["XREVRANGE", HER_STREAM, "+", "-", "COUNT", "1"],
            lambda r: r[0][0] == first_id,
        ),
        ("XREAD her stream", ["XREAD", "STREAMS", HER_STREAM, "0"], lambda r: len(r[0][1]) == 1),
        ("XINFO STREAM her stream", ["XINFO", "STREAM", HER_STREAM], lambda r: b"length" in r),
        ("read a node", ["HGETALL", K.node("n1")], lambda r: b"state" in r),
        ("list the nodes", ["SMEMBERS", K.node_index], lambda r: r == [b"n1"]),
        ("read a queue", ["HGETALL", K.queue("workq")], lambda r: b"state" in r),
        ("list the queues", ["SMEMBERS", K.queue_index], lambda r: r == [b"workq"]),
        (
            "XGROUP CREATE on her stream",
            ["XGROUP", "CREATE", HER_STREAM, "g", "0"],
            lambda r: r == b"OK",
        ),
        (
            "XREADGROUP on her stream",
            ["XREADGROUP", "GROUP", "g", "c1", "STREAMS", HER_STREAM, ">"],
            lambda r: r[0][1][0][0] == first_id,
        ),
        (
            "XAUTOCLAIM on her stream",
            ["XAUTOCLAIM", HER_STREAM, "g", "c2", "0", "0-0"],
            lambda r: r[1][0][0] == first_id,
        ),
        ("XACK on her stream", ["XACK", HER_STREAM, "g", first_id.decode()], lambda r: r == 1),
        (
            "SUBSCRIBE her channel",
            ["SUBSCRIBE", K.user_channel("alice")],
            lambda r: r[0] == b"subscribe",
        ),
        (
            "SSUBSCRIBE her channel",
            ["SSUBSCRIBE", K.user_channel("alice")],
            lambda r: r[0] == b"ssubscribe",
        ),
        (
            "SUBSCRIBE the nodes channel",
            ["SUBSCRIBE", K.nodes_channel],
            lambda r: r[0] == b"subscribe",
        ),
    ]


def table(rows: list[tuple[str, str, str, str]]) -> str:
    head = ("operation", "command", "expected", "got")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    line = "+".join("-" * (w + 2) for w in widths)
    out = [line, " | ".join(h.ljust(w) for h, w in zip(head, widths)), line]
    out += [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([*out, line])


def short(args: list[str], width: int = 44) -> str:
    text = " ".join(args)
    return text if len(text) <= width else text[: width - 3] + "..."


def test_alice_permission_matrix(acl_server, writer, capsys, record_property):
    set_up_users(acl_server, ["alice", "bob"])
    writer.job("1.pbs", "alice")
    writer.job("2.pbs", "bob")
    writer.node("n1")
    writer.queue("workq")
    admin = acl_server.client()
    admin.xgroup_create(K.user_events("bob"), "g", id="0")
    admin.rpush(RQ_QUEUE, "x")
    first_id = admin.xrange(HER_STREAM)[0][0]
    rows: list[tuple[str, str, str, str]] = []
    failures: list[str] = []

    # each operation on a connection of its own: a SUBSCRIBE that works changes the
    # connection's mode, and SHUTDOWN (last) must find nothing else to do
    for label, args in FORBIDDEN:
        conn = raw(acl_server, "alice", "pw-alice")
        outcome = run(conn, *args)
        conn.disconnect()
        got = f"{outcome[0]}: {str(outcome[1])[:56]}"
        rows.append((label, short(args), "NOPERM", got))
        if not refused(outcome):
            failures.append(f"{label}: {got}")
    conn = raw(acl_server, "alice", "pw-alice")
    for label, args, check in allowed(first_id):
        kind, reply = run(conn, *args)
        ok = kind == "ok" and check(reply)
        rows.append((label, short(args), "works", "works" if ok else f"{kind}: {reply!r}"[:70]))
        if not ok:
            failures.append(f"{label}: {kind} {reply!r}")
        if args[0].endswith("SUBSCRIBE"):
            conn.disconnect()
            conn = raw(acl_server, "alice", "pw-alice")
    conn.disconnect()
    # and what she subscribed to is delivered
    sub = raw(acl_server, "alice", "pw-alice", timeout=5)
    run(sub, "SUBSCRIBE", K.user_channel("alice"))
    writer.job("1.pbs", "alice", state="running")
    message = sub.read_response()
    sub.disconnect()
    delivered = message[0] == b"message" and orjson.loads(message[2])["object_id"] == "1.pbs"
    rows.append(
        (
            "receive her job's event",
            "(message on her channel)",
            "works",
            "works" if delivered else repr(message)[:70],
        )
    )
    if not delivered:
        failures.append(f"no event on her channel: {message!r}")

    text = table(rows)
    record_property("acl_matrix", text)
    with capsys.disabled():
        print(
            f"\n\nACL matrix for cluster user alice ({len(FORBIDDEN)} refused, "
            f"{len(rows) - len(FORBIDDEN)} allowed)\n{text}\n"
        )
    assert not failures, "\n".join(failures)
    assert acl_server.client().ping()  # SHUTDOWN was refused: the server is still there
