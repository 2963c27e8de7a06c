"""The version rule (jobtap.sequence) and what a resync delivers per object
(jobtap.catchup), on events made by jobtap.events.make_event."""

from __future__ import annotations

import orjson

from jobtap.backfill import Entry
from jobtap.cache import Ref
from jobtap.catchup import LATE, plan_object
from jobtap.events import FINAL, NEW, REMOVED, RESYNC, STATE, UPDATE, make_event
from jobtap.sequence import Step, VersionSequence

SITE = "s"
EPOCH = "mg3k1x2a7f3c"
JOB = "s:1.pbs"
NODE = "s:node:n1"
JOB_REF = Ref(SITE, "job", "1.pbs", "alice")
NODE_REF = Ref(SITE, "node", "n1")


def test_next_old_and_gap():
    seq: VersionSequence[str] = VersionSequence()
    assert seq.step(JOB, 1, NEW) is Step.NEXT  # unknown: its next version is 1
    assert seq.step(JOB, 3, UPDATE) is Step.GAP
    assert seq.advance(JOB, 1, NEW, "m1")
    assert seq.step(JOB, 1, NEW) is Step.OLD and seq.step(JOB, 2, STATE) is Step.NEXT
    assert seq.step(JOB, 4, STATE) is Step.GAP
    assert not seq.advance(JOB, 1, NEW, "older")  # not newer: nothing moves
    assert (seq.last(JOB), seq.mark(JOB)) == (1, "m1")


def test_a_removed_object_that_comes_back_starts_again_at_new():
    seq: VersionSequence[str] = VersionSequence()
    for version, etype in [(1, NEW), (2, UPDATE), (3, REMOVED)]:
        seq.advance(NODE, version, etype, "n")
    assert seq.removed(NODE)
    assert seq.step(NODE, 1, UPDATE) is Step.OLD  # not a new life: an old event
    assert seq.comes_back(NODE, NEW) and seq.step(NODE, 1, NEW) is Step.NEXT
    assert seq.step(NODE, 2, NEW) is Step.GAP  # its version 1 was missed
    assert seq.processed(NODE, 2) is None  # from this life or an earlier one?
    assert seq.advance(NODE, 1, NEW, "back")
    assert not seq.removed(NODE) and seq.last(NODE) == 1 and seq.processed(NODE, 1)
    assert seq.step(NODE, 2, UPDATE) is Step.NEXT


def test_follows_processed_expect_and_forget():
    seq: VersionSequence[Ref] = VersionSequence()
    seq.expect(JOB, 0, JOB_REF)  # awaited, not collected yet
    assert JOB in seq and seq.follows(JOB, [1, 2]) and not seq.follows(JOB, [2, 3])
    seq.expect(JOB, 4, JOB_REF)
    assert seq.follows(JOB, [5, 6]) and not seq.follows(JOB, [6])
    assert seq.processed(JOB, 4) is True and seq.processed(JOB, 5) is False
    assert seq.processed(NODE, 1) is None  # unknown
    assert seq.marks() == {JOB: JOB_REF}
    seq.forget(JOB)
    assert JOB not in seq and seq.last(JOB) is None and seq.step(JOB, 1, NEW) is Step.NEXT


def test_a_bounded_sequence_forgets_the_least_recently_advanced():
    seq: VersionSequence[int] = VersionSequence(maxsize=2)
    seq.advance("a", 1, NEW, 0)
    seq.advance("b", 1, NEW, 0)
    seq.advance("a", 2, UPDATE, 0)  # a is now the most recent
    seq.advance("c", 1, REMOVED, 0)
    assert seq.keys() == ["a", "c"] and len(seq) == 2 and seq.mark("b") is None
    seq.advance("d", 1, NEW, 0)
    assert seq.keys() == ["c", "d"] and seq.removed("c")
    assert seq.step("a", 1, NEW) is Step.NEXT  # forgotten: unknown again


def entry(version: int, etype: str, sid_ms: int, kind: str = "job", oid: str = "1.pbs") -> Entry:
    event = make_event(
        site=SITE, epoch=EPOCH, kind=kind, type=etype, object_id=oid,
        user="alice" if kind == "job" else None, version=version,
        observed_at="2025-01-01T00:00:00+00:00", changes={},
        record={"id": oid, "version": version},
    )  # fmt: skip
    return Entry(f"{sid_ms}-0", event["id"], etype, orjson.dumps(event))


def record(version: int, oid: str = "1.pbs", **extra: object) -> dict[str, object]:
    return {"id": oid, "user": "alice", "version": version, "epoch": EPOCH, "state": "running",
            **extra}  # fmt: skip


def known_at(version: int, ref: Ref = JOB_REF, key: str = JOB) -> VersionSequence[Ref]:
    seq: VersionSequence[Ref] = VersionSequence()
    seq.expect(key, version, ref, EPOCH)
    return seq


def test_missed_events_that_follow_on_are_delivered_in_stream_order():
    missed = [entry(v, UPDATE, 100 + v) for v in (2, 3, 4)]
    plan = plan_object(
        known_at(2), SITE, JOB, record=record(4), missed=missed, ref=JOB_REF, named=True
    )
    assert [(p.change.version, p.position) for p in plan] == [(3, (103, 0)), (4, (104, 0))]
    assert all(not p.restart and p.ref == JOB_REF for p in plan)


def test_a_record_read_before_a_new_epoch_began_is_not_taken_for_news():
    """The catch-up reads the records, then the streams.  A new epoch beginning in
    between (a Redis Cluster failover) leaves a record of the old epoch and the
    new epoch's first events: those are newer, and the record says nothing new
    (delivering it would take the object back to the old epoch, and its new-epoch
    events would come again)."""
    new_epoch = "mg3k1x2b0000"
    missed = [entry(1, UPDATE, 300)]
    missed[0] = Entry(missed[0].sid, missed[0].eid.replace(EPOCH, new_epoch), UPDATE,
                      missed[0].json.replace(EPOCH.encode(), new_epoch.encode()))  # fmt: skip
    plan = plan_object(
        known_at(2), SITE, JOB, record=record(2), missed=missed, ref=JOB_REF, named=True
    )
    assert [(p.change.type, p.change.version, p.change.epoch) for p in plan] == [
        (UPDATE, 1, new_epoch)
    ]
    # a record of the new epoch that went further than the streams still counts
    ahead = dict(record(3), epoch=new_epoch)
    plan = plan_object(known_at(2), SITE, JOB, record=ahead, missed=missed, ref=JOB_REF,
                       named=True)  # fmt: skip
    assert [(p.change.type, p.change.version) for p in plan] == [(UPDATE, 1), (RESYNC, 3)]


def test_a_hole_in_the_streams_is_filled_from_the_record():
    missed = [entry(v, UPDATE, 100 + v) for v in (4, 5)]  # 3 was trimmed away
    plan = plan_object(
        known_at(2), SITE, JOB, record=record(5), missed=missed, ref=JOB_REF, named=True
    )
    assert [(p.change.type, p.change.version, p.position) for p in plan] == [(RESYNC, 5, LATE)]


def test_a_gone_job_gets_its_final_from_the_streams_or_a_removed_change():
    missed = [entry(3, UPDATE, 103), entry(5, FINAL, 105)]  # a hole, then the final
    plan = plan_object(known_at(2), SITE, JOB, record=None, missed=missed, ref=JOB_REF, named=True)
    assert [(p.change.type, p.change.version) for p in plan] == [(UPDATE, 3), (FINAL, 5)]
    plan = plan_object(known_at(2), SITE, JOB, record=None, missed=[], ref=JOB_REF, named=True)
    assert [(p.change.type, p.change.version, p.change.final) for p in plan] == [(REMOVED, 3, True)]


def test_a_finished_job_never_seen_before_is_left_alone_unless_named():
    done = record(7, final=1, state="completed")
    seq: VersionSequence[Ref] = VersionSequence()
    assert plan_object(seq, SITE, JOB, record=done, missed=[], ref=JOB_REF, named=False) == []
    plan = plan_object(seq, SITE, JOB, record=done, missed=[], ref=JOB_REF, named=True)
    assert [(p.change.type, p.change.final) for p in plan] == [(RESYNC, True)]


def test_a_node_that_came_back_starts_again_from_its_record():
    seq: VersionSequence[Ref] = VersionSequence()
    seq.advance(NODE, 6, REMOVED, NODE_REF, EPOCH)
    missed = [entry(1, NEW, 200, "node", "n1"), entry(2, UPDATE, 201, "node", "n1")]
    current = record(2, "n1")
    plan = plan_object(seq, SITE, NODE, record=current, missed=missed, ref=NODE_REF, named=False)
    assert [(p.change.type, p.change.version, p.restart) for p in plan] == [(RESYNC, 2, True)]
