"""Typed records and changes, built from what the real Applier writes."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import datetime

import orjson

import jobtap
from jobtap.entries import xrange_events
from jobtap.records import INITIAL, Change
from jobtap.schema import JOB_FIELDS, NODE_FIELDS, QUEUE_FIELDS
from tests.support.ids import eid
from tests.support.sdk import K


def test_record_types_have_every_normalised_field():
    assert [f.name for f in fields(jobtap.Job)] == [*JOB_FIELDS, "final"]
    assert [f.name for f in fields(jobtap.Node)] == [*NODE_FIELDS, "final"]
    assert [f.name for f in fields(jobtap.Queue)] == [*QUEUE_FIELDS, "final"]


def test_job_from_hash_and_from_event_agree(writer, r):
    writer.job("1.pbs", state="running", exit_status=None, priority=5, array_index=None)
    writer.finish("1.pbs", state="failed", exit_status=271)
    from_hash = jobtap.Job.from_hash(r.hgetall(K.job("alice", "1.pbs")))
    event = orjson.loads(xrange_events(r, K.events)[-1][1][b"event"])
    from_event = jobtap.Job.from_event(event)
    # the event (format 2) leaves the native record in the hash
    assert from_event.native is None
    assert from_hash == replace(from_event, native=from_hash.native)
    job = from_hash
    assert job.final and job.terminal and job.state == "failed"
    assert job.exit_status == 271 and job.priority == 5 and job.version == 2
    assert isinstance(job.end_time, datetime) and job.end_time.tzinfo is not None
    assert isinstance(job.updated_at, datetime)
    assert job.native == {"job_state": "F", "Job_Owner": "alice@vm"}
    as_dict = job.to_dict()
    assert as_dict["end_time"] == job.end_time.isoformat() and orjson.dumps(as_dict)
    assert jobtap.Job.from_hash({}) is None


def test_running_job_is_not_terminal(writer, r):
    writer.job("1.pbs", state="running")
    job = jobtap.Job.from_hash(r.hgetall(K.job("alice", "1.pbs")))
    assert not job.terminal and not job.final


def test_change_from_stream_is_lazy_and_complete(writer, r):
    writer.job("1.pbs")
    writer.job("1.pbs", state="running")
    sid, f = xrange_events(r, K.events)[-1]
    change = Change(f[b"id"].decode(), f[b"type"].decode(), 2, json=f[b"event"], stream_id=sid)
    assert change._event is None  # nothing parsed yet
    assert (change.id, change.type, change.version, change.kind) == (
        eid(r, "t1", "1.pbs", 2),
        "state",
        2,
        "job",
    )
    assert change.changes["state"] == ["queued", "running"]
    assert change.record.state == "running" and not change.final
    assert change.user == "alice" and change.site == "t1" and change.object_id == "1.pbs"
    assert isinstance(change.observed_at, datetime)


def test_synthesized_initial_change_has_the_event_schema(writer, r):
    writer.job("1.pbs")
    writer.finish("1.pbs")
    rec = jobtap.schema.from_hash(r.hgetall(K.job("alice", "1.pbs")))
    change = Change.synthesize(INITIAL, "job", "t1", rec, final=True)
    event = orjson.loads(change.json)
    written = orjson.loads(
        xrange_events(r, K.events)[-1][1][b"event"]
    )  # the final, as a worker made it
    # the same keys but native_changed, which names what changed and is not said here
    assert list(event) == [k for k in written if k != "native_changed"]
    assert event["event_version"] == 2 and written["native_changed"] == ["job_state"]
    assert event["id"] == eid(r, "t1", "1.pbs", 2) and event["type"] == "initial"
    assert set(event["record"]) == set(written["record"])
    assert not {"final", "cycle", "epoch", "native"} & set(event["record"])
    assert change.final and change.record.final
