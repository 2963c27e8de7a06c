"""The PBS probe: ``qselect -x -t m.gt.T``, its parser against real OpenPBS
23.06 output (``tests/fixtures/pbs/probe``), the qselect stand-in against
the same captures, and the backend's probe through the stand-in."""

from __future__ import annotations

import calendar
import json
import os
import subprocess
import time

import pytest

from jobtap.collector.backends.base import ProbeUnavailable, StatError
from jobtap.collector.backends.pbs import PBSBackend, parse_qselect, qselect_time
from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.pipeline import FakePBS

PROBE = fixtures_dir() / "pbs" / "probe"
T = "202611230928.39"  # the capture's T (README.txt): before its jobs were submitted


def capture(name: str) -> list[str]:
    return parse_qselect((PROBE / name).read_bytes())


def test_qselect_output_is_a_list_of_job_ids():
    assert capture("qselect-x-t-m.gt.T.txt") == [
        "1149.vm", "1150.vm", "1151.vm", "1152.vm", "1153.vm", "1154[].vm",
    ]  # fmt: skip
    assert "1154[2].vm" in capture("qselect-x-T-t-m.gt.T.txt")
    assert capture("qselect-empty.txt") == []


@pytest.mark.parametrize(
    "garbage",
    ["qselect: cannot connect to server vm (errno=15010)", "1149.vm 1150.vm", "\x00\x1b[0m"],
)
def test_a_garbled_qselect_is_a_failed_stat(garbage):
    with pytest.raises(StatError, match="not a job id"):
        parse_qselect(b"1149.vm\n" + garbage.encode() + b"\n")


def utc(text: str) -> float:
    return calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S"))


def test_qselect_time_is_in_the_servers_zone_to_the_second():
    t = utc("2026-11-23 09:28:39")
    assert qselect_time(t, "UTC") == T
    assert qselect_time(t + 0.9, "UTC") == T  # whole seconds, rounded down
    assert qselect_time(t, "Europe/Paris") == "202611231028.39"


@pytest.fixture
def capture_server(tmp_path, monkeypatch) -> FakePBS:
    """The stand-in serving the captured jobs 1149-1154 as the server held them
    when the captures were taken (README.txt): 1149-1151 and the array 1154
    finished, 1152 running, 1153 held; every record changed after T.  The
    capture has records of 1149 and not of 1150-1151 (same kind of job): they
    are copies of 1149 under their own ids."""
    doc = json.loads((PROBE / "qstat-E-x-f-json-t.ids.json").read_bytes())
    jobs = doc["Jobs"]
    for other in ("1150.vm", "1151.vm"):
        jobs[other] = dict(jobs["1149.vm"])
    records = tmp_path / "jobs.json"
    records.write_text(json.dumps(doc))
    pbs = FakePBS(tmp_path, fixtures_dir() / "pbs", monkeypatch)
    changed = utc("2026-11-23 09:29:00")
    ended = [j for j, rec in jobs.items() if rec["job_state"] == "F"]
    appear, ends = dict.fromkeys(jobs, changed), dict.fromkeys(ended, changed + 1)
    pbs.set("00-empty", file=str(records), history_file=str(records), appear=appear, ends=ends)
    return pbs


def stage_jobs(stage: str) -> dict:
    return json.loads((fixtures_dir() / "pbs" / f"{stage}.qstat-t-f-x.json").read_bytes())["Jobs"]


def qselect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FAKE_BIN / "qselect", *args], capture_output=True, timeout=30)


@pytest.mark.parametrize(
    "args, name",
    [
        (("-x", "-t", f"m.gt.{T}"), "qselect-x-t-m.gt.T.txt"),
        (("-t", f"m.gt.{T}"), "qselect-t-m.gt.T.txt"),
        (("-x", "-T", "-t", f"m.gt.{T}"), "qselect-x-T-t-m.gt.T.txt"),
        (("-x", "-t", "m.gt.209901010000"), "qselect-empty.txt"),
    ],
)
def test_the_stand_in_answers_as_the_real_qselect_did(capture_server, args, name):
    out = qselect(*args)
    assert out.returncode == 0 and out.stderr == b""
    assert out.stdout == (PROBE / name).read_bytes()


def test_the_stand_in_fails_like_a_server_that_is_away(capture_server):
    capture_server.set("00-empty", mode="fail")
    out = qselect("-x", "-t", f"m.gt.{T}")
    assert out.returncode == 1 and b"cannot connect" in out.stderr and out.stdout == b""


def test_the_backends_probe_names_what_moved_since_the_last_one(tmp_path, monkeypatch):
    pbs = FakePBS(tmp_path, fixtures_dir() / "pbs", monkeypatch)
    pbs.set("10-busy")
    now = time.time()
    os.utime(pbs.control, (now - 100, now - 100))  # the server got there 100 s ago
    backend = pbs.backend(overlap=2)
    assert backend.probe(None).named == {}  # a baseline: no command
    first = backend.probe(now - 200)
    assert "3.vm" in first.named and "2[].vm" in first.named
    assert not any("[" in j and "[]" not in j for j in first.named)  # no subjobs without -T
    assert backend.probe(now - 50).named == {}  # nothing changed since
    pbs.set("20-after-qdel")  # now
    moved = backend.probe(now - 50).named
    before, after = (stage_jobs(stage) for stage in ("10-busy", "20-after-qdel"))
    no_subjobs = {j: rec for j, rec in after.items() if "[" not in j or "[]" in j}
    expected = {j for j, rec in no_subjobs.items() if before.get(j) != rec}
    assert moved and set(moved) == expected


def test_without_qselect_the_probe_is_unavailable(tmp_path):
    backend = PBSBackend(qselect=str(tmp_path / "no-qselect"), qstat=str(FAKE_BIN / "qstat"))
    with pytest.raises(ProbeUnavailable, match="command not found"):
        backend.probe(time.time())
