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
from sim.rig.paths import fixtures_dir
from sim.rig.pbs_hook import at_jobobit, hook_namespace, pbs_job

FIXTURES = fixtures_dir() / "pbs"
CAPTURES = sorted(FIXTURES.glob("*.qstat*-f*.json"))
HOOK = hook_namespace()
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
