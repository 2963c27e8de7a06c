"""The Flux backend against real flux-core 0.88 output (``tests/fixtures/flux``):
parsers, normalisers, the journal reader, and
``FluxBackend`` end to end through a stand-in for ``flux`` that replays those
files (sim/standins/flux_standin.py), with a real redis-server and rq worker.

The stand-in can also rebuild every job as it stood at any moment from its
final record and eventlog (``"time"``); the first tests check that this
reproduces each captured stage exactly, which is what lets the journal replay
ask "what did ``flux jobs --json ID`` print right after this event?".
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest
from rq import Queue

from jobtap.collector.backends import make_backend
from jobtap.collector.backends.base import BadRecord, StatError
from jobtap.collector.backends.flux import (
    ANONYMOUS_QUEUE,
    READER_PATH,
    FluxBackend,
    JournalBatch,
    canonical_job_id,
    decode_jobid,
    encode_f58,
    expand_hostlist,
    expand_idset,
    journal_job_ids,
    merge_nodes,
    normalise_job,
    normalise_node,
    normalise_queue,
    parse_flux_jobs,
    parse_job_stats,
    parse_journal_line,
    parse_queue_list,
    parse_resource_list,
    parse_resource_R,
    parse_resource_status,
)
from jobtap.collector.cycle import Collector, CycleFailed
from jobtap.collector.fingerprint import fingerprint
from jobtap.events import record_of
from jobtap.keys import SiteKeys
from jobtap.schema import JOB_FIELDS, JOB_STATES, NODE_FIELDS, QUEUE_FIELDS, TERMINAL, from_hash
from sim.rig.paths import FAKES, ROOT, fixtures_dir
from sim.rig.pipeline import drain, site_events
from sim.standins import flux_standin

FIXTURES = fixtures_dir() / "flux"
FAKE_FLUX = FAKES / "bin" / "flux"


ADDED_LATER = {"site", "version", "updated_at"}
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$")
STAGES = tuple(sorted(p.name[5:-5] for p in FIXTURES.glob("jobs-*.json")))
JOB_DIRS = {p.name.rsplit("-", 1)[0]: p for p in (FIXTURES / "jobs").iterdir()}

# The issue's list, and the rest of the fixtures: name -> (state, exit_status, reason).
FINAL = {
    "ok": ("completed", 0, None),
    "exit3": ("failed", 3, "exit 3"),
    "notfound": ("failed", 127, "exec: task 0 (host vm): start failed: /nonexistent/cmd: "
                 "No such file or directory"),
    "multinode": ("completed", 0, None),
    "timeout": ("failed", 142, "timeout: resource allocation expired"),
    "raised": ("failed", 143, "mytype: raised by scenario"),
    "batch": ("completed", 0, None),
    "unsat": ("failed", None, "alloc: unsatisfiable request: need 10 exclusive node(s), "
              "only 4 eligible"),
    "blocker": ("completed", 0, None),
    "runcancel": ("cancelled", 143, "cancel"),
    "waiter": ("completed", 0, None),
    "pendcancel": ("cancelled", None, "cancel"),
    "held": ("completed", 0, None),
    "dependent": ("completed", 0, None),
    "urgent": ("completed", 0, None),
    "bulk": ("completed", 0, None),
}  # fmt: skip


def load(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def stage_jobs(stage: str) -> dict[str, dict]:
    """``{job name or name#n: normalised record}`` of one stage."""
    out, seen = {}, Counter()
    for job_id, native in parse_flux_jobs(load(f"jobs-{stage}.json")).items():
        name = native["name"]
        seen[name] += 1
        key = name if name != "bulk" else f"bulk#{native['id']}"
        out[key] = normalise_job(job_id, native)
    return out


def by_name(records: dict[str, dict], name: str) -> dict:
    return records[name]


@lru_cache(maxsize=1)
def stage_times() -> dict[str, float]:
    """For each captured stage, the earliest event time T at which the
    stand-in's rebuilt listing equals the capture (None if there is none)."""
    jobs = flux_standin.job_dirs(FIXTURES)
    times = [0.0, *sorted({e["timestamp"] for j in jobs for e in j.events})]

    def key(records: list[dict]) -> str:
        return json.dumps(sorted((r["id"], list(stable(r).items())) for r in records))

    found = {}
    for stage in STAGES:
        want = key(json.loads(load(f"jobs-{stage}.json"))["jobs"])
        found[stage] = next(
            (t for t in times if key([x for j in jobs if (x := j.at(t)) is not None]) == want),
            None,
        )
    return found


def stable(record: dict) -> dict:
    drop = {"t_remaining"} | ({"runtime"} if "t_cleanup" not in record else set())
    return {k: v for k, v in record.items() if k not in drop}


class FakeFlux:
    """Controls the flux stand-in (sim/standins) through its control file."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        self.control = tmp_path / "fake-flux.json"
        monkeypatch.setenv("JOBTAP_FAKE_FLUX", str(self.control))
        self.set("00-empty")

    def set(self, stage: str | None = None, mode: str = "ok", **extra) -> None:
        doc = {"dir": str(FIXTURES), "mode": mode, **extra}
        if stage is not None:
            doc["stage"] = stage
        self.control.write_text(json.dumps(doc))

    def backend(self, **kw) -> FluxBackend:
        kw.setdefault("timeout", 10)
        return FluxBackend(flux=str(FAKE_FLUX), **kw)


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakeFlux:
    return FakeFlux(tmp_path, monkeypatch)


# The stand-in itself ---------------------------------------------------------------
def test_stand_in_rebuilds_every_captured_stage_exactly() -> None:
    times = stage_times()
    assert all(t is not None for t in times.values()), times
    assert list(times.values()) == sorted(times.values())  # stages in time order


# Parsing ---------------------------------------------------------------------------
@pytest.mark.parametrize("stage", STAGES)
def test_every_job_of_every_stage_normalises(stage: str) -> None:
    raw = json.loads(load(f"jobs-{stage}.json"))["jobs"]
    natives = parse_flux_jobs(load(f"jobs-{stage}.json"))
    assert len(natives) == len(raw)
    for job_id, native in natives.items():
        record = normalise_job(job_id, native)
        assert set(record) == set(JOB_FIELDS) - ADDED_LATER
        assert job_id == native["jobid"] == encode_f58(native["id"])  # ƒ + base 58
        assert record["id"] == job_id and record["scheduler"] == "flux"
        assert record["state"] in JOB_STATES
        assert record["native_state"] == native["state"]
        assert record["user"] == "root" and record["native"] is native
        for field in ("submit_time", "start_time", "end_time"):
            assert record[field] is None or ISO_UTC.match(record[field]), (field, record[field])
        assert "t_remaining" not in native
        assert ("runtime" in native) == ("t_cleanup" in native and "t_run" in native)


def test_the_issue_list_in_the_final_stage() -> None:
    records = stage_jobs("07-final")
    assert len(records) == 19
    for key, record in records.items():
        name = key.partition("#")[0]
        state, code, reason = FINAL[name]
        assert (record["state"], record["exit_status"], record["reason"]) == (
            state,
            code,
            reason,
        ), key
        assert record["end_time"] is not None
    assert records["multinode"]["allocated"] == ["node0", "node1", "node2", "node3"]
    assert records["blocker"]["allocated"] == ["node0", "node1", "node2"]
    assert records["blocker"]["requested"] == {
        "ncpus": 6, "nodes": 3, "ntasks": 6, "mem": None, "walltime": None, "select": None,
    }  # fmt: skip
    assert records["timeout"]["requested"]["walltime"] == "00:00:02"
    assert records["urgent"]["priority"] == 25
    for never_ran in ("pendcancel", "unsat"):
        rec = records[never_ran]
        assert rec["start_time"] is None and rec["allocated"] == [] and rec["resources_used"] == {}
        assert rec["native"]["returncode"] in (-128, 1)  # Flux's synthetic codes stay in native
    assert records["unsat"]["requested"]["nodes"] == 10
    assert records["ok"]["resources_used"] == {"runtime": 3.046741, "walltime": "00:00:03"}
    assert records["ok"]["start_time"] == "2026-11-21T15:28:56.542+00:00"
    bulk = sorted(k for k in records if k.startswith("bulk#"))
    assert len(bulk) == 4
    ids = sorted(records[k]["native"]["id"] for k in bulk)
    assert ids == list(range(ids[0], ids[0] + 4))  # one submission, four jobs
    assert {records[k]["state"] for k in bulk} == {"completed"}


@pytest.mark.parametrize("name", sorted(JOB_DIRS))
def test_per_job_records_print_one_object_and_match_the_final_stage(name: str) -> None:
    natives = parse_flux_jobs((JOB_DIRS[name] / "jobs.json").read_bytes())
    assert len(natives) == 1
    (job_id, native), = natives.items()  # fmt: skip
    assert job_id == (JOB_DIRS[name] / "id-f58.txt").read_text().strip()
    assert native["id"] == int((JOB_DIRS[name] / "id-dec.txt").read_text())
    state, code, reason = FINAL[name]
    record = normalise_job(job_id, native)
    assert (record["state"], record["exit_status"], record["reason"]) == (state, code, reason)
    assert native == parse_flux_jobs(load("jobs-07-final.json"))[job_id]


def test_pending_running_held_and_dependent_in_the_pending_stage() -> None:
    records = stage_jobs("03-pending")
    assert records["held"]["state"] == "held"
    assert records["held"]["reason"] == "held (urgency 0)"
    assert records["held"]["priority"] == 0
    dependent = records["dependent"]
    assert (dependent["state"], dependent["native_state"]) == ("queued", "DEPEND")
    assert dependent["reason"] == "waiting for dependencies: after-success=\u019271jN4hV"
    assert dependent["priority"] is None
    for name in ("waiter", "pendcancel", "urgent"):
        rec = records[name]
        assert (rec["state"], rec["native_state"], rec["reason"]) == ("queued", "SCHED", None)
        assert rec["start_time"] is None and rec["exit_status"] is None
    for name, nodes in (("runcancel", ["node3"]), ("blocker", ["node0", "node1", "node2"])):
        rec = records[name]
        assert (rec["state"], rec["allocated"], rec["exit_status"]) == ("running", nodes, None)
        assert rec["start_time"] is not None and rec["end_time"] is None
        assert rec["resources_used"] == {}  # the run time only once it is final


def test_cancelled_while_pending_then_while_running() -> None:
    assert stage_jobs("03-pending")["pendcancel"]["state"] == "queued"
    pend = stage_jobs("04-after-pending-cancel")["pendcancel"]
    assert (pend["state"], pend["exit_status"], pend["reason"]) == ("cancelled", None, "cancel")
    assert stage_jobs("04-after-pending-cancel")["runcancel"]["state"] == "running"
    run = stage_jobs("05-after-running-cancel")["runcancel"]
    assert (run["state"], run["exit_status"], run["reason"]) == ("cancelled", 143, "cancel")
    assert run["allocated"] == ["node3"] and run["end_time"] == "2026-11-21T15:29:11.308+00:00"


def test_held_then_released() -> None:
    assert stage_jobs("06-held-only")["held"]["state"] == "held"
    held = next(j for j in flux_standin.job_dirs(FIXTURES) if j.final["name"] == "held")
    urgency = next(e["timestamp"] for e in held.events if e["name"] == "urgency")
    alloc = next(e["timestamp"] for e in held.events if e["name"] == "alloc")
    released = held.at((urgency + alloc) / 2)  # urgency raised, not yet allocated
    rec = normalise_job(encode_f58(released["id"]), released)
    assert (rec["state"], rec["reason"], rec["native"]["urgency"]) == ("queued", None, 16)
    assert stage_jobs("07-final")["held"]["state"] == "completed"


def test_cleanup_is_exiting_with_the_exit_status_from_waitstatus() -> None:
    runcancel = next(j for j in flux_standin.job_dirs(FIXTURES) if j.final["name"] == "runcancel")
    cancel = next(e["timestamp"] for e in runcancel.events if e["name"] == "exception")
    finish = next(e["timestamp"] for e in runcancel.events if e["name"] == "finish")
    for t, code in ((cancel, None), (finish, 143)):  # killed, then its shell reported
        native = runcancel.at(t)
        rec = normalise_job(encode_f58(native["id"]), native)
        assert (rec["state"], rec["native_state"]) == ("exiting", "CLEANUP")
        assert (rec["exit_status"], rec["reason"]) == (code, "cancel")
        assert "returncode" not in native
    base = {"id": 1, "username": "u", "state": "CLEANUP", "t_run": 1.0, "t_cleanup": 2.0}
    assert normalise_job("\u01922", {**base, "waitstatus": 3 << 8})["exit_status"] == 3
    assert normalise_job("\u01922", {**base, "waitstatus": 9})["exit_status"] == -9


def test_time_of_query_fields_do_not_move_the_fingerprint() -> None:
    timeout = next(j for j in flux_standin.job_dirs(FIXTURES) if j.final["name"] == "timeout")
    t_run = timeout.final["t_run"]
    early, late = timeout.at(t_run + 0.2), timeout.at(t_run + 1.5)
    assert early["runtime"] != late["runtime"] and early["t_remaining"] != late["t_remaining"]
    a = parse_flux_jobs(json.dumps({"jobs": [early]}))
    b = parse_flux_jobs(json.dumps({"jobs": [late]}))
    assert a == b and fingerprint(a) == fingerprint(b)
    assert "expiration" in next(iter(a.values()))  # the stable deadline stays


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "printed nothing"),
        (b"   \n", "printed nothing"),
        (b'{"jobs": [', "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"jobs": {"a": 1}}', "expected a list"),
        (b'{"jobs": [17]}', "a job that is a int"),
        (b'{"jobs": [{"name": "x"}]}', "without a valid id"),
        (b'{"jobs": [{"id": -4}]}', "without a valid id"),
        (b'{"jobs": [{"id": "12"}]}', "without a valid id"),
    ],
)
def test_bad_flux_jobs_output_is_a_stat_error(raw: bytes, message: str) -> None:
    with pytest.raises(StatError, match=message):
        parse_flux_jobs(raw)


def test_invalid_utf8_in_one_job_name_does_not_sink_the_stat() -> None:
    raw = load("jobs-07-final.json").replace(b'"name": "ok"', b'"name": "o\xe9k"')
    natives = parse_flux_jobs(raw)
    assert len(natives) == 19
    assert natives["\u019245fzSqM"]["name"] == "o\ufffdk"


@pytest.mark.parametrize(
    "native, message",
    [
        ("not a dict", "expected an object"),
        ({"id": 1, "username": "u"}, "state missing"),
        ({"id": 1, "state": "RUN"}, "no user"),
        ({"id": 1, "state": "RUN", "username": "a b"}, "white space"),
        ({"id": 1, "state": "RUN", "username": "u", "nodelist": "n[1-"}, "nodelist"),
        ({"id": 1, "state": "RUN", "username": "u", "name": ["x"]}, "expected text"),
    ],
)
def test_unusable_job_records(native: object, message: str) -> None:
    with pytest.raises(BadRecord, match=message):
        normalise_job("\u01922", native)  # type: ignore[arg-type]


def test_user_falls_back_to_the_uid_and_unknown_states_are_unknown() -> None:
    rec = normalise_job("\u01922", {"id": 1, "state": "RUN", "userid": 1234})
    assert rec["user"] == "1234"
    assert normalise_job("\u01922", {"state": "SOMEDAY", "username": "u"})["state"] == "unknown"
    odd = {"state": "INACTIVE", "username": "u", "result": "LOST"}
    assert normalise_job("\u01922", odd)["state"] == "unknown"
    assert normalise_job("\u01922", {"state": "NEW", "username": "u"})["state"] == "queued"


# Ids, hostlists, idsets ------------------------------------------------------------
def test_f58_ids_of_every_fixture_job() -> None:
    for path in JOB_DIRS.values():
        f58 = (path / "id-f58.txt").read_text().strip()
        number = int((path / "id-dec.txt").read_text())
        assert encode_f58(number) == f58 and decode_jobid(f58) == number
        assert decode_jobid("f" + f58[1:]) == number  # the ASCII spelling
        assert decode_jobid(str(number)) == decode_jobid(hex(number)) == number
        assert canonical_job_id("f" + f58[1:]) == canonical_job_id(number) == f58
    assert encode_f58(0) == "\u01921"
    for bad in ("", "ƒ", "ƒ0OIl", "x12", "-5", "1.5", str(1 << 64), None, True):
        with pytest.raises(ValueError):
            decode_jobid(bad)  # type: ignore[arg-type]
        assert canonical_job_id(bad) is None  # type: ignore[arg-type]


def test_hostlists_and_idsets() -> None:
    assert expand_hostlist("node[0-3]") == ["node0", "node1", "node2", "node3"]
    assert expand_hostlist("node3") == ["node3"]
    assert expand_hostlist("n[08-10,2],login1") == ["n08", "n09", "n10", "n2", "login1"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("") == expand_hostlist(None) == []
    for bad in ("n[1-", "n]1[", "n[a-b]", "n[3-1]", "n[0-99999999]"):
        with pytest.raises(ValueError):
            expand_hostlist(bad)
    assert expand_idset("0-3,5") == [0, 1, 2, 3, 5]
    assert expand_idset("[0-2]") == [0, 1, 2] and expand_idset("3") == [3]
    assert expand_idset("") == []


# Nodes and queues ------------------------------------------------------------------
def test_resource_outputs_of_the_fixtures() -> None:
    inventory = parse_resource_R(load("resource-R.json"))
    assert list(inventory) == ["node0", "node1", "node2", "node3"]
    assert inventory["node2"] == {
        "rank": 2, "cores": "0-1", "ncores": 2, "gpus": "", "ngpus": 0, "properties": [],
    }  # fmt: skip
    rows = parse_resource_list(load("resource-list.txt"))  # default format, header skipped
    assert rows[0] == {"state": "free", "nnodes": 4, "ncores": 8, "ngpus": 0,
                       "nodelist": "node[0-3]"}  # fmt: skip
    assert [r["nodelist"] for r in rows[1:]] == ["", ""]
    status = parse_resource_status(load("resource-status.txt"))  # default format: ✔
    assert status == [{"state": "avail", "online": True, "nnodes": 4,
                       "nodelist": "node[0-3]", "reason": ""}]  # fmt: skip
    nodes = merge_nodes(inventory, rows, status)
    for name, native in nodes.items():
        rec = normalise_node(name, native)
        assert set(rec) == set(NODE_FIELDS) - ADDED_LATER
        assert (rec["state"], rec["native_state"], rec["reason"]) == ("free", "avail,free", None)
        assert rec["resources"]["available"] == {"ncores": 2, "ngpus": 0}


def test_node_states_from_status_and_scheduler_views() -> None:
    inventory = parse_resource_R(load("resource-R.json"))
    sched = parse_resource_list(
        b"free 3 5 0 node[1-3]\nallocated 1 1 0 node0\nallocated 1 1 0 node1\ndown 1 2 0 node3\n"
    )
    status = parse_resource_status(
        "avail online 2 node[0-1]\n"
        "drained online 1 node2 bad  DIMM, ticket 42\n"
        "avail* offline 1 node3\n"
    )
    running = {"\u0192ABC": {"nodelist": "node[0-1]"}}
    nodes = merge_nodes(inventory, sched, status, running)
    recs = {name: normalise_node(name, native) for name, native in nodes.items()}
    assert recs["node0"]["state"] == "busy" and recs["node0"]["jobs"] == ["\u0192ABC"]
    assert recs["node1"]["state"] == "busy"  # partly free, partly allocated
    assert (recs["node2"]["state"], recs["node2"]["reason"]) == ("drain", "bad  DIMM, ticket 42")
    assert recs["node3"]["state"] == "down" and recs["node3"]["native_state"].endswith("offline")
    torpid = merge_nodes(inventory, [], parse_resource_status("torpid online 1 node0\n"))
    assert normalise_node("node0", torpid["node0"])["state"] == "down"
    excluded = merge_nodes(inventory, [], parse_resource_status("exclude online 1 node0\n"))
    assert normalise_node("node0", excluded["node0"])["state"] == "offline"


@pytest.mark.parametrize(
    "parse, raw",
    [
        (parse_resource_list, b"free 4 8\n"),
        (parse_resource_list, b"free four 8 0 node[0-3]\n"),
        (parse_resource_status, b"avail maybe 4 node[0-3]\n"),
        (parse_resource_R, b'{"execution": {"R_lite": [{"rank": "0-3"}], "nodelist": ["n1"]}}'),
        (parse_resource_R, b'{"version": 1}'),
        (parse_queue_list, b"batch|enabled|started\n"),
        (parse_job_stats, b'{"queues": []}'),
    ],
)
def test_bad_resource_and_queue_output_is_a_stat_error(parse, raw: bytes) -> None:
    with pytest.raises(StatError):
        parse(raw)


def test_queues_anonymous_and_named(fake: FakeFlux) -> None:
    backend = fake.backend()
    queues = backend.stat_queues()
    assert list(queues) == [ANONYMOUS_QUEUE]
    rec = normalise_queue(ANONYMOUS_QUEUE, queues[ANONYMOUS_QUEUE])
    assert set(rec) == set(QUEUE_FIELDS) - ADDED_LATER
    assert (rec["state"], rec["native_state"]) == ("open", "enabled=True started=True")
    assert rec["counts"]["inactive"] == 19 and rec["counts"]["successful"] == 12
    assert rec["resources"]["limits"] == {"timelimit": None, "nnodes": "0-4", "ncores": "0-8",
                                          "ngpus": "0-0"}  # fmt: skip
    fake.set(queues="named")
    queues = backend.stat_queues()
    assert set(queues) == {"batch", "debug"} and queues["batch"]["default"]
    debug = normalise_queue("debug", queues["debug"])
    assert debug["resources"]["limits"]["timelimit"] == 60.0
    assert debug["resources"]["defaults"] == {"timelimit": 30.0}
    assert debug["counts"]["timeout"] == 1 and debug["counts"]["total"] == 2
    fake.set(queue_list=[{"queue": "batch", "en": "✗", "st": "✔", "tdefault": "inf",
                          "tlimit": "inf", "nnodes": "0-1", "ncores": "0-2", "ngpus": "0-0"},
                         {"queue": "debug", "en": "✔", "st": "✗", "tdefault": "inf",
                          "tlimit": "inf", "nnodes": "0-1", "ncores": "0-2", "ngpus": "0-0"}],
             queues="named")  # fmt: skip
    queues = backend.stat_queues()
    assert normalise_queue("batch", queues["batch"])["state"] == "closed"
    assert normalise_queue("debug", queues["debug"])["state"] == "stopped"


def test_nodes_through_the_stand_in(fake: FakeFlux) -> None:
    fake.set(time=stage_times()["03-pending"])  # runcancel on node3, blocker on node[0-2]
    nodes = fake.backend().stat_nodes()
    assert sorted(nodes) == ["node0", "node1", "node2", "node3"]
    assert nodes["node3"]["jobs"] == ["\u019279DkSGX"]
    assert nodes["node0"]["jobs"] == ["\u019271jN4hV"]
    fake.set(
        time=stage_times()["03-pending"],
        resource_list=[
            {"state": "free", "nodelist": "node[1-3]"},
            {"state": "allocated", "nodelist": "node0"},
        ],
        resource_status=[
            {"state": "avail", "nodelist": "node[0-1]"},
            {"state": "drained", "nodelist": "node2", "reason": "fan"},
            {"state": "avail", "status": "offline", "nodelist": "node3"},
        ],
    )
    recs = {n: normalise_node(n, x) for n, x in fake.backend(node_jobs=False).stat_nodes().items()}
    assert [recs[n]["state"] for n in sorted(recs)] == ["busy", "free", "drain", "down"]
    assert recs["node2"]["reason"] == "fan" and recs["node0"]["jobs"] == []


# The backend through the stand-in --------------------------------------------------
@pytest.mark.parametrize("stage", STAGES)
def test_stat_jobs_lists_every_user_at_every_stage(fake: FakeFlux, stage: str) -> None:
    fake.set(stage, uid=1000)  # the collector is not the owner of these jobs: -A, not -a
    assert fake.backend().stat_jobs() == parse_flux_jobs(load(f"jobs-{stage}.json"))


def test_the_cap_of_1000_jobs_is_lifted(fake: FakeFlux, tmp_path: Path) -> None:
    template = json.loads(load("jobs-07-final.json"))["jobs"][0]
    big = tmp_path / "big.json"
    jobs = [{**template, "id": 10_000 + n, "jobid": encode_f58(10_000 + n)} for n in range(1500)]
    big.write_text(json.dumps({"jobs": jobs}))
    fake.set(file=str(big))
    capped = subprocess.run([FAKE_FLUX, "jobs", "-a", "-A", "--json"], capture_output=True,
                            check=True)  # fmt: skip
    assert len(json.loads(capped.stdout)["jobs"]) == 1000  # what flux does, silently
    assert "-c" in fake.backend().jobs_argv() and fake.backend().jobs_argv()[-1] == "0"
    assert len(fake.backend().stat_jobs()) == 1500


def test_an_explicit_cap_warns_when_reached(fake, tmp_path, caplog) -> None:
    template = json.loads(load("jobs-07-final.json"))["jobs"][0]
    big = tmp_path / "big.json"
    jobs = [{**template, "id": 10_000 + n} for n in range(30)]
    big.write_text(json.dumps({"jobs": jobs}))
    fake.set(file=str(big))
    with caplog.at_level(logging.WARNING, logger="jobtap.collector.flux"):
        assert len(fake.backend(count=20).stat_jobs()) == 20
    assert "cut short" in caplog.text
    assert fake.backend(since="-6h").jobs_argv()[-1] == "--since=-6h"


@pytest.mark.parametrize(
    "mode, message",
    [("fail", "exited with status 1: flux-jobs: ERROR: Unable to connect"),
     ("garbage", "not JSON"), ("hang", "timed out")],
)  # fmt: skip
def test_failed_stats_are_stat_errors(fake: FakeFlux, mode: str, message: str) -> None:
    fake.set("03-pending", mode=mode)
    backend = fake.backend(timeout=0.3 if mode == "hang" else 10)
    with pytest.raises(StatError, match=message):
        backend.stat_jobs()
    for stat in (backend.stat_nodes, backend.stat_queues):
        with pytest.raises(StatError):
            stat()
    with pytest.raises(StatError):
        backend.stat_some(["\u019279DkSGX"])


def test_missing_flux_command_is_a_stat_error(tmp_path: Path) -> None:
    backend = FluxBackend(flux=str(tmp_path / "no-flux"))
    with pytest.raises(StatError, match="command not found"):
        backend.stat_jobs()
    with pytest.raises(StatError, match="command not found"):
        backend.stat_some(["\u019279DkSGX"])


def test_empty_instance(fake: FakeFlux) -> None:
    fake.set("03-pending", mode="empty")
    backend = fake.backend()
    assert backend.stat_jobs() == {} and backend.stat_some(["\u019279DkSGX"]) == {}
    assert backend.stat_nodes() == {}
    assert backend.stat_queues() == {}


def test_stat_some_and_history(fake: FakeFlux) -> None:
    fake.set("03-pending")
    backend = fake.backend()
    runcancel, blocker = "\u019279DkSGX", "\u019271jN4hV"
    one = backend.stat_some([runcancel])  # one id: flux prints a bare object
    assert list(one) == [runcancel] and one[runcancel]["state"] == "RUN"
    asked = ["f79DkSGX", str(decode_jobid(blocker)), "\u0192zzzzzzz", "not-an-id", "-c", runcancel]
    got = backend.stat_some(asked)  # any spelling; unknown and junk ids are simply absent
    assert set(got) == {runcancel, blocker}
    assert backend.stat_some([]) == {} and backend.stat_some(["\u0192zzzzzzz"]) == {}
    fake.set("07-final")
    final = backend.history([runcancel, "\u01927NQk3gT"])
    assert {k: v["result"] for k, v in final.items()} == {
        runcancel: "CANCELED", "\u01927NQk3gT": "CANCELED",
    }  # fmt: skip
    small = fake.backend(batch=2)  # several flux jobs calls
    ids = list(parse_flux_jobs(load("jobs-07-final.json")))
    assert set(small.stat_some(ids)) == set(ids)


def test_stat_some_fails_on_other_complaints(fake: FakeFlux, tmp_path: Path) -> None:
    script = tmp_path / "flux"
    script.write_text("#!/bin/sh\necho 'rpc: Operation not permitted' >&2\n")
    script.chmod(0o755)
    with pytest.raises(StatError, match="Operation not permitted"):
        FluxBackend(flux=str(script)).stat_some(["\u019279DkSGX"])


def test_make_backend_and_commands_through_ssh() -> None:
    backend = make_backend("flux", prefix="ssh head1", timeout=5)
    assert isinstance(backend, FluxBackend) and backend.scheduler == "flux"
    assert backend.command(["flux", "resource", "list", "-o", "{state} {nodelist}"]) == [
        "flux", "resource", "list", "-o", "'{state} {nodelist}'",
    ]  # fmt: skip
    follow = backend.follow_command(since=1795274936.5)
    assert follow[:2] == ["ssh", "head1"] and follow[2:4] == ["flux", "python"]
    assert follow[4] == str(READER_PATH) and follow[-2:] == ["--since", "1795274936.5"]
    assert "--full" in FluxBackend().follow_command(full=True)
    assert backend.canonical_id("f79DkSGX") == "\u019279DkSGX"


# The journal reader ----------------------------------------------------------------
def reader(*args: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, str(READER_PATH), *args], capture_output=True, check=True, timeout=20
    ).stdout
    assert out.isascii()
    return [json.loads(line) for line in out.decode().splitlines()]


def test_reader_replays_the_recorded_journal() -> None:
    lines = reader("--replay", str(FIXTURES / "journal.consumer.jsonl"))
    raw = reader("--replay", str(FIXTURES / "journal.raw.jsonl"))
    assert lines[0]["ready"] and raw[0]["ready"] and lines[1:] == raw[1:]  # same either way
    assert lines[1] == {"sentinel": True}  # the journal was opened before the first job
    events = [x for x in lines if "event" in x]
    recorded = [json.loads(x) for x in (FIXTURES / "journal.consumer.jsonl").open()]
    recorded = [x for x in recorded if not x.get("sentinel")]
    assert len(events) == len(recorded) == 208
    for got, want in zip(events, recorded):
        assert (got["id"], got["id_int"], got["event"], got["timestamp"], got["context"]) == (
            want["jobid_f58"], want["jobid_int"], want["name"], want["timestamp"],
            want["context"],
        )  # fmt: skip
        assert ("userid" in got) == (got["event"] == "submit")
        assert ("jobspec" in got) == (got["event"] == "submit")  # job-list's part of it
        assert ("R" in got) == (got["event"] == "alloc")
    assert {k: v for k, v in events[0].items() if k != "jobspec"} == {
        "id": "\u019245fzSqM", "id_int": 117272739840, "event": "submit",
        "timestamp": 1795274936.4471116, "userid": 0,
        "context": {"userid": 0, "urgency": 16, "flags": 0, "version": 1},
    }  # fmt: skip
    batch = next(x for x in events if x["event"] == "submit" and x["id_int"] == 149770207232)
    system = batch["jobspec"]["attributes"]["system"]
    assert system == {
        "duration": 0,
        "cwd": "/home/alice/flux",
        "job": {"name": "batch"},
        "shell": {"options": {"per-resource": {"type": "node"}}},
    }  # no script
    assert batch["jobspec"]["tasks"] == [{"command": ["flux"], "slot": "task",
                                          "count": {"per_slot": 1}}]  # fmt: skip
    assert lines[-1] == {"flush": True}
    flushes = sum(1 for x in lines if x.get("flush"))
    assert 10 < flushes < len(events)  # quiet gaps end batches; bursts share one


def test_reader_flush_rules_and_since() -> None:
    journal = str(FIXTURES / "journal.consumer.jsonl")
    every = reader("--replay", journal, "--coalesce", "0")
    assert every[2:6:2] == [x for x in every[2:6:2] if "event" in x]
    assert all(x == {"flush": True} for x in every[3:20:2])  # a flush after every event
    since = 1795274968.0
    later = [x for x in reader("--replay", journal, "--since", str(since)) if "event" in x]
    assert later and all(x["timestamp"] > since for x in later)
    assert {x["event"] for x in later} >= {"dependency-remove", "urgency", "clean"}


def test_reader_outside_flux_says_so() -> None:
    proc = subprocess.run([sys.executable, str(READER_PATH)], capture_output=True, timeout=20)
    assert proc.returncode == 1 and b"flux python" in proc.stderr
    bad = subprocess.run(
        [sys.executable, str(READER_PATH), "--replay", "/nonexistent"], capture_output=True
    )
    assert bad.returncode == 1 and b"/nonexistent" in bad.stderr


def test_the_collector_never_imports_the_reader_or_flux() -> None:
    code = (
        "import sys, collector.backends.flux as f; b = f.FluxBackend(); b.follow_command();"
        "print(sorted(m for m in sys.modules if m == 'flux' or m.startswith('flux.')"
        " or 'journal_reader' in m))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == b"[]"


def test_journal_job_ids_batches() -> None:
    def line(job: int, event: str, ts: float, **ctx) -> bytes:
        doc = {"id": encode_f58(job), "id_int": job, "event": event, "timestamp": ts,
               "context": ctx}  # fmt: skip
        return json.dumps(doc).encode() + b"\n"

    stream = [
        b'{"ready": true}\n',
        line(1, "submit", 1.0, urgency=16), line(1, "validate", 1.1), line(2, "submit", 1.2),
        b"not json at all\n", b'{"id_int": "x", "event": "submit"}\n', line(1, "depend", 1.3),
        b'{"flush": true}\n',
        line(2, "alloc", 2.0), line(3, "exception", 1.9, severity=0, type="cancel"),
        None,
        line(4, "exception", 3.0, severity=1), b'{"sentinel": true}\n',
        b'{"flush": true}\n',  # an empty batch is not yielded
        b'{"jobid_int": 5, "name": "clean", "timestamp": 4.0}',  # JournalConsumer dump form
    ]  # fmt: skip
    batches = list(journal_job_ids(stream))
    assert [list(b) for b in batches] == [
        [encode_f58(1), encode_f58(2)], [encode_f58(2), encode_f58(3)], [encode_f58(4)],
        [encode_f58(5)],
    ]  # fmt: skip
    assert all(isinstance(b, JournalBatch) for b in batches)
    assert batches[0].states == {encode_f58(1): "PRIORITY", encode_f58(2): "NEW"}
    assert batches[0].events == 4 and batches[0].last_timestamp == 1.3
    assert batches[1].states == {encode_f58(2): "RUN", encode_f58(3): "CLEANUP"}
    assert batches[1].last_timestamp == 2.0  # the newest so far, not the last read
    assert batches[2].states == {encode_f58(4): "NEW"}  # severity 1 does not end a job
    assert batches[3].states == {encode_f58(5): "INACTIVE"}
    many = [line(n, "submit", float(n)) for n in range(10)]
    assert [len(b) for b in journal_job_ids(many, max_batch=4)] == [4, 4, 2]
    assert parse_journal_line(b"[]") is None and parse_journal_line(b"{") is None
    with pytest.raises(ValueError):
        list(journal_job_ids([], max_batch=0))


def test_reader_through_the_stand_in_and_follow_command(fake: FakeFlux) -> None:
    backend = fake.backend()
    proc = subprocess.run(backend.follow_command(), capture_output=True, timeout=20, check=True)
    batches = list(backend.follow_parse(proc.stdout.splitlines(keepends=True)))
    ids = [job for batch in batches for job in batch]
    assert len(set(ids)) == 19
    assert sum(batch.events for batch in batches) == 208
    fake.set(mode="fail")
    failed = subprocess.run(backend.follow_command(), capture_output=True, timeout=20)
    assert failed.returncode == 1 and failed.stdout == b""


# End to end: real redis-server, real rq worker ------------------------------------
SITE = "flux1"


def job_finals(events: list[dict]) -> dict[str, dict]:
    finals = [e for e in events if e["kind"] == "job" and e["type"] == "final"]
    assert Counter(e["object_id"] for e in finals).most_common(1)[0][1] == 1  # once each
    return {e["object_id"]: record_of(e) for e in finals}


def check_versions(events: list[dict]) -> dict[str, list[dict]]:
    """Per object: versions 1, 2, 3... with nothing after a final; ids never repeat."""
    assert len({e["id"] for e in events}) == len(events)
    per: dict[str, list[dict]] = {}
    for e in events:
        per.setdefault(f"{e['kind']}:{e['object_id']}", []).append(e)
    for key, seq in per.items():
        assert [e["version"] for e in seq] == list(range(1, len(seq) + 1)), key
        assert all(e["type"] != "final" for e in seq[:-1]), key
    return {k.partition(":")[2]: v for k, v in per.items() if k.startswith("job:")}


def test_stages_in_order_to_final_records(fake: FakeFlux, r) -> None:
    col = Collector(fake.backend(), r, site=SITE, nodes_every=3, reconcile_every=0)  # full stats
    for stage in STAGES:
        fake.set(stage)
        col.run_cycle()
        drain(r, SITE)
    events = site_events(r, SITE)
    per_job = check_versions(events)
    finals = job_finals(events)
    assert len(per_job) == len(finals) == 19
    for job_id, record in finals.items():
        name = record["name"]
        state, code, reason = FINAL[name]
        assert (record["state"], record["exit_status"], record["reason"]) == (state, code, reason)
        stored = from_hash(r.hgetall(SiteKeys(SITE).job("root", job_id)))
        assert (stored["state"], stored.get("exit_status")) == (state, code)
    # states seen along the way, by polling
    seen = {per_job[j][0]["record"]["name"]: [e["record"]["state"] for e in per_job[j]]
            for j in per_job}  # fmt: skip
    assert seen["held"] == ["held", "completed"]
    assert seen["pendcancel"] == ["queued", "cancelled"]
    assert seen["runcancel"] == ["running", "cancelled"]
    assert seen["dependent"] == ["queued", "completed"]
    # finished before the first stat that listed it: new, then final, from that record
    exit3 = next(evs for evs in per_job.values() if evs[0]["record"]["name"] == "exit3")
    assert [(e["type"], e["record"]["state"]) for e in exit3] == [
        ("new", "failed"),
        ("final", "failed"),
    ]
    keys = SiteKeys(SITE)
    assert all(r.exists(keys.node(f"node{n}")) for n in range(4))
    assert from_hash(r.hgetall(keys.queue(ANONYMOUS_QUEUE)))["state"] == "open"


@pytest.mark.parametrize("mode", ["fail", "garbage", "hang"])
def test_a_failed_stat_changes_nothing_and_the_next_cycle_resumes(fake, r, mode) -> None:
    backend = fake.backend(timeout=10)
    col = Collector(backend, r, site=SITE)
    fake.set("03-pending")
    col.run_cycle()
    drain(r, SITE)
    before = r.xlen(SiteKeys(SITE).events)
    fake.set("05-after-running-cancel", mode=mode)
    backend.timeout = 0.5 if mode == "hang" else 10
    with pytest.raises(CycleFailed):
        col.run_cycle()
    backend.timeout = 10
    keys = SiteKeys(SITE)
    queues = [Queue(keys.rq_queue(p), connection=r) for p in ("state", "update")]
    assert [q.count for q in queues] == [0, 0]  # nothing shipped, certainly no final
    assert r.xlen(keys.events) == before
    fake.set("05-after-running-cancel")
    col.run_cycle()
    drain(r, SITE)
    assert r.xlen(keys.events) > before


RANK = {"queued": 0, "held": 0, "running": 1, "exiting": 2}


@pytest.mark.parametrize("from_journal", [False, True], ids=["listing", "journal"])
def test_journal_replay_matches_polling_without_gap_or_duplicate(fake, r, from_journal) -> None:
    """Follow mode on the recorded journal: every batch of changed jobs is
    refreshed at once (``Collector.refresh`` -> ``stat_some``), with the
    stand-in answering as Flux did right after those events, or, with
    ``from_journal``, records built from the batch's events where they are
    enough; at the moments the stages were captured, a full poll of the
    captured listing must find nothing left to ship (so a record built from
    the journal is byte for byte what flux jobs prints).  The final records
    equal those of polling alone."""
    times = stage_times()
    poll_site, push_site = "fluxpoll", "fluxpush"
    now = [0.0]  # the instance's clock: the moment the stand-in answers for

    # full stats only (the probe's window is relative to now; the stages are past)
    poll = Collector(fake.backend(), r, site=poll_site, nodes_every=1000, reconcile_every=0)
    for stage in STAGES:
        fake.set(stage)
        poll.run_cycle()
    drain(r, poll_site)  # chunks carry their cycle: applying them later is the same

    backend = fake.backend(from_journal=from_journal, clock=lambda: now[0])
    push = Collector(backend, r, site=push_site, nodes_every=1000, reconcile_every=0)
    fake.set("00-empty")
    push.run_cycle()
    # --replay: batch boundaries from the recorded times, not from when lines arrive
    replay_args = ["--replay", str(FIXTURES / "journal.consumer.jsonl")]
    out = subprocess.run(backend.follow_command() + replay_args, capture_output=True, timeout=20,
                         check=True)  # fmt: skip
    lines = out.stdout.splitlines(keepends=True)
    polls = [(t, s) for s, t in times.items() if s != "00-empty"]
    truth = {encode_f58(j.final["id"]): j for j in flux_standin.job_dirs(FIXTURES)}
    expected: dict[str, list[str]] = {}  # per job: its state at the end of each of its batches
    clock = 0.0
    refreshed = unknown = 0

    def replay(segment: list[bytes]) -> None:
        nonlocal clock, refreshed, unknown
        for batch in backend.follow_parse(segment):
            clock = max(clock, batch.last_timestamp or 0.0)
            now[0] = clock
            fake.set(time=clock)  # flux jobs now answers as at the end of this batch
            report = push.refresh(batch)
            refreshed += 1
            unknown += len(batch) - report.counts.get("jobs", 0)
            for job_id in batch:
                if (native := truth[job_id].at(clock)) is not None:
                    state = normalise_job(job_id, native)["state"]
                    if expected.setdefault(job_id, [state])[-1] != state:
                        expected[job_id].append(state)
        drain(r, push_site)  # chunks carry their cycle: applying them later is the same

    def poll_stage(stage: str) -> None:
        now[0] = times[stage]
        fake.set(stage)
        report = push.run_cycle()
        assert (report.counts["changed"], report.counts["vanished"]) == (0, 0), stage
        drain(r, push_site)

    segment: list[bytes] = []
    seen = 0.0
    for line in lines:
        doc = parse_journal_line(line) or {}
        if doc.get("timestamp") is not None:
            while polls and max(seen, doc["timestamp"]) > polls[0][0]:
                replay(segment + [b'{"flush": true}\n'])
                segment = []
                poll_stage(polls.pop(0)[1])
            seen = max(seen, doc["timestamp"])
        segment.append(line)
    replay(segment)
    for _t, stage in polls:
        poll_stage(stage)
    assert refreshed > 20 and unknown > 0  # a job is unknown until validated: harmless
    if from_journal:  # every job new: its records all from the journal, no listing
        assert backend.journal.derived > 15, (backend.journal.derived, backend.journal.listed)
        assert backend.journal.listed == 0 and backend.journal.built == backend.journal.derived
    else:
        assert backend.journal.derived == 0

    push_events, poll_events = site_events(r, push_site), site_events(r, poll_site)
    per_push, per_poll = check_versions(push_events), check_versions(poll_events)
    push_finals, poll_finals = job_finals(push_events), job_finals(poll_events)
    assert set(push_finals) == set(poll_finals) == set(expected) and len(push_finals) == 19
    ignore = {"site", "version", "epoch", "updated_at", "cycle", "observed_at"}
    for job_id in poll_finals:
        a = from_hash(r.hgetall(SiteKeys(poll_site).job("root", job_id)))
        b = from_hash(r.hgetall(SiteKeys(push_site).job("root", job_id)))
        assert {k: v for k, v in a.items() if k not in ignore} == {
            k: v for k, v in b.items() if k not in ignore
        }, job_id
        states = [e["record"]["state"] for e in per_push[job_id]]
        changes = [x for i, x in enumerate(states) if i == 0 or states[i - 1] != x]
        assert changes == expected[job_id], job_id  # every observable state, once, in order
        ranks = [3 if x in TERMINAL else RANK[x] for x in states]
        assert ranks == sorted(ranks), (job_id, states)
        assert set(e["record"]["state"] for e in per_poll[job_id]) <= set(states)
    names = {f["name"]: expected[j] for j, f in push_finals.items()}  # state changes
    assert names["held"] == ["held", "running", "completed"]  # released, ran 1 s
    assert names["pendcancel"] == ["queued", "cancelled"]
    assert names["dependent"] == ["queued", "running", "completed"]  # ran 44 ms: 2 batches
    assert names["runcancel"] == ["running", "cancelled"]  # queued 37 ms: one batch
    assert names["exit3"] == ["running", "failed"]  # lived 92 ms: batches of 0.1 s at most
    assert len(push_events) > len(poll_events)
    assert os.environ.get("JOBTAP_FAKE_FLUX")  # the stand-in, never a real flux


def test_follow_mode_lists_jobs_only_to_reconcile(fake: FakeFlux, r, tmp_path: Path) -> None:
    """The captured journal replayed live (5x its recorded pace) under the
    collector service in follow mode, every job brand new (its submit is in the
    journal, most of them live a fraction of a second): every job's record
    comes from the journal, so the stand-in's log of calls holds one ``flux
    jobs`` listing per reconciliation, the node stat's running jobs once, and
    no ``flux jobs --json ID`` and no ``--since`` probe in between."""
    import threading

    from jobtap.collector.service import CollectorService
    from sim.rig.pipeline import meta
    from sim.rig.wait import eventually

    calls = tmp_path / "calls.jsonl"
    settings = {"journal_speed": 5, "journal_clock": str(tmp_path / "clock"),
                "journal_end": "open", "call_log": str(calls)}  # fmt: skip
    fake.set(None, **settings)
    control = {"dir": str(FIXTURES), **settings}
    backend = fake.backend(clock=lambda: flux_standin.replay_time(control) or 0.0)
    assert backend.follow_pushed
    site = "fluxcalls"
    collector = Collector(backend, r, site=site, nodes_every=10**6, reconcile_every=2.0,
                          pushed=True)  # fmt: skip
    service = CollectorService(collector, interval=0.5, follow=True, backend_name="flux")
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    names = {encode_f58(j.final["id"]): j.final["name"] for j in flux_standin.job_dirs(FIXTURES)}

    def finals() -> dict[str, tuple]:
        ledger = collector.ledger.of("job") if collector.ledger else {}
        done = {j: e for j, e in ledger.items() if e.state in TERMINAL}
        assert set(done) == set(names), sorted(set(names) - set(done))
        return done

    try:
        done = eventually(finals, timeout=90, what="every job final")
    finally:
        service.stop_event.set()
        runner.join(timeout=30)
    for job_id, entry in done.items():
        assert entry.state == FINAL[names[job_id]][0], names[job_id]
    jobs_calls = [c["argv"] for c in map(json.loads, calls.open()) if c["argv"][0] == "jobs"]
    health = meta(r, site)
    listings = [a for a in jobs_calls if a == ["jobs", "-a", "-A", "--json", "-c", "0"]]
    running = [a for a in jobs_calls if "-f" in a and a[a.index("-f") + 1] == "running"]
    assert len(running) == 1  # the first cycle's node stat
    assert len(listings) == int(health["cycles_reconcile"]) >= 2
    assert len(listings) + len(running) == len(jobs_calls), jobs_calls
    assert int(health.get("cycles_pushed", 0)) > 0  # cycles in between: no listing
    assert backend.journal.listed == 0 and backend.journal.built >= len(names)
