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
    JobState,
    JournalRecords,
    apply_events,
    ordered,
)
from jobtap.collector.fingerprint import fingerprint
from sim.rig.paths import fixtures_dir
from sim.standins import flux_standin

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
    assert list(ordered({"state": "RUN", "bank": "b", "id": 1})) == ["bank", "id", "state"]
    assert list(ordered({"state": "RUN", "other": "b", "id": 1})) == ["id", "state", "other"]
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
    assert records.records[held_id][0] == found[held_id]  # kept: a late poke gets the same
    assert (records.derived, records.listed) == (1, 3)


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
    from jobtap.collector.follow.pokes import PokeReader, poke
    from jobtap.collector.service import CollectorService
    from jobtap.keys import SiteKeys
    from sim.rig.paths import FAKE_BIN

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
    svc.follower.pokes = PokeReader(r, SiteKeys("fluxsplit"))
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
    svc.follower.pokes.read(block_ms=1000)
    assert svc.follower.serve_pokes()
    assert groups == [[ok_id], [held_id]]
    assert svc.collector.ledger.of("job")[ok_id].state == "completed"


# New jobs: records from the journal alone ------------------------------------------
def raw_journal() -> dict[int, list[dict]]:
    """Per job, its events as the job manager's journal sent them (jobspec on
    submit, R on alloc), in the form the feed hands them over."""
    out: dict[int, list[dict]] = {}
    for line in (FIXTURES / "journal.raw.jsonl").open():
        doc = json.loads(line)
        for event in doc["events"]:
            entry = {"event": event["name"], "timestamp": event["timestamp"],
                     "context": event.get("context") or {}}  # fmt: skip
            for extra in ("jobspec", "R"):
                if extra in doc:
                    entry[extra] = doc[extra]
            out.setdefault(doc["id"], []).append(entry)
    return out


def read_journal() -> dict[int, list[dict]]:
    """The same through the journal reader (what it keeps of jobspec and R)."""
    import subprocess
    import sys

    from jobtap.collector.backends.flux import READER_PATH, journal_job_ids

    out = subprocess.run([sys.executable, str(READER_PATH), "--replay",
                          str(FIXTURES / "journal.consumer.jsonl")],
                         capture_output=True, check=True, timeout=30).stdout  # fmt: skip
    per: dict[int, list[dict]] = {}
    for batch in journal_job_ids(out.splitlines()):
        for job_id, events in batch.entries.items():
            per.setdefault(flux_jobs_number(job_id), []).extend(events)
    return per


def flux_jobs_number(job_id: str) -> int:
    from jobtap.collector.backends.flux import decode_jobid

    return decode_jobid(job_id)


JOURNALS = {"raw": raw_journal, "reader": read_journal}


@pytest.mark.parametrize("source", sorted(JOURNALS))
@pytest.mark.parametrize("name", sorted(JOBS))
def test_a_new_job_from_the_journal_alone_at_every_point_of_its_life(
    name: str, source: str
) -> None:
    """job-list's bookkeeping copied (JobState): from the submit event (its
    jobspec), the alloc event (its R) and the rest, after each of the job's
    journal events, the record is byte for byte what flux jobs printed then
    (same fingerprint), or nothing while flux jobs does not list the job."""
    from jobtap.collector.backends.flux import encode_f58

    job = JOBS[name]
    number = job.final["id"]
    events = JOURNALS[source]()[number]
    assert events[0]["event"] == "submit" and "jobspec" in events[0]
    state = JobState(encode_f58(number), number)
    points = 0
    for event in events:
        assert state.apply(event)
        want = job.at(event["timestamp"])
        assert state.listed == (want is not None), (name, event["event"])
        if want is None:
            continue
        got = state.record("root", encode_f58(number))
        want = listed(want)
        assert orjson.dumps(got) == orjson.dumps(want), (name, event["event"])
        assert fingerprint(got) == fingerprint(want)
        points += 1
    assert points >= len(events) - 2
    assert state.record("root", encode_f58(number)) == listed(job.final)


def test_job_list_rules_the_captures_do_not_reach() -> None:
    """Rules copied from flux-core 0.88's job-list that no captured job
    exercises: a job name from the command, ntasks from count.total and from
    per-resource options with R, an exclusive node request's cores from R, a
    non-fatal exception shown once the job is inactive, a memo's uri, a
    jobspec-update that moves the job back to PRIORITY, a resource-update."""

    def spec(resources: list, **system) -> dict:
        return {"version": 1, "resources": resources,
                "tasks": [{"command": ["/usr/bin/hostname", "-s"], "slot": "task",
                           "count": {"per_slot": 1}}],
                "attributes": {"system": {"duration": 60, **system}}}  # fmt: skip

    def run(jobspec: dict, R: dict | None, *more: tuple[str, dict]) -> dict:
        state = JobState("ƒx", 7)
        timeline = [("submit", {"userid": 5, "urgency": 16, "flags": 0, "version": 1}),
                    ("validate", {}), ("depend", {}), ("priority", {"priority": 16}),
                    ("alloc", {}), *more]  # fmt: skip
        for t, (event, context) in enumerate(timeline):
            state.apply({"event": event, "timestamp": 100.0 + t, "context": context,
                         "jobspec": jobspec, "R": R})  # fmt: skip
        return state.record("u5", "ƒx")

    slot = {"type": "slot", "count": 2, "label": "task",
            "with": [{"type": "core", "count": 3}]}  # fmt: skip
    R = {
        "version": 1,
        "execution": {
            "R_lite": [
                {"rank": "0-1", "children": {"core": "0-3"}},
                {"rank": "4", "children": {"core": "1"}},
            ],
            "nodelist": ["n[01-02]", "n05"],
            "expiration": 200.0,
        },
    }
    plain = run(spec([slot], queue="batch"), R)
    assert (plain["name"], plain["queue"], plain["ntasks"]) == ("hostname", "batch", 2)
    assert (plain["nnodes"], plain["ncores"], plain["ranks"]) == (3, 9, "[0-1,4]")
    assert (plain["nodelist"], plain["expiration"], plain["duration"]) == ("n[01-02,05]", 200.0,
                                                                            60.0)  # fmt: skip
    node = {"type": "node", "count": 2, "exclusive": True, "with": [slot]}
    per_node = spec([node], shell={"options": {"per-resource": {"type": "node", "count": 3}}})
    pending = JobState("ƒx", 7)
    pending.apply({"event": "submit", "timestamp": 1.0, "jobspec": per_node,
                   "context": {"userid": 5, "urgency": 16}})  # fmt: skip
    pending.apply({"event": "validate", "timestamp": 2.0, "context": {}})
    assert pending.record("u5", "ƒx")["ntasks"] == 6 and "ncores" not in pending.record("u5", "ƒx")
    assert pending.record("u5", "ƒx")["t_depend"] == pending.record("u5", "ƒx")["t_submit"]
    per_core = spec([node], shell={"options": {"per-resource": {"type": "core"}}})
    assert run(per_core, R)["ntasks"] == 9 and run(per_core, R)["ncores"] == 9
    total = spec([slot])
    total["tasks"][0]["count"] = {"total": 5}
    assert run(total, R)["ntasks"] == 5
    warned = run(spec([slot]), R, ("exception", {"type": "w", "severity": 2, "note": "n"}),
                 ("finish", {"status": 0}), ("clean", {}))  # fmt: skip
    assert warned["exception"] == {"occurred": True, "severity": 2, "type": "w", "note": "n"}
    assert (warned["result"], warned["success"], warned["returncode"]) == ("COMPLETED", True, 0)
    memo = run(spec([slot]), R, ("memo", {"uri": "ssh://h/tmp/x", "k": 1}))
    assert memo["uri"] == "ssh://h/tmp/x" and memo["annotations"] == {"user": {"k": 1}}
    updated = JobState("ƒx", 7)
    for t, (event, context) in enumerate(
        [("submit", {"userid": 5, "urgency": 16}), ("validate", {}), ("depend", {}),
         ("priority", {"priority": 16}),
         ("jobspec-update", {"attributes.system.duration": 30.0})]
    ):  # fmt: skip
        updated.apply({"event": event, "timestamp": 1.0 + t, "context": context,
                       "jobspec": spec([slot])})  # fmt: skip
    record = updated.record("u5", "ƒx")
    assert (record["state"], record["duration"], record["t_sched"]) == ("PRIORITY", 30.0, 4.0)
    expiring = run(spec([slot]), R, ("resource-update", {"expiration": 300.0}))
    assert expiring["expiration"] == 300.0
    with pytest.raises(CannotApply):  # a jobspec this copy cannot read: the job is listed
        JobState("ƒx", 7).apply({"event": "validate", "timestamp": 1.0, "context": {}})


def test_journal_records_follow_new_jobs_without_listing() -> None:
    """JournalRecords: a job whose submit the feed saw is answered at every
    refresh; before validate it is in neither list; its user name comes from a
    listing or the lookup, else it is listed; a feed restart hands it back to
    the last record and events."""
    from jobtap.collector.backends.flux import encode_f58

    ok = JOBS["ok-117272739840"]
    ok_id = encode_f58(ok.final["id"])
    events = raw_journal()[ok.final["id"]]
    records = JournalRecords()
    records.note_events({ok_id: events[:1]})  # submit
    assert records.take([ok_id]) == ({}, [])  # flux jobs would not list it yet
    records.note_events({ok_id: events[1:3]})  # validate, depend
    assert records.at_hand([ok_id]) == [] and records.take([ok_id]) == ({}, [ok_id])  # no user
    records.note_listing(
        {"ƒother": {"id": 1, "userid": 0, "username": "root", "jobid": "ƒother", "state": "RUN"}},
        0.0,
        full=False,
    )
    assert records.at_hand([ok_id]) == [ok_id]
    alloc = next(i for i, e in enumerate(events) if e["event"] == "alloc")
    records.note_events({ok_id: events[3 : alloc + 1]})
    found, listing = records.take([ok_id])
    assert listing == [] and found[ok_id] == listed(ok.at(events[alloc]["timestamp"]))
    records.restart()
    records.note_events({ok_id: events[alloc + 1 :]})
    found, listing = records.take([ok_id])  # from the record kept, events applied to it
    assert listing == [] and found[ok_id] == listed(ok.final)
    assert (records.derived, records.built, records.listed) == (2, 1, 1)
    ascii_ids = JournalRecords(lookup_user=lambda uid: "root")
    ascii_ids.note_listing({"ƒother": {"jobid": "fother"}}, 0.0, full=False)
    ascii_ids.note_events({ok_id: events})
    assert ascii_ids.take([ok_id])[0][ok_id]["jobid"] == "f" + ok_id[1:]
