"""The site epoch against real redis-server processes: Redis restarted empty,
restarted with everything kept, sent back to an older snapshot; two workers
finding the loss together; a batch made for an old epoch; a chunk in hand while
Redis is away.  After each, no event id is ever reused for other content and
versions count 1, 2, 3... within the epoch."""

from __future__ import annotations

import logging
import threading

import orjson

from jobtap.contract.chunk import Chunk
from jobtap.contract.epoch import EpochGuard, new_epoch_name
from jobtap.entries import xrange_events
from jobtap.events import changes_of
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier, Settings
from jobtap.workers.service import _retired, worker_alive, worker_name
from sim.rig.records import job_record
from sim.rig.redisloss import reload_from, restart_empty, restart_from, snapshot
from sim.rig.wait import eventually

SITE = "ep"
K = SiteKeys(SITE)


def job(jid="1.pbs", state="queued", **extra):
    return job_record(jid, "alice", state, SITE, **extra)


def chunk(cycle, recs):
    items = [
        {"op": "upsert", "id": rec["id"], "fp": "fp", "state": rec["state"], "record": rec}
        for rec in recs
    ]
    return Chunk(
        SITE, cycle, f"2026-11-21T15:{cycle // 60:02d}:{cycle % 60:02d}+00:00", "job", items
    )


def events(r) -> list[dict]:
    return [orjson.loads(f[b"event"]) for _, f in xrange_events(r, K.events)]


def meta(r) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(K.meta).items()}


def no_id_reused(*batches: list[dict]) -> None:
    """No event id names two different events."""
    seen: dict[str, bytes] = {}
    for batch in batches:
        for e in batch:
            body = orjson.dumps(e, option=orjson.OPT_SORT_KEYS)
            assert seen.setdefault(e["id"], body) == body, f"id {e['id']} reused"


def versions_by_epoch(evs: list[dict]) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for e in evs:
        out.setdefault((e["epoch"], e["object_id"]), []).append(e["version"])
    return out


def test_epoch_names_are_fixed_length_and_sort_by_time():
    a, b = new_epoch_name(1_700_000_000.0), new_epoch_name(1_700_000_000.002)
    assert len(a) == len(b) == 12 and a[:8] < b[:8]
    assert new_epoch_name() != new_epoch_name()


def test_the_first_write_begins_an_epoch_that_ids_and_hashes_carry(r):
    Applier(r).apply(chunk(1, [job()]))
    m = meta(r)
    assert m["epoch_cause"] == "empty" and m["epochs"] == "1" and len(m["epoch"]) == 12
    assert m["epoch_run_id"] == r.info("server")["run_id"]
    (e,) = events(r)
    assert (e["id"], e["epoch"], e["version"]) == (f"{SITE}:{m['epoch']}:1.pbs:1", m["epoch"], 1)
    assert r.hget(K.job("alice", "1.pbs"), "epoch").decode() == m["epoch"]
    assert "epoch" not in e["record"]  # bookkeeping, like cycle and final


def test_redis_back_empty_begins_an_epoch_and_versions_start_again(redis_server):
    r = redis_server.client()
    a = Applier(r)  # keeps its idea of the epoch across the loss
    for n in range(1, 4):
        a.apply(chunk(n, [job(comment=str(n))]))
    before = events(r)
    old = meta(r)["epoch"]
    restart_empty(redis_server)
    r = redis_server.client()
    a.apply(chunk(4, [job(comment="4")]))
    a.apply(chunk(5, [job(comment="5", state="running")]))
    after = events(r)
    assert meta(r)["epoch_cause"] == "empty" and meta(r)["epoch"] != old
    assert [(e["type"], e["version"]) for e in after] == [("new", 1), ("state", 2)]
    assert {e["epoch"] for e in after} == {meta(r)["epoch"]}
    no_id_reused(before, after)


def test_a_restart_that_kept_everything_still_begins_an_epoch(durable_redis):
    """The server cannot prove it lost nothing (appendfsync everysec loses up
    to a second): any restart begins an epoch.  Records not touched since keep
    the epoch and version they were written with."""
    server = durable_redis
    r = server.client()
    a = Applier(r)
    a.apply(chunk(1, [job("1.pbs"), job("2.pbs")]))
    a.apply(chunk(2, [job("1.pbs", comment="x")]))
    old = meta(r)["epoch"]
    before = events(r)
    server.stop()  # SIGTERM: a clean shutdown, the AOF complete
    server.start()
    r = server.client()
    assert r.hget(K.job("alice", "1.pbs"), "version") == b"2"  # nothing lost
    a.apply(chunk(3, [job("1.pbs", comment="x", state="running")]))
    m = meta(r)
    assert (m["epoch_cause"], m["epoch_previous"]) == ("restart", old)
    new = events(r)[len(before) :]
    assert [(e["type"], e["version"], changes_of(e).get("state")) for e in new] == [
        ("state", 1, ["queued", "running"])
    ]
    untouched = r.hgetall(K.job("alice", "2.pbs"))
    assert (untouched[b"epoch"].decode(), untouched[b"version"]) == (old, b"1")
    no_id_reused(before, new)


def test_an_older_snapshot_never_gets_an_id_reused(redis_server):
    r = redis_server.client()
    a = Applier(r)
    a.apply(chunk(1, [job(), job("2.pbs")]))
    aside = snapshot(redis_server)
    a.apply(chunk(2, [job(state="running")]))
    a.apply(chunk(3, [job(state="completed", exit_status=0)]))
    lost = events(r)
    restart_from(redis_server, aside)
    r = redis_server.client()
    assert r.hget(K.job("alice", "1.pbs"), "version") == b"1"  # back in time
    a.apply(chunk(4, [job(state="running", comment="again")]))
    a.apply(chunk(5, [job(state="failed", exit_status=1)]))
    now = events(r)
    assert meta(r)["epoch_cause"] == "restart"
    new = [e for e in now if e["epoch"] == meta(r)["epoch"]]
    assert [(e["type"], e["version"]) for e in new] == [("state", 1), ("final", 2)]
    no_id_reused(lost, now)
    for (epoch, oid), vs in versions_by_epoch(lost + new).items():
        assert vs == list(range(1, len(vs) + 1)), (epoch, oid, vs)


def test_data_gone_back_without_a_restart_is_caught_by_the_cycle(reloadable_redis):
    """Same server, older data (a replica re-synced from a stale primary does
    this): only the cycle numbers show it."""
    reloadable = reloadable_redis
    r = reloadable.client()
    a = Applier(r)
    r.hset(K.meta, "cycle", 1)  # the collector counts a cycle before shipping it
    a.apply(chunk(1, [job()]))
    aside = snapshot(reloadable)
    for n in (2, 3):
        r.hset(K.meta, "cycle", n)
        a.apply(chunk(n, [job(comment=str(n))]))
    lost, old = events(r), meta(r)["epoch"]
    reload_from(reloadable, aside)
    assert meta(r)["cycle"] == "1" and meta(r)["epoch"] == old  # nothing else tells
    a.apply(chunk(4, [job(comment="4")]))  # a chunk of cycle 4 from the queue
    m = meta(r)
    assert (m["epoch_cause"], m["epoch_previous"], m["cycle"]) == ("behind", old, "4")
    (e,) = [e for e in events(r) if e["epoch"] == m["epoch"]]
    assert (e["type"], e["version"]) == ("update", 1)
    no_id_reused(lost, events(r))


def test_without_a_cycle_counter_chunks_never_look_ahead(r):
    """Writers that count no cycles in meta (no collector) never trigger
    'behind': one epoch however many chunks."""
    a = Applier(r)
    for n in range(1, 6):
        a.apply(chunk(n, [job(comment=str(n))]))
    assert meta(r)["epochs"] == "1"
    assert [e["version"] for e in events(r)] == [1, 2, 3, 4, 5]


def test_a_batch_made_for_an_old_epoch_is_not_written(r):
    a = Applier(r)
    a.apply(chunk(1, [job()]))
    c2 = chunk(2, [job(comment="x")])
    dest = a.destinations.for_site(K)
    plan = a._plan(K, c2, a._read(dest, K, c2))  # events made for the current epoch ...
    r.hdel(K.meta, "epoch")  # ... which Redis then loses
    before = r.xlen(K.events)
    reply = a._run(dest, K, chunk(2, []), plan)
    assert reply[0] == b"epoch" and reply[1].decode() == meta(r)["epoch"]
    assert r.xlen(K.events) == before  # nothing written
    a.apply(c2)  # the real path makes the events again for the new epoch
    last = events(r)[-1]
    assert (last["epoch"], last["version"], last["type"]) == (meta(r)["epoch"], 1, "update")


def test_two_workers_finding_the_loss_together_begin_one_epoch(redis_server):
    r = redis_server.client()
    workers = [Applier(redis_server.client()) for _ in range(2)]
    workers[0].apply(chunk(1, [job(f"{i}.pbs") for i in range(20)]))
    restart_empty(redis_server)
    errors: list[BaseException] = []

    def run(a: Applier, first: int) -> None:
        try:
            for n in range(first, first + 40, 2):
                a.apply(chunk(n, [job(f"{i}.pbs", comment=str(n)) for i in range(20)]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(a, 2 + k)) for k, a in enumerate(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    r = redis_server.client()
    after = events(r)
    assert {e["epoch"] for e in after} == {meta(r)["epoch"]} and meta(r)["epochs"] == "1"
    for key, vs in versions_by_epoch(after).items():
        assert vs == list(range(1, len(vs) + 1)), (key, vs)


def test_a_chunk_in_hand_waits_for_redis_and_is_finished(redis_server, caplog):
    r = redis_server.client()
    a = Applier(r, Settings(redis_wait=60))
    a.apply(chunk(1, [job(f"{i}.pbs") for i in range(5)]))
    redis_server.stop(kill=True)
    done: dict = {}
    t = threading.Thread(
        target=lambda: done.update(
            a.apply(chunk(2, [job(f"{i}.pbs", state="running") for i in range(5)]))
        )
    )
    with caplog.at_level(logging.WARNING, logger="jobtap.workers"):
        t.start()
        eventually(lambda: any("went away" in m for m in caplog.messages), what="a retry")
        redis_server.start()  # empty: a new epoch, the chunk applied whole
        t.join(30)
    assert not t.is_alive() and (done["events"], done["skipped"]) == (5, 0)
    r = redis_server.client()
    assert [(e["type"], e["version"]) for e in events(r)] == [("new", 1)] * 5


def test_the_standalone_check_agrees_with_the_apply_script(r):
    guard = EpochGuard(r)
    first = guard.ensure(K, 0)
    assert first.began and first.cause == "empty"
    again = guard.ensure(K, 0)
    assert (again.epoch, again.began) == (first.epoch, False)
    Applier(r).apply(chunk(1, [job()]))
    assert events(r)[0]["epoch"] == first.epoch
    owner = guard.ensure(K, 7, owner=True)  # the collector raises the counter
    assert (owner.began, owner.cycle, meta(r)["cycle"]) == (False, 7, "7")


def test_a_stopped_rq_worker_of_this_process_counts_as_dead(r):
    name = worker_name()
    assert worker_alive(r, name)  # this process is alive ...
    _retired.add(name)
    assert not worker_alive(r, name)  # ... but that rq worker will finish nothing
