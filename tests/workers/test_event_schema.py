"""The published event schemas (JSON Schema and Avro) describe what the workers
really write: every event of a sim pipeline with finals, vanished jobs, node
changes and removals validates, and the schemas name the states and types the
code uses."""

from __future__ import annotations

import fastavro
import jsonschema
import orjson
import pytest

from jobtap import events, schema
from jobtap.collector.cycle import Collector, CycleFailed
from jobtap.keys import SiteKeys
from jobtap.sim.backend import SimBackend
from sim.rig.pipeline import drain

SITE = "schema"
K = SiteKeys(SITE)


def all_events(r) -> list[dict]:
    """Every event in every stream of the site (site stream and user streams)."""
    out = []
    for key in r.scan_iter(match=f"jobtap:{{{SITE}}}:*events", _type="stream"):
        out += [orjson.loads(f[b"event"]) for _, f in r.xrange(key)]
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
    assert list(fields) == list(events.Event.__annotations__)
    assert fields["type"]["type"]["symbols"] == list(events.EVENT_TYPES)
