"""The permission matrix of a cluster user (alice) on a real redis-server with
ACLs: every operation she must not do is refused with NOPERM, every operation the
SDK needs works.  The matrix is printed as a table in the test report (and
recorded as the ``acl_matrix`` property for the JUnit XML)."""

from __future__ import annotations

import orjson

from tests.support.acl import K, raw, run, set_up_users
from tests.support.acl_matrix import FORBIDDEN, HER_STREAM, RQ_QUEUE, check_node, table


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
    rows, failures = check_node(acl_server, first_id)
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
