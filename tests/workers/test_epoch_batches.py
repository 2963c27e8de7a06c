"""A chunk of several batches across Redis losing data, against real
redis-server processes.

The Applier plans batch n+1 while Redis runs batch n.  When batch n is refused
because a new epoch began, batch n+1 was already planned: its events (ids,
versions) are made for the old epoch.  It must be sent with the epoch its
events carry, refused by the script and made again; sent with the new epoch's
name, the script took it and wrote ids of the old epoch that had been handed
out already with other content (issue: ``loss:OLD:47.simhost:1``).

Each way Redis loses data is taken: started empty (cause ``empty``), restarted
on an older snapshot (``restart``), sent back to an older snapshot under the
same run_id (``behind``), and a chunk in hand while Redis is away and comes
back empty."""

from __future__ import annotations

import logging
import threading

import orjson
import pytest

from jobtap.contract.chunk import Chunk
from jobtap.entries import xrange_events
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier, Settings
from sim.rig.records import job_record
from sim.rig.redisloss import reload_from, restart_empty, restart_from, snapshot
from sim.rig.wait import eventually

SITE = "eb"
K = SiteKeys(SITE)
JOBS = [f"{i}.pbs" for i in range(1, 8)]  # 7 jobs: batches of 3, 3 and 1
BATCH = 3


def chunk(cycle: int, state: str = "queued") -> Chunk:
    recs = [job_record(j, "alice", state, SITE, comment=f"cycle {cycle}") for j in JOBS]
    items = [
        {"op": "upsert", "id": rec["id"], "fp": f"fp{cycle}", "state": state, "record": rec}
        for rec in recs
    ]
    return Chunk(SITE, cycle, f"2026-11-21T15:00:{cycle:02d}+00:00", "job", items)


def events(r) -> list[dict]:
    return [orjson.loads(f[b"event"]) for _, f in xrange_events(r, K.events)]


def meta(r) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(K.meta).items()}


def apply_counting(a: Applier, r, c: Chunk) -> None:
    """Apply ``c`` as the collector would have counted its cycle in ``meta``."""
    r.hset(K.meta, "cycle", c.cycle)
    a.apply(c)


def check_after_loss(before: list[dict], after: list[dict], new_epoch: str) -> None:
    """Everything written after the loss carries the new epoch, versions count
    from 1 in it, and no id written before names another event now."""
    old = [e["id"] for e in after if e["epoch"] != new_epoch]
    assert not old, f"events made for an old epoch written in epoch {new_epoch}: {old}"
    seen = {e["id"]: orjson.dumps(e, option=orjson.OPT_SORT_KEYS) for e in before}
    reused = [
        f"{e['id']} ({e['type']} v{e['version']})"
        for e in after
        if e["id"] in seen and seen[e["id"]] != orjson.dumps(e, option=orjson.OPT_SORT_KEYS)
    ]
    assert not reused, f"ids handed out before the loss, now with other content: {reused}"
    assert sorted(e["object_id"] for e in after) == sorted(JOBS)
    assert {e["version"] for e in after} == {1}


@pytest.mark.parametrize("cause", ["empty", "restart", "behind"])
def test_a_chunk_of_several_batches_is_written_whole_in_the_new_epoch(reloadable_redis, cause):
    """Batch 1 finds the new epoch and is made again; batch 2, planned while
    batch 1 ran, carries the old epoch: it is refused and made again too.  One
    loss begins one epoch: the worker that began it for a restart onto an older
    snapshot raised meta's cycle counter, so batch 2 does not find Redis behind."""
    server = reloadable_redis
    r = server.client()
    a = Applier(r, Settings(batch=BATCH))  # keeps its idea of the epoch across the loss
    apply_counting(a, r, chunk(1))
    aside = snapshot(server)
    apply_counting(a, r, chunk(2, "running"))
    apply_counting(a, r, chunk(3, "running"))
    before, old = events(r), meta(r)["epoch"]
    assert len(before) == 3 * len(JOBS)
    if cause == "empty":
        restart_empty(server)
    elif cause == "restart":
        restart_from(server, aside)
    else:
        reload_from(server, aside)
    r = server.client()
    kept = len(events(r))
    a.apply(chunk(4, "running"))  # a chunk from the queue: meta's cycle is not raised first
    m = meta(r)
    began = int(m["epochs"]) - (0 if cause == "empty" else 1)  # the snapshot counted one
    assert began == 1, f"{began} epochs began for one loss (the last: {m['epoch_cause']})"
    assert (m["epoch_cause"], m["epoch_previous"]) == (cause, "" if cause == "empty" else old)
    check_after_loss(before, events(r)[kept:], m["epoch"])


def test_a_chunk_in_hand_while_redis_comes_back_empty_is_written_in_the_new_epoch(
    redis_server, caplog
):
    """The chunk in hand is applied again from the start once Redis is back:
    every batch of it goes out in the new epoch."""
    r = redis_server.client()
    a = Applier(r, Settings(batch=BATCH, redis_wait=60))
    a.apply(chunk(1))
    before = events(r)
    redis_server.stop(kill=True)
    done: dict = {}
    t = threading.Thread(target=lambda: done.update(a.apply(chunk(2, "running"))))
    with caplog.at_level(logging.WARNING, logger="jobtap.workers"):
        t.start()
        eventually(lambda: any("went away" in m for m in caplog.messages), what="a retry")
        redis_server.start()
        t.join(30)
    assert not t.is_alive() and done["events"] == len(JOBS)
    r = redis_server.client()
    check_after_loss(before, events(r), meta(r)["epoch"])
