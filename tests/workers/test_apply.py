"""The apply step against a real redis-server: versions, events, ordering, retries."""

from __future__ import annotations

import logging
import threading

import orjson
import pytest

from jobtap.collector.backends.slurm import normalise_job, parse_squeue
from jobtap.contract.chunk import Chunk
from jobtap.entries import xrange_events
from jobtap.events import ENVELOPE, changes_of, record_of
from jobtap.keys import SiteKeys
from jobtap.packing import (
    NATIVE_FIELDS,
    PACKED_NATIVE,
    PRIMED_NATIVE,
    native_read,
    pack_zlib,
    unpack_native,
)
from jobtap.schema import JOB_FIELDS, decode_value, from_hash
from jobtap.workers.apply import Applier, Settings
from sim.rig.paths import fixtures_dir
from sim.rig.records import job_record, node_record
from sim.rig.wait import eventually
from tests.support.ids import eid

SITE = "t1"
K = SiteKeys(SITE)


def job(jid="1.pbs", user="alice", state="queued", **extra):
    return job_record(jid, user, state, SITE, **extra)


def chunk(cycle, items, kind="job"):
    return Chunk(SITE, cycle, f"2026-11-21T15:00:{cycle:02d}+00:00", kind, items)


def up(rec, fp="fp"):
    return {"op": "upsert", "id": rec["id"], "fp": fp, "state": rec["state"], "record": rec}


def events(r, key=K.events):
    return [orjson.loads(f[b"event"]) for _, f in xrange_events(r, key)]


def test_new_update_state_final_versions_and_keys(r):
    a = Applier(r)
    a.apply(chunk(1, [up(job())]))
    a.apply(chunk(2, [up(job(comment="hello"))]))
    a.apply(chunk(3, [up(job(state="running", comment="hello"))]))
    a.apply(chunk(4, [up(job(state="completed", exit_status=0, comment="hello"))]))
    evs = events(r)
    assert [e["type"] for e in evs] == ["new", "update", "state", "final"]
    assert [e["version"] for e in evs] == [1, 2, 3, 4]
    epoch = r.hget(K.meta, "epoch").decode()
    assert [e["id"] for e in evs] == [f"{SITE}:{epoch}:1.pbs:{v}" for v in (1, 2, 3, 4)]
    assert {e["epoch"] for e in evs} == {epoch}
    assert evs[1]["was"] == {"comment": None} and evs[1]["record"]["comment"] == "hello"
    assert changes_of(evs[1]) == {"comment": [None, "hello"]}
    assert evs[2]["was"]["state"] == "queued" and evs[2]["record"]["state"] == "running"
    assert evs[2]["native_changed"] == ["job_state"]  # named; its values are in the hash
    assert evs[3]["record"]["exit_status"] == 0
    # the user's stream holds the same events; the hash holds the last record
    assert [e["id"] for e in events(r, K.user_events("alice"))] == [e["id"] for e in evs]
    stored = from_hash(r.hgetall(K.job("alice", "1.pbs")))
    assert stored["state"] == "completed" and stored["version"] == 4 and stored["final"] == 1
    assert r.hget(K.owner, "1.pbs") == b"alice"
    assert not r.sismember(K.user_jobs("alice"), "1.pbs")
    assert 0 < r.ttl(K.job("alice", "1.pbs")) <= 2 * 86400


FORMAT_1_KEYS = ["id", "site", "epoch", "kind", "type", "object_id", "user", "version",
                 "observed_at", "changes", "record"]  # fmt: skip
FORMAT_2_KEYS = ["id", "site", "epoch", "kind", "type", "object_id", "user", "version",
                 "observed_at", "event_version", "was", "record"]  # fmt: skip


def test_events_hold_each_byte_once(r):
    """Format 2, the default: the record without native (the whole native record
    stays in the hash), without the envelope's fields and without the fields
    that have no value; was holds the changed attributes' values before (their
    new values are the record's); the native keys that changed named in
    native_changed (not in a new event, where every key is new)."""
    a = Applier(r)
    a.apply(chunk(1, [up(job())]))
    a.apply(chunk(2, [up(job(state="running", native={"job_state": "R", "Job_Owner": "x@vm"}))]))
    for key in (K.events, K.user_events("alice")):
        evs = events(r, key)
        assert [e["event_version"] for e in evs] == [2, 2]
        assert list(evs[0]) == FORMAT_2_KEYS
        assert list(evs[1]) == [*FORMAT_2_KEYS, "native_changed"]
        for e in evs:
            assert not set(e["record"]) & {"native", *ENVELOPE}
            assert None not in e["record"].values()
            assert not any(k == "native" or k.startswith("native.") for k in e["was"])
        assert evs[0]["was"] == {}
        assert evs[1]["was"] == {"state": "queued", "native_state": "Q"}
        assert changes_of(evs[1]) == {"state": ["queued", "running"], "native_state": ["Q", "R"]}
        assert evs[1]["native_changed"] == ["Job_Owner", "job_state"]
        whole = record_of(evs[1])
        assert (whole["state"], whole["version"], whole["user"]) == ("running", 2, "alice")
        assert whole["end_time"] is None and "native" not in whole
    stored = from_hash(r.hgetall(K.job("alice", "1.pbs")))
    assert stored["native"] == {"job_state": "R", "Job_Owner": "x@vm"}


def test_event_version_1_writes_the_events_of_before(r):
    """For sites whose consumers still read native from events: the whole
    record, and no event_version key, byte for byte the event of before."""
    a = Applier(r, Settings(event_version=1))
    a.apply(chunk(1, [up(job())]))
    a.apply(chunk(2, [up(job(state="running"))]))
    epoch = r.hget(K.meta, "epoch").decode()
    raw = [f[b"event"] for _, f in xrange_events(r, K.events)]
    assert [list(orjson.loads(e)) for e in raw] == [FORMAT_1_KEYS] * 2
    record = {**job(state="running"), "version": 2, "updated_at": "2026-11-21T15:00:02+00:00"}
    before = {
        "id": f"{SITE}:{epoch}:1.pbs:2", "site": SITE, "epoch": epoch, "kind": "job",
        "type": "state", "object_id": "1.pbs", "user": "alice", "version": 2,
        "observed_at": "2026-11-21T15:00:02+00:00",
        "changes": {"state": ["queued", "running"], "native_state": ["Q", "R"],
                    "native.job_state": ["Q", "R"]},
        "record": record,
    }  # fmt: skip
    assert raw[1] == orjson.dumps(before)
    assert [f[b"event"] for _, f in r.xrange(K.user_events("alice"))] == raw


def test_a_reader_gets_the_same_changes_from_either_format(r):
    """The same life written in format 1 (one site) and format 2 (another):
    record_of and changes_of read each format-2 event as the format-1 event of
    the same change less its native record, so the SDK's Change is the same
    for both; a value that goes away is absent from a format-2 record and null
    in the whole one."""
    life = [
        {"comment": ""},  # a new job's empty string: no change in either format
        {"comment": "hello", "account": "proj"},
        {"state": "running", "start_time": "2026-11-21T15:00:03+00:00", "allocated": ["n1"]},
        {"state": "running", "start_time": "2026-11-21T15:00:03+00:00", "allocated": ["n1"],
         "account": "proj", "resources_used": {"cput": "00:01:00"}},
        {"state": "completed", "exit_status": 0, "end_time": "2026-11-21T15:00:05+00:00"},
    ]  # fmt: skip
    written = {}
    for version in (1, 2):
        site = f"v{version}"
        a = Applier(r, Settings(event_version=version))
        for cycle, fields in enumerate(life, 1):
            rec = job_record("1.pbs", "alice", site=site, **{"state": "queued", **fields})
            a.apply(Chunk(site, cycle, f"2026-11-21T15:00:{cycle:02d}+00:00", "job", [up(rec)]))
        written[version] = events(r, SiteKeys(site).events)
    assert len(written[1]) == len(written[2]) == len(life)
    for one, two in zip(written[1], written[2], strict=True):
        assert one["type"] == two["type"]
        whole = {k: v for k, v in one["record"].items() if k != "native"}
        assert record_of(two) == {**whole, "site": "v2"}
        native = {k: v for k, v in one["changes"].items() if k.startswith("native.")}
        expected = {k: v for k, v in one["changes"].items() if k not in native}
        if "site" in expected:  # a new event's: each site's own name
            expected["site"] = [None, "v2"]
        assert changes_of(two) == expected
        assert two.get("native_changed", []) == (
            [] if one["type"] == "new" else sorted(k[len("native.") :] for k in native)
        )
    assert "account" not in written[2][2]["record"] and written[2][2]["was"]["account"] == "proj"
    assert changes_of(written[2][2])["account"] == ["proj", None]


def test_nodes_events_leave_native_out_too(r):
    Applier(r).apply(chunk(1, [up(node_record("n1", site=SITE))], kind="node"))
    (event,) = events(r)
    assert event["event_version"] == 2 and "native" not in event["record"]
    assert from_hash(r.hgetall(K.node("n1")))["native"] == {"state": "free"}


def test_a_finished_job_keeps_its_native_record_packed(r):
    """The final write packs the native record (native_zd: zlib primed with
    native dictionary 1 and the hash's own fields, then base64, text like every
    value) and empties ``native``; a live job's stays plain JSON, which the next
    diff reads; the contract's readers (the whole hash, or HMGET of
    NATIVE_FIELDS) give the record of before; a reader older than native_zd
    finds no native record, not bytes it cannot parse; a job first seen ended is
    packed in its one write."""
    native = {"job_state": "F", "Exit_status": "0", "Variable_List": "PATH=/usr/bin," * 40}
    a = Applier(r)
    a.apply(chunk(1, [up(job(state="running", native={"job_state": "R"}))]))
    key = K.job("alice", "1.pbs")
    assert orjson.loads(r.hget(key, "native")) == {"job_state": "R"}
    a.apply(chunk(2, [up(job(state="completed", exit_status=0, native=native))]))
    raw = r.hgetall(key)
    packed = raw[PRIMED_NATIVE.encode()]
    assert raw[b"native"] == b"" and decode_value("native", raw[b"native"]) is None
    assert PACKED_NATIVE.encode() not in raw
    assert packed.isascii() and packed.startswith(b"1:")
    assert len(packed) < len(orjson.dumps(native)) / 2
    assert unpack_native(packed, raw) == native == from_hash(raw)["native"]
    assert native_read(r.hmget(key, NATIVE_FIELDS)) == native
    (final,) = [e for e in events(r) if e["type"] == "final"]
    assert "Exit_status" in final["native_changed"]  # named as before packing
    a.apply(chunk(3, [up(job("2.pbs", state="failed", exit_status=1, native=native))]))
    assert from_hash(r.hgetall(K.job("alice", "2.pbs")))["native"] == native
    assert r.hget(K.job("alice", "2.pbs"), "native") == b""


SLURM_RELEASES = sorted(
    p.name for p in (fixtures_dir() / "slurm").iterdir() if p.is_dir() and p.name[:2].isdigit()
)


@pytest.mark.parametrize("release", SLURM_RELEASES)
def test_every_captured_slurm_record_comes_back_from_its_packed_form(r, release):
    """Real records, the largest a site writes (squeue --json of every release,
    2-7 KB, most of them from releases native dictionary 1 was not made from):
    each ended job's hash holds a packed native record under 0.3 of the plain
    one, and the contract's reader gives the record back key for key."""
    natives: dict = {}
    for path in sorted((fixtures_dir() / "slurm" / release).glob("squeue-[0-9]*.json")):
        natives.update(parse_squeue(path.read_bytes()))
    assert natives, release
    items = []
    for jid, native in natives.items():
        rec = {**normalise_job(jid, native), "site": SITE, "state": "completed"}
        items.append(up(rec))
    Applier(r).apply(chunk(1, items))
    for it in items:
        raw = r.hgetall(K.job(it["record"]["user"], it["id"]))
        plain = orjson.dumps(it["record"]["native"])
        assert raw[b"native"] == b"" and len(raw[PRIMED_NATIVE.encode()]) < len(plain) * 0.3
        assert from_hash(raw)["native"] == it["record"]["native"], it["id"]


def test_a_worker_told_so_keeps_a_finished_jobs_native_record_plain(r):
    """``--plain-finished-native``, for sites with readers older than native_z."""
    a = Applier(r, Settings(pack_finished_native=False))
    a.apply(chunk(1, [up(job(state="completed", exit_status=0))]))
    raw = r.hgetall(K.job("alice", "1.pbs"))
    assert PACKED_NATIVE.encode() not in raw and PRIMED_NATIVE.encode() not in raw
    assert orjson.loads(raw[b"native"]) == job(state="completed")["native"]


def test_a_hash_packed_before_native_dictionaries_still_reads(r):
    """A site's finished hashes written before native_zd hold native_z (zlib
    alone) for the retention after the upgrade: both readers still read them."""
    native = {"job_state": "F", "Exit_status": 0}
    Applier(r, Settings(pack_finished_native=False)).apply(
        chunk(1, [up(job(state="completed", exit_status=0, native=native))])
    )
    key = K.job("alice", "1.pbs")
    r.hset(key, mapping={"native": "", PACKED_NATIVE: pack_zlib(orjson.dumps(native).decode())})
    assert from_hash(r.hgetall(key))["native"] == native
    assert native_read(r.hmget(key, NATIVE_FIELDS)) == native


def test_a_packed_native_record_is_read_with_the_fields_it_was_packed_with(r):
    """The dictionary ends with the hash's own fields, which a finished job
    never changes again: the same hash reads back; one of them edited by hand
    makes the record unreadable, said in one line, not another record."""
    Applier(r).apply(chunk(1, [up(job(state="completed", exit_status=0))]))
    key = K.job("alice", "1.pbs")
    assert from_hash(r.hgetall(key))["native"] == job(state="completed")["native"]
    # its user's name, which the native record repeats (Job_Owner alice@vm): a
    # name of another length, and one of the same length, that deflate would
    # otherwise copy into the record as it is
    for edit in ("alice2", "ecila"):
        r.hset(key, "user", edit)
        with pytest.raises(ValueError, match=r"^native_zd is not a packed native record: "):
            from_hash(r.hgetall(key))


def test_a_packed_native_record_that_is_not_one_is_a_clear_error(r):
    a = Applier(r)
    a.apply(chunk(1, [up(job(state="completed", exit_status=0))]))
    key = K.job("alice", "1.pbs")
    for bad in (b"1:not base64!", b"1:bm90IHpsaWI=", b"bm90IHpsaWI="):  # no dictionary named
        r.hset(key, PRIMED_NATIVE, bad)
        with pytest.raises(ValueError, match=r"^native_zd is not a packed native record: "):
            from_hash(r.hgetall(key))
    r.hset(key, PRIMED_NATIVE, b"9:bm90IHpsaWI=")  # from a jobtap that knows dictionary 9
    with pytest.raises(ValueError, match=r"^no native dictionary '9' \(a newer jobtap"):
        from_hash(r.hgetall(key))
    r.hdel(key, PRIMED_NATIVE)
    for bad in (b"not base64!", b"bm90IHpsaWI="):  # not base64; base64 of "not zlib"
        r.hset(key, PACKED_NATIVE, bad)
        with pytest.raises(ValueError, match=r"^native_z is not a packed native record: "):
            from_hash(r.hgetall(key))


def test_an_unknown_event_version_is_refused():
    with pytest.raises(ValueError, match=r"event_version must be one of \(1, 2\), not 3"):
        Settings(event_version=3)


def test_same_record_again_changes_nothing(r):
    a = Applier(r)
    a.apply(chunk(1, [up(job())]))
    a.apply(chunk(2, [up(job())]))  # e.g. a restarted collector re-shipping
    assert [e["version"] for e in events(r)] == [1]
    assert r.hget(K.job("alice", "1.pbs"), "cycle") == b"2"


def test_older_or_repeated_cycle_is_ignored(r):
    a = Applier(r)
    c1, c2 = chunk(1, [up(job())]), chunk(2, [up(job(state="running"))])
    a.apply(c2)
    a.apply(c1)  # arrives late: must not step backwards
    a.apply(c2)  # retried: must not repeat
    evs = events(r)
    assert [(e["type"], e["version"]) for e in evs] == [("new", 1)]
    assert evs[0]["record"]["state"] == "running"


def test_nothing_after_final(r):
    a = Applier(r)
    a.apply(chunk(1, [up(job(state="completed", exit_status=0))]))
    a.apply(chunk(2, [up(job(state="running"))]))
    a.apply(chunk(3, [{"op": "vanished", "id": "1.pbs"}]))
    assert [e["type"] for e in events(r)] == ["new", "final"]  # first seen ended: both


def test_a_new_objects_fields_without_a_value_are_not_written(r):
    """A field that is absent reads as empty: a new job's hash leaves out its
    fields without a value; one that gains a value later is written, one that
    loses it again is kept empty; a vanished job's final, made from the hash,
    has every field (a format-1 event's record too)."""
    a = Applier(r, Settings(event_version=1, vanished_wait=0.1))
    a.apply(chunk(1, [up(job(account=None))]))
    key = K.job("alice", "1.pbs")
    stored = r.hgetall(key)
    assert not {b"account", b"comment", b"end_time", b"array_parent"} & stored.keys()
    assert {b"id", b"user", b"state", b"requested", b"native"} <= stored.keys()
    assert from_hash(stored).get("comment") is None
    a.apply(chunk(2, [up(job(account="proj"))]))
    assert r.hget(key, "account") == b"proj"
    a.apply(chunk(3, [up(job(account=None))]))
    assert r.hget(key, "account") == b""
    a.apply(chunk(4, [{"op": "vanished", "id": "1.pbs"}]))
    final = events(r)[-1]
    assert final["type"] == "final" and set(final["record"]) == set(JOB_FIELDS)
    assert final["record"]["comment"] is None and final["record"]["reason"] == "vanished"


def test_vanished_job_is_finalised_with_reason(r):
    a = Applier(r, Settings(vanished_wait=0.1))  # never.pbs is waited for that long
    a.apply(chunk(1, [up(job(state="running"))]))
    a.apply(chunk(2, [{"op": "vanished", "id": "1.pbs"}, {"op": "vanished", "id": "never.pbs"}]))
    evs = events(r)
    assert [e["type"] for e in evs] == ["new", "final"]
    assert evs[1]["record"]["reason"] == "vanished"
    assert evs[1]["was"]["reason"] is None


def test_a_vanished_job_waits_for_the_older_chunk_in_another_workers_hands(r, caplog):
    """Two workers of a pool: cycle 2 says the job vanished while the chunk of
    cycle 1, which creates it, is still being applied elsewhere."""
    done = threading.Event()

    def second_worker() -> None:
        Applier(r).apply(chunk(2, [{"op": "vanished", "id": "1.pbs"}]))
        done.set()

    with caplog.at_level(logging.INFO, logger="jobtap.workers"):
        thread = threading.Thread(target=second_worker)
        thread.start()
        eventually(lambda: "not stored yet" in caplog.text, what="the second worker waiting")
        Applier(r).apply(chunk(1, [up(job(state="running"))]))  # the first worker, late
        thread.join(10)
    assert done.is_set()
    assert [(e["type"], e["version"]) for e in events(r)] == [("new", 1), ("final", 2)]


def test_pubsub_on_user_and_all_channels(r):
    p = r.pubsub()
    p.subscribe(K.user_channel("alice"), K.all_channel, K.user_channel("bob"))
    for _ in range(3):
        p.get_message(timeout=1)
    Applier(r).apply(chunk(1, [up(job())]))
    got = []
    for _ in range(10):
        m = p.get_message(timeout=0.5)
        if m and m["type"] == "message":
            got.append((m["channel"].decode(), orjson.loads(m["data"])["id"]))
    first = eid(r, SITE, "1.pbs", 1)
    assert sorted(got) == sorted([(K.user_channel("alice"), first), (K.all_channel, first)])


def test_hostile_user_names_get_their_own_escaped_keys(r):
    a = Applier(r)
    names = ["*", "a*", "?", "[x]", "..", "alice:bob", "zoë", "x" * 200]
    a.apply(chunk(1, [up(job(jid=f"{i}.pbs", user=u)) for i, u in enumerate(names)]))
    for i, u in enumerate(names):
        key = K.job(u, f"{i}.pbs")
        assert r.hget(key, "user").decode() == u
        for ch in "*?[]\\:":
            assert ch not in key.split(":u:", 1)[1].rsplit(":job:", 1)[0]


def test_conflicting_writer_is_detected_and_retried(r):
    a = Applier(r)
    a.apply(chunk(1, [up(job())]))
    # A plan computed against version 1 ...
    c2 = chunk(2, [up(job(comment="x"))])
    dest = a.destinations.for_site(K)
    plan = a._plan(K, c2, a._read(dest, K, c2))
    # ... while another worker applies cycle 3 first.
    a.apply(chunk(3, [up(job(comment="y"))]))
    reply = a._run(dest, K, chunk(2, []), plan)
    assert reply[0] == b"conflict"
    # the real path re-reads and then skips the now-older cycle 2
    a.apply(chunk(2, [up(job(comment="x"))]))
    assert [e["version"] for e in events(r)] == [1, 2]


def test_a_newer_cycle_noted_meanwhile_is_a_conflict(r):
    """Another worker applied cycle 3 with the record unchanged: it wrote only
    the cycle, no version.  A plan of cycle 2 read before that must not write
    its older record over it: the script checks the cycle read, too."""
    a = Applier(r)
    a.apply(chunk(1, [up(job())]))
    c2 = chunk(2, [up(job(comment="x"))])
    dest = a.destinations.for_site(K)
    plan = a._plan(K, c2, a._read(dest, K, c2))
    a.apply(chunk(3, [up(job())]))  # same record: the cycle is noted, nothing else
    assert r.hget(K.job("alice", "1.pbs"), "version") == b"1"
    assert a._run(dest, K, chunk(2, []), plan)[0] == b"conflict"
    a.apply(c2)  # the real path re-reads, and cycle 2 is now older: skipped
    assert [e["version"] for e in events(r)] == [1]
    assert r.hget(K.job("alice", "1.pbs"), "comment") in (b"", None)
    assert r.hget(K.job("alice", "1.pbs"), "cycle") == b"3"


def test_nodes_new_update_and_removed(r):
    a = Applier(r)
    node = {
        "id": "n1",
        "site": SITE,
        "scheduler": "pbs",
        "state": "free",
        "native_state": "free",
        "reason": None,
        "jobs": [],
        "resources": {},
        "native": {"state": "free"},
    }
    a.apply(chunk(1, [up(node)], kind="node"))
    a.apply(chunk(2, [up(dict(node, state="down", native={"state": "down"}))], kind="node"))
    a.apply(chunk(3, [{"op": "remove", "id": "n1"}], kind="node"))
    evs = events(r)
    assert [(e["type"], e["id"]) for e in evs] == [
        ("new", eid(r, SITE, "n1", 1, "node")),
        ("state", eid(r, SITE, "n1", 2, "node")),
        ("removed", eid(r, SITE, "n1", 3, "node")),
    ]
    assert not r.exists(K.node("n1"))


@pytest.mark.parametrize("n", [1, 700])
def test_big_chunks_apply_in_one_step(r, n):
    Applier(r).apply(chunk(1, [up(job(jid=f"{i}.pbs")) for i in range(n)]))
    assert r.xlen(K.events) == n
    assert r.scard(K.user_jobs("alice")) == n


def test_the_rq_entry_point_named_by_the_contract_is_the_apply_step():
    from rq.utils import import_attribute

    from jobtap.contract.chunk import APPLY_FUNC
    from jobtap.workers.apply import apply_chunk

    assert import_attribute(APPLY_FUNC) is apply_chunk


def _sid(raw: bytes) -> tuple[int, int]:
    ms, _, seq = raw.decode().partition("-")
    return int(ms), int(seq)


def test_users_streams_keep_nothing_older_than_the_site_stream(r):
    """user_maxlen bounds each user's stream, and the site stream's oldest event
    bounds them all: together they hold no more than the site stream does,
    however many users a site has (each kept up to user_maxlen before)."""
    a = Applier(r, Settings(site_maxlen=40, user_maxlen=10_000))
    users = [f"u{i}" for i in range(8)]
    for cycle in range(1, 31):  # 240 jobs' events through a site stream of about 40
        a.apply(chunk(cycle, [up(job(jid=f"{cycle}.{u}", user=u)) for u in users]))
    site = r.xrange(K.events)
    assert len(site) < 240
    oldest = _sid(site[0][0])
    for u in users:
        kept = r.xrange(K.user_events(u))
        assert kept, u  # each user has events of the last cycles
        # MINID ~ trims whole stream nodes: what is left of a node may be older
        node = 100  # stream-node-max-entries: the most a node can hold
        assert sum(_sid(sid) < oldest for sid, _ in kept) < node
    held = sum(r.xlen(K.user_events(u)) for u in users)
    assert held < 240


def test_a_final_puts_the_job_in_its_users_finished_set_for_the_retention(r):
    a = Applier(r, Settings(retention=600))
    a.apply(chunk(1, [up(job()), up(job(jid="2.pbs"))]))
    a.apply(chunk(2, [up(job(state="completed", exit_status=0))]))
    finished = K.user_finished("alice")
    seconds, micros = r.time()
    ended = r.zscore(finished, "1.pbs")  # when it ended, by Redis' clock (ms), as stream ids
    assert ended == pytest.approx(seconds * 1000 + micros // 1000, abs=5000)
    assert ended <= int(r.xrange(K.user_events("alice"))[-1][0].split(b"-")[0])
    assert r.zrange(finished, 0, -1) == [b"1.pbs"]  # 2.pbs is live
    # the site's index of the users' finished sets, by when the oldest in each ended
    assert r.zrange(K.oldest_finished, 0, -1, withscores=True) == [(finished.encode(), ended)]
    a.apply(chunk(3, [up(job(jid="2.pbs", state="failed", exit_status=1))]))
    assert r.zrange(finished, 0, -1) == [b"1.pbs", b"2.pbs"]
    assert r.zscore(K.oldest_finished, finished) == ended  # still the oldest's


def _ended_long_ago(r, user: str, job_id: str, retention: int) -> None:
    """Move ``job_id``'s end in ``user``'s finished set (and the set's oldest, in
    oldest-finished) to more than ``retention`` seconds ago: what time does."""
    finished = K.user_finished(user)
    long_ago = r.zscore(finished, job_id) - retention * 1000 - 1000
    r.zadd(finished, {job_id: long_ago})
    r.zadd(K.oldest_finished, {finished: min(long_ago, r.zscore(K.oldest_finished, finished))})


def test_a_job_whose_hash_expired_leaves_the_indexes_at_the_next_chunk(r):
    """A finished job that ended more than the retention ago (its hash has
    expired) leaves its user's finished set, the owner index and the
    fingerprints at the next chunk the site's workers apply, whoever's it is;
    the set, and its entry in oldest-finished, go with the last job in it.  The
    expiry zset, written before oldest-finished, is drained the same way."""
    a = Applier(r, Settings(retention=600))
    a.apply(chunk(1, [up(job()), up(job(jid="2.pbs")), up(job(jid="3.pbs", user="bob"))]))
    done = [up(job(state="completed", exit_status=0)),
            up(job(jid="2.pbs", state="completed", exit_status=0))]  # fmt: skip
    a.apply(chunk(2, done))
    assert r.hexists(K.fingerprints, "job:1.pbs") and r.hget(K.owner, "1.pbs") == b"alice"
    r.zadd(K.expiry, {"0.pbs": 1})  # a job that finished before the upgrade
    r.hset(K.owner, "0.pbs", "carol")
    finished = K.user_finished("alice")
    _ended_long_ago(r, "alice", "1.pbs", 600)
    a.apply(chunk(3, [up(job(jid="3.pbs", user="bob", comment="bob's"))]))
    assert r.zrange(finished, 0, -1) == [b"2.pbs"]
    assert r.hget(K.owner, "1.pbs") is None and not r.hexists(K.fingerprints, "job:1.pbs")
    assert r.hget(K.owner, "2.pbs") == b"alice" and r.hexists(K.fingerprints, "job:2.pbs")
    assert r.zscore(K.oldest_finished, finished) == r.zscore(finished, "2.pbs")
    assert r.hget(K.owner, "0.pbs") is None and not r.exists(K.expiry)
    _ended_long_ago(r, "alice", "2.pbs", 600)
    a.apply(chunk(4, [up(job(jid="3.pbs", user="bob", comment="bob's again"))]))
    assert not r.exists(finished) and not r.exists(K.oldest_finished)
    assert r.hget(K.owner, "2.pbs") is None and r.hget(K.owner, "3.pbs") == b"bob"


def test_a_stored_field_edited_to_garbage_is_written_again_by_the_next_change(r, caplog):
    """The diff reads a JSON field that holds no JSON (a hash edited by hand) as
    empty, with a warning, and the change writes it again whole: the site's
    changes of that job go on (it made the diff raise, and rq retry the chunk
    for as long as the hash stayed so)."""
    a = Applier(r)
    a.apply(chunk(1, [up(job(state="running"))]))
    key = K.job("alice", "1.pbs")
    r.hset(key, mapping={"requested": "{not json", "native": "[garbage"})
    with caplog.at_level(logging.WARNING, logger="jobtap"):
        a.apply(chunk(2, [up(job(state="running", comment="after"))]))
    last = events(r)[-1]
    assert last["version"] == 2 and last["was"]["requested"] is None
    assert from_hash(r.hgetall(key))["requested"] == job()["requested"]
    assert orjson.loads(r.hget(key, "native")) == job(state="running")["native"]
    assert "a record's requested is not JSON" in caplog.text
    assert "a record's native is not JSON" in caplog.text
