"""Flux records built from journal events (collector/backends/flux_journal.py):
for every captured job, from every earlier record the collector could hold,
the events that followed give exactly the record ``flux jobs`` printed at the
end, key order included, or the job is listed instead."""

from __future__ import annotations

import json

import orjson
import pytest

from jobtap.collector.backends.flux import parse_flux_jobs
from jobtap.collector.backends.flux_journal import (
    KEY_ORDER,
    CannotApply,
    JournalRecords,
    apply_events,
    ordered,
)
from jobtap.collector.fingerprint import fingerprint
from tests.fakes import flux_standin
from tests.support.paths import fixtures_dir

FIXTURES = fixtures_dir() / "flux"


JOBS = {p.name: flux_standin.JobDir(p) for p in sorted((FIXTURES / "jobs").iterdir())}


def listed(record: dict) -> dict:
    """What the backend holds of a printed record (time-of-query fields dropped)."""
    return next(iter(parse_flux_jobs(json.dumps(record)).values()))


def as_events(eventlog: list[dict]) -> list[dict]:
    return [{"event": e["name"], "timestamp": e["timestamp"], "context": e.get("context") or {}}
            for e in eventlog]  # fmt: skip


@pytest.mark.parametrize("name", sorted(JOBS))
def test_every_later_record_of_every_job_from_its_events(name: str) -> None:
    """From the record after each event, the rest of the job's events either
    give the record flux jobs printed after the last one, byte for byte, or
    cannot be applied (a new job, an allocation)."""
    job = JOBS[name]
    built = refused = 0
    for i, event in enumerate(job.events):
        before = job.at(event["timestamp"])
        if before is None:
            continue
        for j in range(i + 1, len(job.events)):
            later = as_events(job.events[i + 1 : j + 1])
            want = listed(job.at(job.events[j]["timestamp"]))
            try:
                got = apply_events(listed(before), later)
            except CannotApply:
                refused += 1
                assert any(e["event"] in ("alloc", "exception") for e in later), later
                continue
            assert orjson.dumps(got) == orjson.dumps(want), (name, [e["event"] for e in later])
            assert fingerprint(got) == fingerprint(want)
            built += 1
    assert built > 0 or refused > 0


def test_the_end_of_a_running_job_needs_no_listing() -> None:
    """ok, timeout, raised, runcancel, notfound: from the running record, the
    end events give the final record (the case follow mode is for)."""
    for name in ("ok-117272739840", "timeout-139670323200", "raised-145156472832",
                 "runcancel-233807282176", "notfound-128177930240"):  # fmt: skip
        job = JOBS[name]
        alloc = next(e["timestamp"] for e in job.events if e["name"] == "alloc")
        rest = as_events([e for e in job.events if e["timestamp"] > alloc])
        assert apply_events(listed(job.at(alloc)), rest) == listed(job.final), name


def test_records_follow_the_order_flux_jobs_prints() -> None:
    final = listed(JOBS["ok-117272739840"].final)
    shuffled = dict(reversed(list(final.items())))
    assert list(ordered(shuffled)) == list(final)
    assert list(ordered({"state": "RUN", "bank": "b", "id": 1})) == ["id", "state", "bank"]
    assert list(ordered({"t_run": 1.0, "custom": 2})) == ["t_run", "custom"]
    assert len(set(KEY_ORDER)) == len(KEY_ORDER)


@pytest.mark.parametrize(
    ("event", "context"),
    [("alloc", {}), ("validate", {}), ("submit", {"userid": 0}), ("exception", {"severity": 1}),
     ("memo", {"foo": 1}), ("priority", {}), ("something-new", {})],
)  # fmt: skip
def test_what_the_journal_does_not_carry_is_refused(event: str, context: dict) -> None:
    pending = listed(JOBS["held-251003928576"].at(1795274950.0))
    assert pending["state"] == "SCHED"
    with pytest.raises(CannotApply):
        apply_events(pending, [{"event": event, "timestamp": 1795274960.0, "context": context}])


def test_journal_records_list_what_they_cannot_build() -> None:
    held = JOBS["held-251003928576"]
    ok = JOBS["ok-117272739840"]
    held_id, ok_id = "ƒheld", "ƒok"
    records = JournalRecords()
    t_listing = 1795274950.0
    records.note_listing({held_id: listed(held.at(t_listing)),
                          ok_id: listed(ok.final)}, t_listing, full=True)  # fmt: skip
    assert ok_id not in records.records  # INACTIVE: nothing more will change
    release = [e for e in as_events(held.events) if e["timestamp"] > t_listing]
    old = {"event": "urgency", "timestamp": t_listing - 1, "context": {"urgency": 0}}
    records.note_events({held_id: [old, *release[:2]]})  # an event the listing may show
    found, listing = records.take([held_id, "ƒnever-seen"])
    assert (found, listing) == ({}, [held_id, "ƒnever-seen"])
    records.note_listing({held_id: listed(held.at(release[1]["timestamp"]))},
                         release[1]["timestamp"], full=False)  # fmt: skip
    records.note_events({held_id: release[2:]})  # alloc: needs R
    assert records.take([held_id]) == ({}, [held_id])
    t_run = release[2]["timestamp"]
    records.note_listing({held_id: listed(held.at(t_run))}, t_run, full=False)
    records.note_events({held_id: release[3:]})
    found, listing = records.take([held_id])
    assert listing == [] and found[held_id] == listed(held.final)
    assert held_id not in records.records and (records.derived, records.listed) == (1, 3)


def test_a_full_listing_keeps_only_the_events_it_cannot_show() -> None:
    records = JournalRecords()
    records.note_events({"ƒa": [{"event": "finish", "timestamp": 5.0, "context": {"status": 0}},
                                {"event": "clean", "timestamp": 9.0, "context": {}}]})  # fmt: skip
    records.note_events({"ƒb": [{"event": "clean", "timestamp": 6.0, "context": {}}]})
    records.note_listing({}, 7.0, full=True)
    assert records.events == {"ƒa": [{"event": "clean", "timestamp": 9.0, "context": {}}]}


def test_at_hand_is_what_take_answers_without_a_listing() -> None:
    ok, held = JOBS["ok-117272739840"], JOBS["held-251003928576"]
    alloc = next(e["timestamp"] for e in ok.events if e["name"] == "alloc")
    records = JournalRecords()
    records.note_listing({"ƒok": listed(ok.at(alloc)), "ƒheld": listed(held.at(1795274950.0))},
                         alloc, full=True)  # fmt: skip
    records.note_events(
        {
            "ƒok": as_events([e for e in ok.events if e["timestamp"] > alloc]),
            "ƒheld": as_events([e for e in held.events if e["timestamp"] > 1795274950.0]),
        }
    )  # its release and alloc among them
    assert records.at_hand(["ƒok", "ƒheld", "ƒnew"]) == ["ƒok"]
    found, listing = records.take(["ƒok", "ƒheld", "ƒnew"])
    assert list(found) == ["ƒok"] and listing == ["ƒheld", "ƒnew"]


def test_follow_mode_refreshes_what_the_journal_gives_first(r, tmp_path, monkeypatch) -> None:
    """A poke batch with a job the journal answers and one that needs flux jobs:
    two refreshes, the quick one first, so its final never waits for the listing."""
    from jobtap.collector.backends.flux import FluxBackend, encode_f58
    from jobtap.collector.cycle import Collector
    from jobtap.collector.follow import PokeReader, poke
    from jobtap.collector.service import CollectorService
    from jobtap.keys import SiteKeys
    from tests.support.paths import FAKE_BIN

    ok, held = JOBS["ok-117272739840"], JOBS["held-251003928576"]
    ok_id, held_id = encode_f58(ok.final["id"]), encode_f58(held.final["id"])
    alloc = next(e["timestamp"] for e in ok.events if e["name"] == "alloc")
    control = tmp_path / "fake-flux.json"
    control.write_text(json.dumps({"dir": str(FIXTURES), "mode": "ok", "time": alloc}))
    monkeypatch.setenv("JOBTAP_FAKE_FLUX", str(control))
    clock = [alloc]
    backend = FluxBackend(flux=str(FAKE_BIN / "flux"), timeout=30, clock=lambda: clock[0])
    svc = CollectorService(Collector(backend, r, site="fluxsplit", nodes_every=10**6),
                           interval=3600, follow=True)  # fmt: skip
    svc.pokes = PokeReader(r, SiteKeys("fluxsplit"))
    assert svc.run_one()  # lists both: ok running, held pending
    end = ok.events[-1]["timestamp"]
    backend.journal.note_events({
        ok_id: as_events([e for e in ok.events if e["timestamp"] > alloc]),
        held_id: as_events([e for e in held.events if alloc < e["timestamp"] <= end]),
    })  # fmt: skip
    clock[0] = end
    control.write_text(json.dumps({"dir": str(FIXTURES), "mode": "ok", "time": end}))
    groups: list[list[str]] = []
    refresh = svc.collector.refresh
    svc.collector.refresh = lambda ids: (groups.append(list(ids)), refresh(ids))[1]
    poke(r, SiteKeys("fluxsplit"), [held_id, ok_id])
    svc.pokes.read(block_ms=1000)
    assert svc.serve_pokes()
    assert groups == [[ok_id], [held_id]]
    assert svc.collector.tracker.of("job")[ok_id].state == "completed"
