"""The cost model of the PBS stand-ins (sim/standins/pbs_standin.py and
qselect_standin.py): what each call logs it cost, part by part, against the
formula and against the real OpenPBS 23.06 figures it is calibrated on.  The
asserts read the stand-in's log (the modelled seconds), never a clock; the
calls run at a small scale of real time, which the model multiplies through."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.pbs_jobs import FINISHED, RUNNING, job_ids, write_jobs
from sim.rig.pipeline import FakePBS
from sim.standins.pbs_standin import CONNECT, QSELECT, QSELECT_ID, RECORD, THROTTLE

FIXTURES = fixtures_dir() / "pbs"
SCALE = 0.01
QSTAT_F = ["-f", "-F", "json"]
QSELECT_ALL = ["-x", "-t", "m.gt.202001010000"]  # every job: all changed since 2020


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakePBS:
    return FakePBS(tmp_path, FIXTURES, monkeypatch)


def run(program: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(FAKE_BIN / program), *args], capture_output=True, timeout=60)


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def parts_add_up(call: dict) -> None:
    """A call's seconds are its parts: the throttle, waits for ports, its
    connections and its records."""
    parts = ("throttle_seconds", "port_wait_seconds", "connect_seconds", "record_seconds")
    assert call["seconds"] == pytest.approx(sum(call[p] for p in parts), abs=1e-9)
    assert call["throttle_seconds"] == (THROTTLE * SCALE if call["throttled"] else 0.0)


@pytest.mark.parametrize("n", [0, 1, 300])
def test_a_listing_costs_one_connection_and_each_record_it_prints(fake, tmp_path, n):
    log = tmp_path / "calls.jsonl"
    live = write_jobs(FIXTURES, RUNNING, job_ids(n), tmp_path / "live.json")
    fake.set("10-busy", file=str(live), log=str(log), costs={"scale": SCALE})
    out = run("qstat", *QSTAT_F)
    (call,) = calls(log)
    assert len(json.loads(out.stdout).get("Jobs", {})) == call["records"] == n
    assert call["connections"] == 1 and not call["throttled"]
    assert call["connect_seconds"] == pytest.approx(CONNECT * SCALE)
    assert call["record_seconds"] == pytest.approx(n * RECORD * SCALE)
    parts_add_up(call)


def test_targeted_qstat_prices_the_records_it_prints_not_the_ids_it_was_given(fake, tmp_path):
    """``-t`` brings an array's subjobs, an unknown id brings nothing: 3 ids,
    6 records (``0.vm``, ``2[].vm`` and its 4 subjobs).  With ``-E`` one
    connection; without, one per id."""
    log = tmp_path / "calls.jsonl"
    fake.set("30-array-running", log=str(log), costs={"scale": SCALE})
    ids = ["0.vm", "2[].vm", "99.vm"]
    grouped = run("qstat", "-E", "-x", *QSTAT_F, "-t", *ids)
    one_by_one = run("qstat", "-x", *QSTAT_F, "-t", *ids)
    assert (grouped.returncode, one_by_one.returncode) == (0, 153)
    first, second = calls(log)
    for call, out in ((first, grouped), (second, one_by_one)):
        assert call["records"] == len(json.loads(out.stdout)["Jobs"]) == 6
        assert call["record_seconds"] == pytest.approx(6 * RECORD * SCALE)
        parts_add_up(call)
    assert (first["connections"], second["connections"]) == (1, 3)
    assert second["connect_seconds"] == pytest.approx(3 * CONNECT * SCALE)


def test_qselect_costs_its_own_call_and_each_id_it_prints(fake, tmp_path):
    """Not throttled, even right after a qstat in the same second."""
    log = tmp_path / "calls.jsonl"
    live = write_jobs(FIXTURES, RUNNING, job_ids(250), tmp_path / "live.json")
    fake.set("10-busy", file=str(live), log=str(log), costs={"scale": SCALE})
    run("qstat", *QSTAT_F)
    out = run("qselect", *QSELECT_ALL)
    qselect = calls(log)[-1]
    assert qselect["program"] == "qselect" and not qselect["throttled"]
    assert len(out.stdout.splitlines()) == qselect["records"] == 250
    assert qselect["connect_seconds"] == pytest.approx(QSELECT * SCALE)
    assert qselect["record_seconds"] == pytest.approx(250 * QSELECT_ID * SCALE)
    parts_add_up(qselect)


def test_nodes_and_queues_cost_one_connection(fake, tmp_path):
    """No measurement prices their records: one connection each."""
    log = tmp_path / "calls.jsonl"
    fake.set("10-busy", log=str(log), costs={"scale": SCALE})
    run("pbsnodes", "-av", "-F", "json")
    run("qstat", "-Q", *QSTAT_F)
    for call in calls(log):
        assert call["records"] == 0 and call["record_seconds"] == 0
        assert call["connect_seconds"] == pytest.approx(CONNECT * SCALE)
        parts_add_up(call)


def test_without_costs_the_records_are_still_counted(fake, tmp_path):
    log = tmp_path / "calls.jsonl"
    live = write_jobs(FIXTURES, RUNNING, job_ids(40), tmp_path / "live.json")
    fake.set("10-busy", file=str(live), log=str(log), costs=False)
    run("qstat", *QSTAT_F)
    run("qselect", *QSELECT_ALL)
    listing, qselect = calls(log)
    assert (listing["records"], qselect["records"]) == (40, 40)
    assert listing["seconds"] == qselect["seconds"] == 0


def test_the_model_reproduces_the_real_figures(fake, tmp_path):
    """The figures of the real OpenPBS 23.06.06 the model is calibrated on
    (sim/standins/pbs_standin.py): ``qstat -f -F json`` of 1,000 jobs 181 ms
    (401 ms throttled), ``qstat -E -x -f -F json -t`` of 1,000 ids 0.23 s,
    both within 15 %; one qselect of 1,000 jobs 18 ms."""
    log = tmp_path / "calls.jsonl"
    ids = job_ids(1000)
    live = write_jobs(FIXTURES, RUNNING, ids, tmp_path / "live.json")
    done = write_jobs(FIXTURES, FINISHED, ids, tmp_path / "done.json")
    fake.set("80-final", file=str(live), history_file=str(done), log=str(log),
             costs={"scale": SCALE})  # fmt: skip
    run("qstat", *QSTAT_F)
    run("qstat", "-E", "-x", *QSTAT_F, "-t", *ids)
    run("qselect", *QSELECT_ALL)
    listing, grouped, qselect = calls(log)
    assert listing["records"] == grouped["records"] == qselect["records"] == 1000

    def server(call: dict) -> float:  # real seconds: the call's, less a throttle
        return (call["seconds"] - call["throttle_seconds"]) / SCALE

    assert server(listing) == pytest.approx(0.181, rel=0.15)
    assert server(listing) + THROTTLE == pytest.approx(0.401, rel=0.15)
    assert server(grouped) == pytest.approx(0.23, rel=0.15)
    assert server(qselect) == pytest.approx(0.018)
