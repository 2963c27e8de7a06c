"""The permission matrix of a cluster user (alice): what she must be refused
(NOPERM) and what the SDK needs to work, run against one Redis server, a plain
one or one node of a cluster (tests/acl/test_matrix.py, tests/cluster/test_acl.py).

On a cluster node the ACL check comes before the slot check, so every refusal
holds on every node.  On a replica the reads and SSUBSCRIBE work after READONLY
(what a client sent to a replica sends first); writes, consumer groups
included, belong to the primary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobtap.keys import SiteKeys
from tests.support.acl import K, raw, refused, run

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


WRITES = {"XGROUP", "XREADGROUP", "XACK", "XAUTOCLAIM"}  # the primary's, never a replica's

Row = tuple[str, str, str, str]


def check_node(
    node, first_id: bytes, *, replica: bool = False, refusals_only: bool = False
) -> tuple[list[Row], list[str]]:
    """Run the matrix as alice (password ``pw-alice``) on the server ``node``
    (anything with a ``port``); return the table's rows and the failures.

    ``replica``: the node is a replica of the site's shard (READONLY first, no
    writes); ``refusals_only``: the node serves other slots, where what she may
    do is answered with a redirection, so only the refusals are checked."""
    rows: list[Row] = []
    failures: list[str] = []

    def connect():
        conn = raw(node, "alice", "pw-alice")
        if replica:
            assert run(conn, "READONLY") == ("ok", b"OK"), "READONLY refused"
        return conn

    # each operation on a connection of its own: a SUBSCRIBE that works changes the
    # connection's mode, and SHUTDOWN (last) must find nothing else to do
    for label, args in FORBIDDEN:
        conn = connect()
        outcome = run(conn, *args)
        conn.disconnect()
        got = f"{outcome[0]}: {str(outcome[1])[:56]}"
        rows.append((label, short(args), "NOPERM", got))
        if not refused(outcome):
            failures.append(f"{label}: {got}")
    if refusals_only:
        return rows, failures
    conn = connect()
    for label, args, check in allowed(first_id):
        if replica and args[0] in WRITES:
            continue
        kind, reply = run(conn, *args)
        ok = kind == "ok" and check(reply)
        rows.append((label, short(args), "works", "works" if ok else f"{kind}: {reply!r}"[:70]))
        if not ok:
            failures.append(f"{label}: {kind} {reply!r}")
        if args[0].endswith("SUBSCRIBE"):
            conn.disconnect()
            conn = connect()
    conn.disconnect()
    return rows, failures
