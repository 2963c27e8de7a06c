"""Cache reads instead of qstat: job(), jobs(), nodes(), queues(); several sites;
a user whose Redis ACL only lets them see their own jobs."""

from __future__ import annotations

import pytest

import jobtap
from tests.support.ids import eid
from tests.support.sdk import SITE, K, Recorder, Writer


def test_job_and_unknown_job(client, writer):
    writer.job("1.pbs", user="alice", state="running", start_time="2026-11-21T14:41:00+00:00")
    job = client.job("1.pbs")
    assert isinstance(job, jobtap.Job)
    assert (job.id, job.user, job.state, job.version, job.final) == (
        "1.pbs",
        "alice",
        "running",
        1,
        False,
    )
    assert job.start_time.isoformat() == "2026-11-21T14:41:00+00:00"
    assert job.native["Job_Owner"] == "alice@vm" and job.requested == {"ncpus": 1}
    assert client.job("404.pbs") is None
    assert client.job("1.pbs", user="bob") is None  # not bob's


def test_native_on_request_and_in_records_read_from_the_cache(client, writer, r):
    """Events leave the native record out; the cache's hashes keep it: in the
    records read from them, and alone with native()."""
    writer.job("1.pbs", user="alice", native={"job_state": "Q", "Job_Owner": "alice@vm", "x": 1})
    want = {"job_state": "Q", "Job_Owner": "alice@vm", "x": 1}
    assert client.native("1.pbs") == want == client.job("1.pbs").native
    assert client.native("1.pbs", user="alice") == want
    assert [j.native for j in client.jobs(user="alice")] == [want]
    assert client.jobs_by_id(["1.pbs"], user="alice")["1.pbs"].native == want
    assert client.native("1.pbs", user="bob") is None  # not bob's
    assert client.native("404.pbs") is None
    writer.node("n1")
    assert client.node("n1").native == {"state": "free"}


def test_jobs_by_user_and_state_like_qstat(client, writer):
    writer.job("10.pbs", user="alice")
    writer.job("9.pbs", user="alice", state="running")
    writer.job("2.pbs", user="bob", state="running")
    writer.job("3.pbs", user="bob")
    writer.finish("3.pbs")
    assert [j.id for j in client.jobs()] == ["2.pbs", "9.pbs", "10.pbs"]  # live, natural order
    assert [j.id for j in client.jobs(user="alice")] == ["9.pbs", "10.pbs"]
    assert [j.id for j in client.jobs(state="running")] == ["2.pbs", "9.pbs"]
    assert [j.id for j in client.jobs(user="bob", state=["queued", "running"])] == ["2.pbs"]
    # finished jobs are kept for the retention period: asked for by state or finished=True
    assert [j.id for j in client.jobs(state="completed")] == ["3.pbs"]
    assert [j.id for j in client.jobs(user="bob", finished=True)] == ["2.pbs", "3.pbs"]
    assert client.jobs(user="nobody") == []


def test_nodes_and_queues(client, writer, r):
    writer.node("n2", state="down")
    writer.node("n10")
    writer.node("n1")
    nodes = client.nodes()
    assert [n.id for n in nodes] == ["n1", "n2", "n10"] and isinstance(nodes[0], jobtap.Node)
    assert [n.id for n in client.nodes(state="down")] == ["n2"]
    assert client.node("n2").resources == {"ncpus": 8}
    assert client.node("nope") is None
    queue = {
        "id": "workq", "site": SITE, "scheduler": "pbs", "state": "enabled",
        "native_state": "True", "counts": {"queued": 3}, "resources": {}, "native": {},
    }  # fmt: skip
    writer._apply(
        "queue", [{"op": "upsert", "id": "workq", "fp": "f", "state": "x", "record": queue}]
    )
    assert [(q.id, q.counts) for q in client.queues()] == [("workq", {"queued": 3})]
    assert isinstance(client.queue("workq"), jobtap.Queue)


def test_several_sites_in_one_client(redis_server, hermetic, tmp_path):
    from jobtap.sim.localredis import RedisServer

    (tmp_path / "other").mkdir()
    other = RedisServer(tmp_path / "other").start()
    try:
        Writer(redis_server.client(), site="a").job("1.pbs", user="alice")
        wb = Writer(other.client(), site="b")
        wb.job("2.pbs", user="alice")
        with jobtap.Client(sites={"a": redis_server.url, "b": {"url": other.url}}) as c:
            assert c.sites == ["a", "b"] and c.site == "a"
            assert c.job("2.pbs").site == "b"  # looked up in every site
            assert [j.site for j in c.jobs(user="alice")] == ["a", "b"]
            assert c.jobs(user="alice", site="b")[0].id == "2.pbs"
            rec = Recorder()
            c.subscribe(rec, user="alice")  # both sites, two Redis servers, one thread
            assert sorted(ch.site for ch in rec.changes) == ["a", "b"]
            wb.job("2.pbs", state="running")
            rec.wait_count(3)
            assert (rec.changes[-1].site, rec.changes[-1].type) == ("b", "state")
            with pytest.raises(jobtap.ConfigError):
                c.jobs(site="c")
    finally:
        other.stop()


def acl_user(r, user: str, password: str) -> None:
    """A cluster user's Redis user, as the design's ACLs describe (and as `jobtap
    acl` grants): a few read commands on their own keys and the node/queue keys,
    their own channel and the nodes channel, nothing else."""
    base = f"jobtap:{{{SITE}}}"
    commands = ["ping", "select", "exists", "hget", "hmget", "hgetall", "smembers", "xrange",
                "xrevrange", "xread", "xinfo|stream", "zrange", "subscribe",
                "unsubscribe"]  # fmt: skip
    r.execute_command(
        "ACL", "SETUSER", user, "on", f">{password}", "resetkeys", "resetchannels", "-@all",
        *(f"+{c}" for c in commands),
        f"%R~{base}:u:{user}:*", f"%R~{base}:node:*", f"%R~{base}:queue:*",
        f"%R~{base}:nodes", f"%R~{base}:queues",
        f"&{base}:u:{user}", f"&{base}:nodes",
    )  # fmt: skip


def test_a_restricted_user_reads_and_watches_their_own_jobs(redis_server, hermetic, r, tmp_path):
    w = Writer(r)
    w.job("1.pbs", user="alice")
    w.job("2.pbs", user="bob")
    w.node("n1")
    acl_user(r, "alice", "s3cret")
    cred = tmp_path / "credentials"
    cred.write_text(
        f"url = {redis_server.url}\nusername = alice\npassword = s3cret\nsite = {SITE}\n"
    )
    cred.chmod(0o600)
    with jobtap.Client(credentials=cred) as c:
        assert c.user == "alice" and c.site == SITE
        assert c.job("1.pbs").user == "alice"  # the owner index is closed: own key tried
        assert c.job("2.pbs") is None
        assert [j.id for j in c.jobs(user="alice")] == ["1.pbs"]
        assert c.jobs(user="alice", state="completed") == []
        with pytest.raises(jobtap.PermissionDenied, match="pass user="):
            c.jobs()
        assert [n.id for n in c.nodes()] == ["n1"]
        mine = list(c.stream(user="alice", since="0", idle_timeout=0.2))
        assert mine[0].id == eid(r, SITE, "1.pbs", 1)
        rec = Recorder()
        c.subscribe(rec)  # default: the client's own jobs
        w.job("1.pbs", state="running")
        w.job("2.pbs", state="running")
        rec.wait_count(2)
        assert [(ch.type, ch.object_id) for ch in rec.changes] == [
            ("initial", "1.pbs"),
            ("state", "1.pbs"),
        ]
        with pytest.raises(jobtap.PermissionDenied, match="channel jobtap:{t1}:all"):
            c.subscribe(print, all_jobs=True)
        nodes = Recorder()
        c.subscribe(nodes, kinds=["node"])
        w.node("n1", state="down")
        nodes.wait_count(2)
        w.finish("1.pbs")
        assert c.wait("1.pbs", timeout=5).state == "completed"
        # finished jobs: found through the final events of the user's own stream
        assert [j.id for j in c.jobs(user="alice", finished=True)] == ["1.pbs"]
        assert [j.id for j in c.jobs(user="alice", state="completed")] == ["1.pbs"]
        # a finished job's native record, kept packed, reads as a live one's
        assert r.hget(K.job("alice", "1.pbs"), "native") == b""
        ended = {"job_state": "C", "Job_Owner": "alice@vm"}
        assert c.native("1.pbs") == ended == c.job("1.pbs").native


def test_wrong_password(redis_server, hermetic, r):
    acl_user(r, "alice", "s3cret")
    with jobtap.Client(redis_server.url, site=SITE, username="alice", password="nope") as c:
        with pytest.raises(jobtap.AuthenticationFailed):
            c.job("1.pbs")
