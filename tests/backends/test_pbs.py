"""The PBS backend against real OpenPBS 23.06 output (``tests/fixtures/pbs``):
parsers, normalisers, and ``PBSBackend`` end to end
through a stand-in for qstat/pbsnodes that replays those files."""

from __future__ import annotations

import gzip
import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from jobtap.collector.backends import make_backend
from jobtap.collector.backends.base import BadRecord, StatError
from jobtap.collector.backends.pbs import (
    QUEUE_CLOSED,
    QUEUE_OPEN,
    QUEUE_STOPPED,
    PBSBackend,
    normalise_job,
    normalise_node,
    normalise_queue,
    parse_pbs_time,
    parse_pbsnodes,
    parse_qstat_jobs,
    parse_qstat_queues,
)
from jobtap.schema import JOB_FIELDS, JOB_STATES, NODE_FIELDS, NODE_STATES, QUEUE_FIELDS
from sim.rig.paths import FAKE_BIN, fixtures_dir

FIXTURES = fixtures_dir() / "pbs"


ADDED_LATER = {"site", "version", "updated_at"}  # set by the collector and workers
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$")
JOB_FILES = sorted(
    p.name
    for p in FIXTURES.glob("*.json")
    if ".qstat" in p.name and "-f" in p.name and "-Q-" not in p.name and "-B-" not in p.name
)
STAGES = ("00-empty", "10-busy", "20-after-qdel", "30-array-running", "40-drained", "80-final")


def load(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def jobs_of(name: str, tz: str = "UTC") -> dict[str, dict]:
    return {jid: normalise_job(jid, n, tz=tz) for jid, n in parse_qstat_jobs(load(name)).items()}


def job_id_meaning() -> dict[str, str]:
    """job-ids.txt: ``simple=0.vm todelete=1.vm ...`` -> {"simple": "0.vm", ...}."""
    words = (FIXTURES / "job-ids.txt").read_text().split()
    return dict(w.split("=", 1) for w in words if "=" in w and w.split("=", 1)[1])


# Parsing ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", JOB_FILES)
def test_every_job_of_every_stage_normalises(name: str) -> None:
    natives = parse_qstat_jobs(load(name))
    assert natives == json.loads(load(name)).get("Jobs", {})
    for job_id, native in natives.items():
        record = normalise_job(job_id, native, tz="UTC")
        assert set(record) == set(JOB_FIELDS) - ADDED_LATER
        assert record["id"] == job_id and record["scheduler"] == "pbs"
        assert record["state"] in JOB_STATES
        assert record["native_state"] == native["job_state"]
        assert record["user"] in ("alice", "bob")
        assert record["native"] is native
        for field in ("submit_time", "start_time", "end_time"):
            assert record[field] is None or ISO_UTC.match(record[field]), (field, record[field])
        assert record["submit_time"] is not None
        assert isinstance(record["allocated"], list)
        assert isinstance(record["resources_used"], dict)
        assert isinstance(record["requested"], dict) and set(record["requested"]) == {
            "ncpus",
            "nodes",
            "mem",
            "walltime",
            "select",
        }


def test_job_files_cover_every_stage() -> None:
    assert {name.split(".")[0] for name in JOB_FILES} == set(STAGES)


def test_empty_server_has_no_jobs_key_and_no_jobs() -> None:
    assert b'"Jobs"' not in load("00-empty.qstat-f.json")
    assert parse_qstat_jobs(load("00-empty.qstat-f.json")) == {}
    assert parse_qstat_jobs(load("00-empty.qstat-f-x.json")) == {}


def test_bench_5000_parses_to_5000_held_jobs() -> None:
    raw = gzip.decompress(load("bench-5000.qstat-f.json.gz"))
    natives = parse_qstat_jobs(raw)
    assert len(natives) == 5000
    states = {normalise_job(jid, n, tz="UTC")["state"] for jid, n in natives.items()}
    assert states == {"held"}


HALF = load("10-busy.qstat-f.json")[: len(load("10-busy.qstat-f.json")) // 2]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "printed nothing"),
        (b"  \n", "printed nothing"),
        (b"qstat: cannot connect to server", "not JSON"),
        (HALF, "not JSON"),
        (b"[]", "not an object"),
        (b"null", "not an object"),
        (b"42", "not an object"),
        (b'{"Jobs": []}', "'Jobs' as list"),
        (b'{"Jobs": "1.vm"}', "'Jobs' as str"),
        (b'{"Jobs": {}} trailing', "not JSON"),
    ],
)
def test_bad_qstat_output_is_a_stat_error(raw: bytes, message: str) -> None:
    with pytest.raises(StatError, match=re.escape(message)) as info:
        parse_qstat_jobs(raw)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("qstat printed")


def test_bad_nodes_and_queues_output_is_a_stat_error() -> None:
    with pytest.raises(StatError, match="pbsnodes printed 'nodes' as int"):
        parse_pbsnodes(b'{"nodes": 1}')
    with pytest.raises(StatError, match="qstat -Q printed output that is not JSON"):
        parse_qstat_queues(load("10-busy.qstat-Q-f.json")[:100])
    assert parse_pbsnodes(b'{"pbs_server": "vm"}') == {}
    assert parse_qstat_queues(b'{"pbs_server": "vm"}') == {}


def test_invalid_utf8_in_one_job_does_not_sink_the_stat() -> None:
    raw = load("10-busy.qstat-f.json").replace(b'"todelete"', b'"tod\xe9lete"')
    natives = parse_qstat_jobs(raw)
    assert len(natives) == len(parse_qstat_jobs(load("10-busy.qstat-f.json")))
    assert natives["1.vm"]["Job_Name"] == "tod\ufffdlete"


def test_non_object_records_are_returned_and_rejected_one_by_one() -> None:
    natives = parse_qstat_jobs(b'{"Jobs": {"1.vm": "junk", "2.vm": {"job_state": "Q"}}}')
    assert natives == {"1.vm": "junk", "2.vm": {"job_state": "Q"}}
    with pytest.raises(BadRecord, match="is a str, expected an object"):
        normalise_job("1.vm", natives["1.vm"])
    with pytest.raises(BadRecord, match="no owner"):
        normalise_job("2.vm", natives["2.vm"])


# Job states ------------------------------------------------------------------------
def test_state_table_80_final() -> None:
    ids = job_id_meaning()
    jobs = jobs_of("80-final.qstat-t-f-x.json")
    expected = {
        "simple": ("completed", 0, "finished"),
        "todelete": ("cancelled", 271, "terminated by bob@vm"),
        "array": ("completed", 0, "finished"),
        "exit3": ("failed", 3, "failed"),
        "held": ("completed", 0, "finished"),
        "waitres": ("cancelled", None, "terminated"),
        "never": ("cancelled", None, "terminated"),
        "dep": ("completed", 0, "finished"),
        "walltime": ("failed", -29, "exceeded resource walltime"),
        "qdel_queued": ("cancelled", None, "terminated"),
        "odd2": ("completed", 0, "finished"),
    }
    for meaning, (state, exit_status, reason) in expected.items():
        record = jobs[ids[meaning]]
        got = (record["state"], record["exit_status"], record["reason"])
        assert got == (state, exit_status, reason), meaning
    for index in (1, 2, 3, 4):
        assert jobs[f"2[{index}].vm"]["state"] == "completed"
    future = jobs["5057.vm"]
    assert future["state"] == "waiting" and future["native_state"] == "W"
    assert future["reason"] == "waiting until 2026-11-21T15:08:00+00:00"
    assert future["exit_status"] is None and future["end_time"] is None


def test_state_table_10_busy() -> None:
    ids = job_id_meaning()
    jobs = jobs_of("10-busy.qstat-t-f-x.json")
    expected = {
        "simple": "completed",
        "todelete": "running",
        "array": "running",
        "exit3": "queued",
        "held": "held",
        "waitres": "queued",
        "never": "queued",
        "dep": "queued",
        "walltime": "queued",
        "qdel_queued": "queued",
        "odd2": "queued",
    }
    assert {m: jobs[ids[m]]["state"] for m in expected} == expected
    assert jobs[ids["array"]]["native_state"] == "B"
    assert jobs["2[1].vm"]["state"] == "running"
    assert [jobs[f"2[{i}].vm"]["state"] for i in (2, 3, 4)] == ["queued"] * 3
    assert jobs[ids["held"]]["reason"] == "held by user (Hold_Types=u)"
    assert jobs[ids["never"]]["reason"].startswith("Can Never Run: Insufficient amount")
    assert jobs[ids["exit3"]]["reason"] == "Not Running: Not enough free nodes available"
    assert jobs[ids["todelete"]]["reason"] is None
    assert jobs[ids["todelete"]]["comment"].startswith("Job run at")


def test_finished_subjob_x_and_queued_subjobs_of_a_running_array() -> None:
    jobs = jobs_of("30-array-running.qstat-t-f.json")
    done = jobs["2[1].vm"]
    assert (done["native_state"], done["state"], done["exit_status"]) == ("X", "completed", 0)
    assert done["reason"] == "finished"
    queued = jobs["2[3].vm"]
    # Queued subjobs carry the parent's Exit_status 0 and stime; neither is theirs.
    assert queued["native"]["Exit_status"] == 0 and "stime" in queued["native"]
    assert (queued["state"], queued["exit_status"], queued["start_time"]) == ("queued", None, None)
    assert jobs["2[].vm"]["exit_status"] is None  # B with Exit_status 0: still running


def test_cancelled_while_running_is_still_running_until_it_ends() -> None:
    running = jobs_of("20-after-qdel.qstat-f.json")["1.vm"]
    assert running["state"] == "running"
    assert running["comment"].endswith("and terminated by bob@vm")
    assert jobs_of("30-array-running.qstat-f-x.json")["1.vm"]["state"] == "cancelled"


@pytest.mark.parametrize(
    ("letter", "substate", "exit_status", "state"),
    [
        ("Q", 10, None, "queued"),
        ("T", 0, None, "queued"),
        ("H", 20, None, "held"),
        ("W", 30, None, "waiting"),
        ("R", 42, None, "running"),
        ("B", 70, None, "running"),
        ("S", 43, None, "suspended"),
        ("U", 45, None, "suspended"),
        ("E", 50, 0, "exiting"),
        ("F", 92, 0, "completed"),
        ("F", 92, 1, "failed"),
        ("F", 92, None, "cancelled"),
        ("F", 91, 0, "cancelled"),
        ("F", 93, 0, "failed"),
        ("X", 92, 0, "completed"),
        ("X", 91, 271, "cancelled"),
        ("M", 0, None, "unknown"),
        ("Z", 0, None, "unknown"),
    ],
)
def test_state_letters(letter: str, substate: int, exit_status: int | None, state: str) -> None:
    native = {"Job_Owner": "bob@vm", "job_state": letter, "substate": substate}
    if exit_status is not None:
        native["Exit_status"] = exit_status
    assert normalise_job("7.vm", native)["state"] == state


# Job fields ------------------------------------------------------------------------
def test_fields_of_a_finished_job() -> None:
    job = jobs_of("80-final.qstat-t-f-x.json")["0.vm"]
    assert {k: job[k] for k in ("user", "group", "account", "name", "queue", "priority")} == {
        "user": "alice",
        "group": "alice",
        "account": "_pbs_project_default",
        "name": "simple",
        "queue": "workq",
        "priority": 0,
    }
    assert job["submit_time"] == "2026-11-21T14:40:20+00:00"
    assert job["start_time"] == "2026-11-21T14:40:20+00:00"
    assert job["end_time"] == "2026-11-21T14:40:26+00:00"
    assert job["requested"] == {
        "ncpus": 1,
        "nodes": 1,
        "mem": None,
        "walltime": None,
        "select": "1:ncpus=1",
    }
    assert job["allocated"] == ["vm"]
    assert job["resources_used"]["walltime"] == "00:00:05"
    assert job["array_parent"] is None and job["array_index"] is None


def test_account_and_names_that_json_could_mistype() -> None:
    jobs = jobs_of("80-final.qstat-t-f-x.json")
    assert (jobs["13.vm"]["name"], jobs["13.vm"]["account"]) == ("0123", "42")
    assert jobs["14.vm"]["name"] == "true"
    assert jobs["5055.vm"]["requested"]["mem"] == "100mb"
    native = {"Job_Owner": "a@h", "job_state": "Q", "Account_Name": 42, "Job_Name": True}
    record = normalise_job("1.h", native)
    assert (record["account"], record["name"]) == ("42", "true")


def test_deleted_while_queued_ends_at_mtime() -> None:
    job = jobs_of("80-final.qstat-t-f-x.json")["9.vm"]
    assert "obittime" not in job["native"]
    assert job["end_time"] == "2026-11-21T14:40:28+00:00"
    assert job["start_time"] is None and job["allocated"] == []


def test_subjob_fields() -> None:
    busy = jobs_of("10-busy.qstat-t-f.json")
    first = busy["2[1].vm"]
    assert (first["array_parent"], first["array_index"]) == ("2[].vm", 1)
    # Queued subjobs have no array_id/array_index in the output: taken from the id.
    assert "array_id" not in busy["2[4].vm"]["native"]
    assert (busy["2[4].vm"]["array_parent"], busy["2[4].vm"]["array_index"]) == ("2[].vm", 4)
    assert (busy["2[].vm"]["array_parent"], busy["2[].vm"]["array_index"]) == (None, None)
    final = jobs_of("80-final.qstat-t-f-x.json")
    assert (final["5058[10].vm"]["array_parent"], final["5058[10].vm"]["array_index"]) == (
        "5058[].vm",
        10,
    )


def test_times_follow_the_server_zone() -> None:
    native = parse_qstat_jobs(load("80-final.qstat-f-x.json"))["0.vm"]
    paris = normalise_job("0.vm", native, tz="Europe/Paris")
    assert paris["submit_time"] == "2026-11-21T13:40:20+00:00"
    local = normalise_job("0.vm", native)  # None: this machine's zone
    assert (
        datetime.fromisoformat(local["submit_time"])
        == datetime(2026, 11, 21, 14, 40, 20).astimezone()
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Sat Nov 21 14:40:20 2026", "2026-11-21T14:40:20+00:00"),
        ("Sun Nov  1 09:05:00 2026", "2026-11-01T09:05:00+00:00"),
        (1795272612, "2026-11-21T14:50:12+00:00"),
        ("Sat Foo 21 14:40:20 2026", None),
        ("Sat Nov 21 25:40:20 2026", None),
        ("yesterday", None),
        ("", None),
        (None, None),
        ([], None),
        (True, None),
    ],
)
def test_pbs_times(value: object, expected: str | None) -> None:
    assert parse_pbs_time(value, "UTC") == expected


def test_unparseable_times_are_none_not_errors() -> None:
    native = {"Job_Owner": "bob@vm", "job_state": "R", "ctime": "soon", "stime": 12.5e99}
    record = normalise_job("1.vm", native)
    assert (record["submit_time"], record["start_time"]) == (None, None)


def test_allocated_hosts_from_exec_host() -> None:
    native = {"Job_Owner": "bob@vm", "job_state": "R", "exec_host": "vm/1+n2/0*2+vm/0"}
    assert normalise_job("1.vm", native)["allocated"] == ["vm", "n2"]


# Bad records -----------------------------------------------------------------------
GOOD = {"Job_Owner": "bob@vm", "job_state": "Q"}


@pytest.mark.parametrize(
    "job_id",
    ["", "1.vm\n", "1.vm\x00", "1\t.vm", "1 .vm", "9" * 300 + ".vm", None, 7],
)
def test_hostile_ids_are_bad_records(job_id: object) -> None:
    with pytest.raises(BadRecord):
        normalise_job(job_id, dict(GOOD))  # type: ignore[arg-type]
    with pytest.raises(BadRecord):
        normalise_node(job_id, {"state": "free"})  # type: ignore[arg-type]
    with pytest.raises(BadRecord):
        normalise_queue(job_id, {"enabled": "True"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("native", "message"),
    [
        (["not", "a", "dict"], "expected an object"),
        (None, "expected an object"),
        ({"job_state": "Q"}, "no owner"),
        ({"Job_Owner": "@vm", "job_state": "Q"}, "no owner"),
        ({"Job_Owner": 5, "job_state": "Q"}, "no owner"),
        ({"Job_Owner": "bob smith@vm", "job_state": "Q"}, "job owner"),
        ({"Job_Owner": "bob@vm"}, "job_state missing"),
        ({"Job_Owner": "bob@vm", "job_state": 1}, "job_state missing or not a string"),
        ({**GOOD, "Job_Name": {"a": 1}}, "Job_Name is a dict"),
        ({**GOOD, "comment": "x" * 70000}, "comment longer than"),
        ({**GOOD, "Resource_List": "ncpus=1"}, "Resource_List is a str"),
    ],
)
def test_unusable_job_records(native: object, message: str) -> None:
    with pytest.raises(BadRecord, match=re.escape(message)):
        normalise_job("1.vm", native)  # type: ignore[arg-type]


def test_owner_falls_back_to_euser() -> None:
    assert normalise_job("1.vm", {"euser": "carol", "job_state": "Q"})["user"] == "carol"


# Nodes and queues ------------------------------------------------------------------
@pytest.mark.parametrize("stage", STAGES)
def test_nodes_of_every_stage_normalise(stage: str) -> None:
    nodes = parse_pbsnodes(load(f"{stage}.pbsnodes-av.json"))
    assert list(nodes) == ["vm"]
    record = normalise_node("vm", nodes["vm"])
    assert set(record) == set(NODE_FIELDS) - ADDED_LATER
    assert record["state"] in NODE_STATES


def test_busy_and_free_node() -> None:
    busy = normalise_node("vm", parse_pbsnodes(load("10-busy.pbsnodes-av.json"))["vm"])
    assert (busy["state"], busy["native_state"]) == ("busy", "job-busy")
    assert busy["jobs"] == ["2[1].vm", "1.vm"]
    assert busy["resources"]["assigned"] == {"ncpus": 2}
    assert busy["resources"]["available"]["ncpus"] == 2
    assert busy["reason"] is None
    # 40-drained: the README says "node offline", but pbsnodes shows it free again.
    drained = normalise_node("vm", parse_pbsnodes(load("40-drained.pbsnodes-av.json"))["vm"])
    assert (drained["state"], drained["jobs"], drained["resources"]["assigned"]) == (
        "free",
        [],
        {},
    )


@pytest.mark.parametrize(
    ("native_state", "state"),
    [
        ("free", "free"),
        ("job-busy", "busy"),
        ("job-exclusive", "busy"),
        ("resv-exclusive", "busy"),
        ("offline", "offline"),
        ("offline,job-busy", "offline"),
        ("down,offline", "down"),
        ("state-unknown,down", "down"),
        ("stale", "down"),
        ("unresolvable", "down"),
        ("provisioning", "unknown"),
    ],
)
def test_node_states(native_state: str, state: str) -> None:
    native = {"state": native_state, "comment": "fan broken"}
    record = normalise_node("n1", native)
    assert (record["state"], record["native_state"], record["reason"]) == (
        state,
        native_state,
        "fan broken",
    )


def test_node_jobs_in_the_old_string_form_and_bad_node_records() -> None:
    native = {"state": "job-busy", "jobs": "1.vm/0, 1.vm/1, 2[3].vm/0"}
    assert normalise_node("n1", native)["jobs"] == ["1.vm", "2[3].vm"]
    with pytest.raises(BadRecord, match="node state"):
        normalise_node("n1", {"jobs": []})
    with pytest.raises(BadRecord, match="expected an object"):
        normalise_node("n1", "free")  # type: ignore[arg-type]
    with pytest.raises(BadRecord, match="jobs is a int"):
        normalise_node("n1", {"state": "free", "jobs": 3})


@pytest.mark.parametrize("stage", ("10-busy", "40-drained", "80-final"))
def test_queues_normalise(stage: str) -> None:
    queues = {
        name: normalise_queue(name, native)
        for name, native in parse_qstat_queues(load(f"{stage}.qstat-Q-f.json")).items()
    }
    assert set(queues) == {"workq", "R11"}
    for record in queues.values():
        assert set(record) == set(QUEUE_FIELDS) - ADDED_LATER
    workq, resv = queues["workq"], queues["R11"]
    assert (workq["state"], workq["native_state"]) == (QUEUE_OPEN, "enabled=True started=True")
    assert (resv["state"], resv["native_state"]) == (QUEUE_STOPPED, "enabled=True started=False")
    assert resv["resources"] == {"available": {"ncpus": 1}, "max": {"ncpus": 1}}
    assert "assigned" in workq["resources"] and "max" not in workq["resources"]


def test_queue_counts() -> None:
    native = parse_qstat_queues(load("10-busy.qstat-Q-f.json"))["workq"]
    assert normalise_queue("workq", native)["counts"] == {
        "transit": 0,
        "queued": 7,
        "held": 1,
        "waiting": 0,
        "running": 2,
        "exiting": 0,
        "begun": 1,
        "total": 11,
    }


def test_closed_queue() -> None:
    record = normalise_queue("old", {"enabled": "False", "started": "True", "total_jobs": 3})
    assert (record["state"], record["counts"]) == (QUEUE_CLOSED, {"total": 3})


# PBSBackend through the stand-in ---------------------------------------------------
class Fake:
    """Writes the stand-in's control file; ``set()`` changes it between cycles."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.control: dict = {"dir": str(FIXTURES), "stage": "10-busy", "mode": "ok"}
        self.write()

    def set(self, **changes: object) -> None:
        self.control.update(changes)
        self.write()

    def write(self) -> None:
        self.path.write_text(json.dumps(self.control))


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    monkeypatch.setenv("JOBTAP_FAKE_PBS", str(tmp_path / "control.json"))
    monkeypatch.setenv("JOBTAP_FAKE_PYTHON", sys.executable)
    return Fake(tmp_path / "control.json")


def backend(**options: object) -> PBSBackend:
    options.setdefault("tz", "UTC")
    options.setdefault("timeout", 10)
    return PBSBackend(
        qstat=str(FAKE_BIN / "qstat"),
        pbsnodes=str(FAKE_BIN / "pbsnodes"),
        **options,  # type: ignore[arg-type]
    )


def test_stat_jobs_follows_the_server_between_cycles(fake: Fake) -> None:
    pbs = backend()
    busy = pbs.stat_jobs()
    assert busy.keys() == parse_qstat_jobs(load("10-busy.qstat-t-f.json")).keys()
    assert "2[1].vm" in busy
    fake.set(stage="80-final")
    assert list(pbs.stat_jobs()) == ["5057.vm"]
    fake.set(stage="00-empty")
    assert pbs.stat_jobs() == {}


def test_stat_jobs_without_subjobs(fake: Fake) -> None:
    jobs = backend(subjobs=False).stat_jobs()
    assert "2[].vm" in jobs and not any("[" in j and "[]" not in j for j in jobs)
    assert jobs["2[].vm"]["job_state"] == "Q"  # the same moment printed without -t


def test_stat_nodes_and_queues(fake: Fake) -> None:
    pbs = backend()
    assert pbs.normalise_node("vm", pbs.stat_nodes()["vm"])["state"] == "busy"
    assert pbs.normalise_queue("workq", pbs.stat_queues()["workq"])["counts"]["total"] == 11
    fake.set(stage="30-array-running")  # has no qstat -Q file: the stand-in uses 10-busy's
    assert pbs.stat_queues().keys() == {"workq", "R11"}


def test_backend_normalises_with_its_zone_and_scheduler_name(fake: Fake) -> None:
    pbs = backend(tz="Europe/Paris", scheduler="pbs-prod")
    record = pbs.normalise_job("1.vm", pbs.stat_jobs()["1.vm"])
    assert record["scheduler"] == "pbs-prod"
    assert record["submit_time"] == "2026-11-21T13:40:20+00:00"


def test_stat_failure_is_a_stat_error(fake: Fake) -> None:
    fake.set(mode="fail")
    pbs = backend()
    with pytest.raises(StatError, match=r"qstat exited with status 1: .*cannot connect"):
        pbs.stat_jobs()
    with pytest.raises(StatError, match=r"pbsnodes exited with status 1"):
        pbs.stat_nodes()
    with pytest.raises(StatError, match="exited with status 1"):
        pbs.history(["0.vm"])


def test_one_program_failing_alone(fake: Fake) -> None:
    fake.set(modes={"pbsnodes": "fail"})
    pbs = backend()
    assert "1.vm" in pbs.stat_jobs()
    with pytest.raises(StatError, match="pbsnodes"):
        pbs.stat_nodes()


def test_garbage_output_is_a_stat_error(fake: Fake) -> None:
    fake.set(mode="garbage")
    with pytest.raises(StatError, match="qstat printed output that is not JSON"):
        backend().stat_jobs()
    with pytest.raises(StatError, match="pbsnodes printed output that is not JSON"):
        backend().stat_nodes()


def test_hung_command_times_out(fake: Fake) -> None:
    fake.set(mode="hang")
    started = time.monotonic()
    with pytest.raises(StatError, match="timed out"):
        backend(timeout=1).stat_jobs()
    assert time.monotonic() - started < 3


def test_empty_server(fake: Fake) -> None:
    fake.set(mode="empty")
    pbs = backend()
    assert (pbs.stat_jobs(), pbs.stat_nodes(), pbs.stat_queues()) == ({}, {}, {})


def test_missing_command(fake: Fake, tmp_path: Path) -> None:
    pbs = PBSBackend(qstat=str(tmp_path / "no-such-qstat"), pbsnodes=str(tmp_path / "nope"))
    with pytest.raises(StatError, match="command not found"):
        pbs.stat_jobs()
    with pytest.raises(StatError, match="command not found"):
        pbs.stat_nodes()
    with pytest.raises(StatError, match="command not found"):
        pbs.history(["1.vm"])


def test_prefix_runs_the_command_through_it(fake: Fake) -> None:
    pbs = backend(prefix="env JOBTAP_UNUSED=1")
    assert pbs.prefix == ["env", "JOBTAP_UNUSED=1"]
    assert "1.vm" in pbs.stat_jobs()
    assert pbs.command(["qstat", "2[1].vm"]) == ["qstat", "2[1].vm"]


def test_ssh_prefix_quotes_the_words() -> None:
    pbs = PBSBackend(prefix="/usr/bin/ssh -o BatchMode=yes head1")
    assert pbs.command(["qstat", "-f", "2[1].vm"]) == ["qstat", "-f", "'2[1].vm'"]


def test_history_returns_known_ids_and_omits_unknown_ones(fake: Fake) -> None:
    fake.set(stage="80-final")
    pbs = backend()
    found = pbs.history(["0.vm", "1.vm", "2[1].vm", "99.vm", "2[].vm"])
    assert set(found) == {"0.vm", "1.vm", "2[1].vm", "2[].vm"}  # no 2[2].vm: not asked
    states = {jid: pbs.normalise_job(jid, n)["state"] for jid, n in found.items()}
    assert states == {
        "0.vm": "completed",
        "1.vm": "cancelled",
        "2[1].vm": "completed",
        "2[].vm": "completed",
    }
    assert pbs.history(["99.vm", "98.vm"]) == {}
    assert pbs.history([]) == {}


def test_history_in_batches_and_skips_ids_that_are_not_ids(fake: Fake) -> None:
    fake.set(stage="80-final")
    ids = ["0.vm", "1.vm", "3.vm", "77.vm", "8.vm", "9.vm", "10.vm", "0.vm"]
    found = backend(history_batch=2).history([*ids, "-x", "bad id", "x" * 300])
    assert list(found) == ["0.vm", "1.vm", "3.vm", "8.vm", "9.vm", "10.vm"]


def test_history_asks_again_when_qstat_prints_only_the_first_job(fake: Fake) -> None:
    fake.set(stage="80-final", mode="first-only")
    found = backend().history(["0.vm", "99.vm", "3.vm", "8.vm"])
    assert set(found) == {"0.vm", "3.vm", "8.vm"}


def test_history_with_garbage_is_a_stat_error(fake: Fake) -> None:
    fake.set(stage="80-final", mode="garbage")
    with pytest.raises(StatError, match="not JSON"):
        backend().history(["0.vm"])


def test_make_backend_builds_a_pbs_backend() -> None:
    pbs = make_backend("pbs", prefix="ssh head1", tz="UTC", subjobs=False)
    assert isinstance(pbs, PBSBackend)
    assert (pbs.prefix, pbs.tz, pbs.subjobs) == (["ssh", "head1"], "UTC", False)
    assert pbs.scheduler == "pbs"


def test_bad_options() -> None:
    with pytest.raises(ValueError):
        PBSBackend(history_batch=0)
    with pytest.raises(Exception, match="Nowhere/Land"):
        PBSBackend(tz="Nowhere/Land")


def test_bench_file_through_the_stand_in(fake: Fake) -> None:
    fake.set(file=str(FIXTURES / "bench-5000.qstat-f.json.gz"))
    assert len(backend().stat_jobs()) == 5000
