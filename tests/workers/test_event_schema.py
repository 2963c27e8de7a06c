"""The published event schemas (JSON Schema and Avro) describe what the workers
really write: every event of a sim pipeline with finals, vanished jobs, node
changes and removals validates, and the schemas name the states and types the
code uses."""

from __future__ import annotations

import io

import fastavro
import jsonschema
import orjson
import pytest

from jobtap import events, schema
from jobtap.collector.cycle import Collector, CycleFailed
from jobtap.entries import xrange_events
from jobtap.keys import SiteKeys
from jobtap.sim.backend import SimBackend
from sim.rig.pipeline import drain

SITE = "schema"
K = SiteKeys(SITE)


def all_events(r) -> list[dict]:
    """Every event in every stream of the site (site stream and user streams)."""
    out = []
    for key in r.scan_iter(match=f"jobtap:{{{SITE}}}:*events", _type="stream"):
        out += [orjson.loads(f[b"event"]) for _, f in xrange_events(r, key)]
    return out


def check(event: dict) -> None:
    jsonschema.Draft202012Validator(events.json_schema()).validate(event)
    fastavro.validation.validate(
        events.to_avro(event), fastavro.parse_schema(events.avro_schema()), raise_errors=True
    )


def test_every_event_of_a_sim_pipeline_validates(redis_server, r):
    backend = SimBackend(seed=11, nodes=20, jobs=300, tick=0)
    sim = backend.simulation
    collector = Collector(backend, r, site=SITE, nodes_every=1)
    for n in range(12):
        sim.advance(240.0)
        if n == 6:
            sim.fault("history_fail")  # vanished jobs then finalise as unknown
        try:
            collector.run_cycle()
        except CycleFailed:  # a faulted cycle changes nothing; the next one goes on
            pass
        drain(r, SITE)
    produced = all_events(r)
    kinds = {(e["kind"], e["type"]) for e in produced}
    assert {("job", "new"), ("job", "final"), ("node", "new")} <= kinds, kinds
    assert any(e["type"] in ("state", "update") for e in produced)
    validator = jsonschema.Draft202012Validator(events.json_schema())
    avro = fastavro.parse_schema(events.avro_schema())
    for event in produced:
        validator.validate(event)
        fastavro.validation.validate(events.to_avro(event), avro, raise_errors=True)


def test_the_schemas_reject_what_is_not_an_event():
    good = events.make_event(
        site=SITE, epoch="mg3k1x2a7f3c", kind="job", type="new", object_id="1.pbs",
        user="alice", version=1,
        observed_at="2026-11-21T15:00:00+00:00", changes={},
        record={"id": "1.pbs", "site": SITE, "scheduler": "pbs", "user": "alice",
                "state": "queued", "version": 1, "updated_at": "2026-11-21T15:00:00+00:00",
                "native": {}},
    )  # fmt: skip
    check(good)
    assert good["id"] == f"{SITE}:mg3k1x2a7f3c:1.pbs:1"
    for bad in (
        {**good, "type": "moved"},
        {**good, "version": 0},
        {**good, "record": {**good["record"], "state": "sleeping"}},
        {**good, "user": None},  # a job always has an owner
        {k: v for k, v in good.items() if k != "record"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft202012Validator(events.json_schema()).validate(bad)
    with pytest.raises(fastavro.validation.ValidationError):
        fastavro.validation.validate(
            {**events.to_avro(good), "type": "moved"},
            fastavro.parse_schema(events.avro_schema()),
            raise_errors=True,
        )


def test_the_schemas_name_what_the_code_uses():
    js = events.json_schema()
    assert js["properties"]["type"]["enum"] == list(events.EVENT_TYPES)
    assert js["properties"]["kind"]["enum"] == list(schema.KINDS)
    assert set(js["$defs"]["job"]["properties"]["state"]["enum"]) == set(schema.JOB_STATES)
    assert set(js["$defs"]["job"]["properties"]) == set(schema.JOB_FIELDS)
    assert set(js["$defs"]["other"]["properties"]) == set(schema.NODE_FIELDS) | set(
        schema.QUEUE_FIELDS
    )
    fields = {f["name"]: f for f in events.avro_schema()["fields"]}
    # the Avro form is the same for both formats: format 2's was read into changes
    assert list(fields) == [n for n in events.Event.__annotations__ if n != "was"]
    assert fields["type"]["type"]["symbols"] == list(events.EVENT_TYPES)


def test_both_formats_validate_and_old_avro_messages_read_as_format_1():
    """A format-1 event (``jobtap worker --event-version 1``) validates as a
    format-2 one does; a message written with the Avro schema of before (no
    event_version) reads with today's as format 1: the field's default is what
    keeps the two compatible in a schema registry."""
    fields = dict(
        site=SITE, epoch="mg3k1x2a7f3c", kind="job", type="new", object_id="1.pbs",
        user="alice", version=1, observed_at="2026-11-21T15:00:00+00:00", changes={},
        record={"id": "1.pbs", "site": SITE, "scheduler": "pbs", "user": "alice",
                "state": "queued", "version": 1, "updated_at": "2026-11-21T15:00:00+00:00",
                "native": {"job_state": "Q"}},
    )  # fmt: skip
    old, new = events.make_event(**fields, event_version=1), events.make_event(**fields)
    assert "event_version" not in old and old["record"]["native"] == {"job_state": "Q"}
    assert new["event_version"] == 2 and "native" not in new["record"]
    for event in (old, new):
        check(event)
    assert events.to_avro(old)["event_version"] == 1
    whole = events.to_avro(new)["record"]  # the envelope's fields put back, none as ""
    assert whole.keys() == set(schema.JOB_FIELDS) - {"native"}
    assert {k: whole[k] for k in events.to_avro(old)["record"].keys() - {"native"}} == {
        k: v for k, v in events.to_avro(old)["record"].items() if k != "native"
    }
    today = events.avro_schema()
    before = {**today, "fields": [f for f in today["fields"] if f["name"] != "event_version"]}
    buf = io.BytesIO()
    message = {k: v for k, v in events.to_avro(old).items() if k != "event_version"}
    fastavro.schemaless_writer(buf, fastavro.parse_schema(before), message)
    buf.seek(0)
    read = fastavro.schemaless_reader(
        buf, fastavro.parse_schema(before), fastavro.parse_schema(today)
    )
    assert read["event_version"] == 1 and read["record"]["native"] == '{"job_state":"Q"}'
