"""``jobtap acl`` on a Redis Cluster whose every node has its own ACL file (the
default user off): sync, grant and revoke reach every node, primaries and
replicas; a node that is down is named and caught up by the next sync; and the
permission matrix of a cluster user holds on every node, including a replica
that serves her sharded subscription."""

from __future__ import annotations

import orjson
import pytest
from redis.cluster import RedisCluster

from jobtap.acl import rules as acl
from jobtap.acl.nodes import acl_nodes
from sim.rig.cluster import LocalCluster, flush
from tests.support.acl import ADMIN_PW, WRITER_PW, K, cli, raw, run, set_up_users
from tests.support.acl_matrix import FORBIDDEN, HER_STREAM, check_node, table

AUTH = ("admin", ADMIN_PW)


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("acl-cluster"), auth=AUTH).start()
    yield c
    c.stop()


@pytest.fixture
def cluster(acl_cluster):
    """The module's cluster with no data and no user but admin, on every node."""
    acl_cluster.wait_healthy()
    flush(acl_cluster)
    for node in acl_cluster.live():
        with node.client(decode_responses=True) as c:
            for name in c.execute_command("ACL", "USERS"):
                if name not in ("admin", "default"):
                    c.execute_command("ACL", "DELUSER", name)
            c.execute_command("ACL", "SAVE")
    return acl_cluster


def jobtap_lines(node) -> list[tuple[str, ...]]:
    """The node's ACL lines of every user but admin and default, each as its
    sorted words (a node lists a user's commands in an order of its own)."""
    with node.client(decode_responses=True) as c:
        lines = c.execute_command("ACL", "LIST")
    words = [ln.replace("(", " ( ").replace(")", " ) ").split() for ln in lines]
    return sorted((w[1], *sorted(w[2:])) for w in words if w[1] not in ("admin", "default"))


def logs_in(node, user: str, password: str) -> bool:
    try:
        conn = raw(node, user, password)
    except Exception:
        return False
    conn.disconnect()
    return True


def test_every_node_is_found_primaries_and_replicas(cluster):
    with cluster.nodes[0].client(decode_responses=True) as r:
        nodes = acl_nodes(r)
    assert sorted(n.address for n in nodes) == sorted(n.address for n in cluster.nodes)
    assert sorted(n.role for n in nodes) == ["primary"] * 3 + ["replica"] * 3
    assert nodes[0].address == cluster.nodes[0].address  # the URL's node first


def test_sync_grant_and_revoke_reach_every_node(cluster, tmp_path):
    replica = next(n for n in cluster.nodes if not n.is_primary())
    url = cluster.url_of(replica)  # any node's URL will do, a replica's too
    users = tmp_path / "users"
    users.write_text("alice\nbob\n")
    secrets = tmp_path / "secrets"
    result = cli("sync", "--redis", url, "--site", "hpc1", "--users-file", str(users),
                 "--secrets-dir", str(secrets))  # fmt: skip
    assert result.exit_code == 0, result.output
    result = cli("grant", "alice", "--redis", url, "--site", "hpc1", "-o", str(tmp_path / "cred"))
    assert result.exit_code == 0, result.output
    password = (tmp_path / "cred").read_text().split('password = "')[1].split('"')[0]
    writer_pw = (secrets / "writer.password").read_text().strip()

    reference = jobtap_lines(cluster.nodes[0])
    assert {ln[0] for ln in reference} == {"alice", "bob", *acl.SERVICE_USERS}
    for node in cluster.nodes:
        assert jobtap_lines(node) == reference, node.address  # same rules, same hashes
        assert logs_in(node, "alice", password) and logs_in(node, "writer", writer_pw)
        assert not logs_in(node, "bob", "anything")  # created off until granted
        assert node.aclfile.read_text().count("user alice ") == 1  # ACL SAVE on each

    # a subscriber on a replica is cut off by the revoke like anyone else
    sub = raw(replica, "alice", password, timeout=5)
    assert run(sub, "SUBSCRIBE", K.user_channel("alice"))[0] == "ok"
    result = cli("revoke", "alice", "--redis", url, "--site", "hpc1")
    assert result.exit_code == 0, result.output
    for node in cluster.nodes:
        assert "alice" not in {ln[0] for ln in jobtap_lines(node)}, node.address
        assert not logs_in(node, "alice", password)
    with pytest.raises(Exception):  # noqa: B017 - Redis closed it: a reset or an EOF
        sub.read_response()
    sub.disconnect()


def test_a_node_that_is_down_is_named_then_caught_up_by_sync(cluster, tmp_path):
    url = cluster.url_of(cluster.nodes[0])
    set_up_users(cluster.nodes[0], [])
    down = next(n for n in cluster.nodes[1:] if not n.is_primary())
    cluster.kill(down)

    result = cli("grant", "carol", "--redis", url, "--site", "hpc1", "-o", str(tmp_path / "c"))
    assert result.exit_code == 1
    assert f"Redis node {down.address} did not take the change" in result.output
    assert "1 of 6 Redis nodes did not take the change" in result.output
    assert (tmp_path / "c").exists()  # the live nodes have the new password: so does the file
    password = (tmp_path / "c").read_text().split('password = "')[1].split('"')[0]
    for node in cluster.live():
        assert logs_in(node, "carol", password), node.address

    down.start()  # comes back with its own ACL file, which has never heard of carol
    cluster.wait_healthy()
    assert not logs_in(down, "carol", password)
    users = tmp_path / "users"
    users.write_text("carol\n")
    result = cli("sync", "--redis", url, "--site", "hpc1", "--users-file", str(users))
    assert result.exit_code == 0, result.output
    assert logs_in(down, "carol", password)  # her hash was copied from the other nodes
    assert jobtap_lines(down) == jobtap_lines(cluster.nodes[0])


def seed(cluster: LocalCluster) -> bytes:
    """alice's and bob's jobs, a node and a queue of hpc1, written as admin;
    returns the id of alice's one stream entry."""
    rc = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, username=AUTH[0],
                      password=AUTH[1])  # fmt: skip
    try:
        for user, jid in (("alice", "1.pbs"), ("bob", "2.pbs")):
            rc.hset(K.job(user, jid), mapping={"id": jid, "user": user, "state": "queued"})
            rc.sadd(K.user_jobs(user), jid)
            event = {"id": f"hpc1:{jid}:1", "object_id": jid, "version": 1}
            rc.xadd(K.user_events(user), {"id": event["id"], "type": "new",
                                          "event": orjson.dumps(event)})  # fmt: skip
        rc.xgroup_create(K.user_events("bob"), "g", id="0")
        rc.hset(K.node("n1"), mapping={"id": "n1", "state": "free"})
        rc.sadd(K.node_index, "n1")
        rc.hset(K.queue("workq"), mapping={"id": "workq", "state": "enabled"})
        rc.sadd(K.queue_index, "workq")
        return rc.xrange(HER_STREAM)[0][0]
    finally:
        rc.close()


def test_alice_permission_matrix_on_every_node(cluster, capsys):
    set_up_users(cluster.nodes[0], ["alice", "bob"])
    first_id = seed(cluster)
    primary = cluster.primary_of("hpc1")
    replica = cluster.replicas_of(primary)[0]
    failures: list[str] = []
    counts = {}
    for node in cluster.nodes:
        role = "primary" if node is primary else "replica" if node is replica else "other shard"
        rows, failed = check_node(
            node, first_id, replica=node is replica, refusals_only=role == "other shard"
        )
        counts[f"{node.address} ({role})"] = len(rows)
        failures += [f"{node.address} ({role}): {f}" for f in failed]
        if node is replica:
            replica_rows = rows

    # her sharded subscription on the replica gets what the writer SPUBLISHes on the primary
    sub = raw(replica, "alice", "pw-alice", timeout=5)
    assert run(sub, "READONLY") == ("ok", b"OK")
    assert run(sub, "SSUBSCRIBE", K.user_channel("alice"))[0] == "ok"
    pub = raw(primary, acl.WRITER, WRITER_PW)
    assert run(pub, "SPUBLISH", K.user_channel("alice"), b'{"id": "hpc1:1.pbs:2"}')[0] == "ok"
    pub.disconnect()
    message = sub.read_response()
    sub.disconnect()
    if message[:2] != [b"smessage", K.user_channel("alice").encode()]:
        failures.append(f"{replica.address}: no sharded message on her channel: {message!r}")

    with capsys.disabled():
        print(f"\n\nACL matrix on the replica serving hpc1 {replica.address}\n"
              f"{table(replica_rows)}\nrows per node: {counts}\n")  # fmt: skip
    assert not failures, "\n".join(failures)
    assert all(n >= len(FORBIDDEN) for n in counts.values())
