"""The record the PBS jobobit hook sends with its poke is the one qstat prints.

For every job of every ``qstat -f -F json`` capture of a real OpenPBS 23.06.06
(tests/fixtures/pbs, read byte for byte), :func:`pbs_job` builds the job as
``pbs.event().job`` holds it inside the server (OpenPBS
src/lib/Libpython/pbs_python_svr_internal.c and
src/modules/python/pbs/v1/_base_types.py: times as epoch ints, job_state as
the int of pbs.JOB_STATE_*, resources as pbs.pbs_resource objects with
``keys()`` and one attribute per resource, Variable_List as a dict of text,
Submit_arguments in the server's XML form, booleans as bools, other numbers
as ints, array_index as text).  The hook's functions (deploy/pbs/
jobtap_poke_hook.py, run with a stand-in of PBS's ``pbs`` module) must turn
it back into the captured record: the same fingerprint as the listing's.

For a job's end the hook runs before the server moves the job to history
(req_jobobit.c: end_job runs the jobobit hooks, then
svr_saveorpurge_finjobhist sets job_state F or X, substate, the comment's
ending, history_timestamp and mtime), so :func:`at_jobobit` undoes that step
on each captured final and the hook's :func:`final_record` must redo it
exactly.
"""

from __future__ import annotations

import json
import time

import pytest

from jobtap.collector.backends.pbs import final_from_hook, normalise_job, parse_qstat_jobs
from jobtap.collector.fingerprint import fingerprint
from tests.support.paths import fixtures_dir
from tests.support.pbs_hook import hook_namespace

FIXTURES = fixtures_dir() / "pbs"
CAPTURES = sorted(FIXTURES.glob("*.qstat*-f*.json"))
HOOK = hook_namespace()
STATES = {
    "T": 0,
    "Q": 1,
    "H": 2,
    "W": 3,
    "R": 4,
    "E": 5,
    "X": 6,
    "B": 7,
    "M": 8,
    "F": 9,
    "S": 400,
    "U": 410,
}  # pbs.JOB_STATE_* (job.h, module_pbs_v1.c)
ENDINGS = (" and finished", " and failed", " and exceeded resource ")
TZ = "UTC"  # the hook's localtime() and the collector's tz: the server's zone


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", TZ)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def captured_jobs() -> list[tuple[str, str, dict]]:
    jobs = []
    for path in CAPTURES:
        for job_id, native in parse_qstat_jobs(path.read_bytes()).items():
            jobs.append((path.name, job_id, native))
    return jobs


JOBS = captured_jobs()


class Resource:
    """pbs.pbs_resource: ``keys()`` (in the server's resource table's order,
    not the listing's) and each resource as an attribute: durations and sizes
    print as their text (pbs.duration keeps the text it was made of), numbers
    are ints."""

    def __init__(self, values: dict) -> None:
        self._values = values
        for key, value in values.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            setattr(self, key, value if number else text(value))  # -l software=true: "true"

    def keys(self) -> list[str]:
        return sorted(self._values, reverse=True)


class Queue:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


def epoch(text: str) -> int:
    return int(time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y")))


def xml_arguments(text: str) -> str:
    return "".join(f"<jsdl-hpcpa:Argument>{a}</jsdl-hpcpa:Argument>" for a in text.split(" "))


def text(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def pbs_job(native: dict):
    """The job as pbs.event().job holds it, from its qstat record."""
    job = type("job", (), {})()
    for name, value in native.items():
        if name in HOOK["TIMES"]:
            value = epoch(value)
        elif name == "job_state":
            value = STATES[value]
        elif name == "Variable_List":
            value = {k: text(v) for k, v in value.items()}
        elif isinstance(value, dict):
            value = Resource(value)
        elif name == "queue":
            value = Queue(value)
        elif name == "Submit_arguments":
            value = xml_arguments(value)
        elif value in ("True", "False"):
            value = value == "True"
        elif name in ("array_index", "Job_Name"):
            value = text(value)
        setattr(job, name, value)
    return job


def at_jobobit(native: dict) -> dict:
    """The record of a job as it stands while jobobit runs: exiting, before
    the history step (state, substate, comment ending, history_timestamp and
    mtime are not set yet)."""
    before = dict(native, job_state="E", substate=51)
    before.pop("history_timestamp", None)
    before["mtime"] = native["stime"] if "stime" in native else native["ctime"]
    comment = native.get("comment")
    if isinstance(comment, str) and " and terminated" not in comment:
        for ending in ENDINGS:
            if ending in comment:
                before["comment"] = comment[: comment.rindex(ending)]
    return before


def ended_here(job_id: str, native: dict) -> bool:
    """A capture taken while the job's record was still the one its end made
    (nothing changed it since: mtime is the obit's second; a subjob is X
    until its array ends, when the server turns every subjob F)."""
    subjob = "[" in job_id
    return (
        native.get("job_state") == ("X" if subjob else "F")
        and "Exit_status" in native
        and native.get("mtime") == native.get("obittime")
    )


@pytest.mark.parametrize(
    ("capture", "job_id", "native"), JOBS, ids=[f"{c}:{j}" for c, j, _ in JOBS]
)
def test_the_hook_prints_every_captured_job_as_qstat_does(capture, job_id, native):
    record = HOOK["job_record"](pbs_job(native))
    assert record == native
    assert list(record) == list(native)  # the order too: the fingerprint depends on it
    assert fingerprint(record) == fingerprint(native)


FINALS = [(c, j, n) for c, j, n in JOBS if ended_here(j, n) and "[]" not in j]


def test_the_captures_hold_finals_of_every_kind():
    substates = {n["substate"] for _, _, n in FINALS}
    assert substates == {91, 92, 93}
    assert {n["job_state"] for _, _, n in FINALS} == {"F", "X"}  # X: a subjob of a running array
    assert len({j for _, j, _ in FINALS}) >= 13  # jobs, each in every capture that holds it


@pytest.mark.parametrize(
    ("capture", "job_id", "native"), FINALS, ids=[f"{c}:{j}" for c, j, _ in FINALS]
)
def test_the_jobobit_record_is_the_final_qstat_prints(capture, job_id, native):
    """Built from the job as jobobit sees it, sent as JSON, accepted by the
    collector: the listing's record, so the same fingerprint and final."""
    record = HOOK["final_record"](pbs_job(at_jobobit(native)), job_id)
    data = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()
    assert len(data) <= HOOK["DEFAULTS"]["max_record"]
    got = final_from_hook(job_id, data, TZ)
    assert got == native and list(got) == list(native)
    assert fingerprint(got) == fingerprint(native)
    assert normalise_job(job_id, got, tz=TZ) == normalise_job(job_id, native, tz=TZ)


NOT_FINAL_YET = [
    (c, j, n) for c, j, n in JOBS if n["job_state"] in "FX" and (not ended_here(j, n) or "[]" in j)
]


@pytest.mark.parametrize(
    ("capture", "job_id", "native"), NOT_FINAL_YET, ids=[f"{c}:{j}" for c, j, _ in NOT_FINAL_YET]
)
def test_what_the_hook_cannot_know_is_left_to_qstat(capture, job_id, native):
    """An array parent (it never runs, no jobobit), a job deleted before it
    ran (no Exit_status: no jobobit either), a subjob changed again when its
    array ended (F instead of X, and a later mtime unless the array ended
    in the same second as the subjob: the hook saw it as X): no
    record, or one that differs from the later listing; the collector does
    not ship a job again after a final from a poke (test_follow_record)."""
    record = HOOK["final_record"](pbs_job(at_jobobit(native)), job_id)
    if record is not None:
        assert "[" in job_id and fingerprint(record) != fingerprint(native)


@pytest.mark.parametrize(
    "change",
    [
        {"job_state": "R"},
        {"substate": 42},
        {"Exit_status": "0"},
        {"history_timestamp": "1795272026"},
        {"obittime": "yesterday"},
    ],
)
def test_an_incomplete_record_is_refused(change):
    _, job_id, native = FINALS[0]
    data = json.dumps(dict(native, **change)).encode()
    assert final_from_hook(job_id, data, TZ) is None
    assert final_from_hook(job_id, b"{not json", TZ) is None
    assert final_from_hook(job_id, json.dumps(dict(native)).encode(), TZ) == native


def test_an_absent_attribute_is_absent_from_the_record():
    _, job_id, native = FINALS[0]
    smaller = {k: v for k, v in native.items() if k != "Variable_List"}
    assert "Variable_List" not in HOOK["job_record"](pbs_job(smaller))
