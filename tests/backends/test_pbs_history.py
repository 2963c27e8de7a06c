"""PBS history of many jobs: one ``qstat -E`` for all of them, and calls planned
around qstat's same-second throttle.  Through the qstat stand-in, which copies
the real costs (one connection per id without ``-E``, ports running out, the
200 ms throttle, each record printed; sim/standins/pbs_standin.py), so a
regression shows in what the calls cost, not only in what they print."""

from __future__ import annotations

import json
import math
import subprocess
import time
from pathlib import Path

import pytest

from jobtap.collector.backends.pacer import SameSecondPacer
from jobtap.collector.cycle import Collector
from jobtap.schema import COMPLETED
from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.pbs_jobs import FINISHED, RUNNING, job_ids, write_jobs
from sim.rig.pipeline import FakePBS, drain, site_events
from sim.standins.pbs_standin import CONNECT, RECORD, THROTTLE

FIXTURES = fixtures_dir() / "pbs"
SITE = "pbshist"


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakePBS:
    return FakePBS(tmp_path, FIXTURES, monkeypatch)


def test_a_thousand_vanished_jobs_resolved_by_one_grouped_call(fake, tmp_path, r):
    """The end of a 1,000-job array: the live list loses them all at once, and
    history gives every final in one ``qstat -E -x`` over one connection."""
    ids = job_ids(1000)
    live = write_jobs(FIXTURES, RUNNING, ids, tmp_path / "live.json")
    done = write_jobs(FIXTURES, FINISHED, ids, tmp_path / "done.json")
    log = tmp_path / "calls.jsonl"
    fake.set("80-final", file=str(live), history_file=str(done), log=str(log))
    col = Collector(fake.backend(), r, site=SITE, nodes_every=10**6, reconcile_every=0)  # full
    col.run_cycle(with_nodes=False)
    fake.set("80-final", file=str(write_jobs(FIXTURES, RUNNING, [], tmp_path / "none.json")),
             history_file=str(done), log=str(log))  # fmt: skip
    before = len(calls(log))
    report = col.run_cycle(with_nodes=False)
    history = [c for c in calls(log)[before:] if c["program"] == "qstat" and "-x" in c["args"]]
    assert len(history) == 1, history
    assert "-E" in history[0]["args"] and history[0]["connections"] == 1
    assert report.counts["finalised"] == 1000 and "kept" not in report.counts
    print(f"\nhistory of 1,000 vanished jobs: {report.timings['history']:.3f} s (one qstat -E)")
    drain(r, SITE)
    finals = [e for e in site_events(r, SITE) if e["type"] == "final"]
    assert len(finals) == 1000 and {e["record"]["state"] for e in finals} == {COMPLETED}


def test_without_grouping_the_same_history_costs_a_connection_per_id(fake, tmp_path):
    """What the stand-in charges for the old way (``qstat -x`` without ``-E``):
    1,000 connections, the ports run out, the retries wait; at real scale
    well over a minute, against one connection with ``-E``.  (Run at 1/1000 of
    real time; the stand-in's log reports the costs at that scale.)"""
    ids = job_ids(1000)
    done = write_jobs(FIXTURES, FINISHED, ids, tmp_path / "done.json")
    log = tmp_path / "calls.jsonl"
    scale = 0.001
    fake.set("80-final", history_file=str(done), log=str(log), costs={"scale": scale})
    old = fake.backend(grouped=False).history(ids)
    new = fake.backend().history(ids)
    assert old.keys() == new.keys() == set(ids)
    ungrouped, grouped = calls(log)
    assert "-E" not in ungrouped["args"] and "-E" in grouped["args"]
    assert (ungrouped["connections"], grouped["connections"]) == (1000, 1)
    assert ungrouped["port_waits"] > 0 and grouped["port_waits"] == 0
    assert ungrouped["seconds"] / scale > 60 > 1 > grouped["seconds"] / scale


def test_unknown_ids_are_left_out_silently_with_grouping(fake, tmp_path):
    log = tmp_path / "calls.jsonl"
    fake.set("80-final", log=str(log))
    found = fake.backend().history(["0.vm", "99.vm", "3.vm", "98.vm"])
    assert set(found) == {"0.vm", "3.vm"}
    assert len(calls(log)) == 1  # two came back: the server prints several, no second try


def test_first_only_servers_are_still_asked_again_with_grouping(fake, tmp_path):
    """openpbs/openpbs#2672: only the first job printed.  With ``-E`` unknown ids
    are not reported, so the ids still missing are asked for until a call
    brings nothing new."""
    log = tmp_path / "calls.jsonl"
    fake.set("80-final", mode="first-only", log=str(log))
    found = fake.backend().history(["0.vm", "99.vm", "3.vm", "8.vm"])
    assert set(found) == {"0.vm", "3.vm", "8.vm"}
    assert len(calls(log)) == 4  # 0, then 3, then 8, then nothing for 99


def test_grouped_history_reads_the_real_capture() -> None:
    """The real ``qstat -E -x -f -F json -t`` answer (unknown id left out) parses
    to the jobs asked for plus the array's subjobs."""
    from jobtap.collector.backends.pbs import parse_qstat_jobs

    probe = FIXTURES / "probe"
    jobs = parse_qstat_jobs((probe / "qstat-E-x-f-json-t.ids.json").read_bytes())
    assert set(jobs) == {"1149.vm", "1152.vm", "1153.vm", "1154[].vm", "1154[1].vm",
                         "1154[2].vm", "1154[3].vm"}  # fmt: skip
    assert (probe / "qstat-E-x-f-json-t.ids.stderr").read_text() == ""


# The same-second throttle -----------------------------------------------------------
def test_pacer_waits_for_the_next_second_only_when_that_is_cheaper() -> None:
    clock = [100.10]
    waited: list[float] = []
    pacer = SameSecondPacer(0.2, clock=lambda: clock[0], sleep=waited.append)
    with pacer.call():  # the first call: nothing to wait for
        clock[0] = 100.30
    assert pacer.last == 100.30 and not waited
    clock[0] = 100.50  # same second, 0.5 s to the next: the throttle (0.2) is cheaper
    assert pacer.before_call() == 0
    clock[0] = 100.85  # same second, 0.15 s to the next: wait for it
    assert math.isclose(pacer.before_call(), 0.152, abs_tol=1e-9) and pacer.waits == 1
    assert math.isclose(waited[0], 0.152, abs_tol=1e-9)
    pacer.last = 100.99  # the previous call ended in another second
    clock[0] = 101.85
    assert pacer.before_call() == 0
    assert SameSecondPacer(0).delay(5.99) == 0  # no throttle, never a wait
    with pytest.raises(ValueError):
        SameSecondPacer(-1)


def start_at_fraction(fraction: float) -> None:
    """Begin the scenario at ``fraction`` of a wall-clock second."""
    now = time.time()
    time.sleep((math.floor(now) + fraction - now) % 1.0)


def test_the_stand_in_throttles_a_second_qstat_in_the_same_second(fake, tmp_path):
    """A qstat is throttled when, and only when, the one before it began in the
    same wall-clock second.  Two back to back from early in a second share it,
    unless a busy machine starts the second one in the next second: then the
    pair is tried again (each try begins in a new second)."""
    log = tmp_path / "calls.jsonl"
    fake.set("10-busy", log=str(log))
    qstat = [str(FAKE_BIN / "qstat"), "-f", "-F", "json"]
    for _attempt in range(5):
        start_at_fraction(0.05)
        subprocess.run(qstat, capture_output=True, check=True, timeout=10)
        subprocess.run(qstat, capture_output=True, check=True, timeout=10)
        first, second = calls(log)[-2:]
        assert not first["throttled"]
        if int(first["start"]) == int(second["start"]):
            break
        assert not second["throttled"]
    else:
        pytest.fail("two qstat back to back never began in the same second in 5 tries")
    assert second["throttled"] and second["throttle_seconds"] == THROTTLE
    # 200 ms of throttle on top of the call's own cost: a connection and its records
    own = [CONNECT + call["records"] * RECORD for call in (first, second)]
    assert first["seconds"] == pytest.approx(own[0])
    assert second["seconds"] == pytest.approx(THROTTLE + own[1])


def test_a_wait_for_the_next_second_avoids_the_throttle(fake, tmp_path):
    """When the pacer waits, the call it delayed is never throttled.  (It waits
    only when the previous call ended late in a second: the scenario is aimed
    at that, from how long a call takes on this machine right now.)"""
    log = tmp_path / "calls.jsonl"
    fake.set("80-final", log=str(log))
    pbs = fake.backend()
    took = 0.1
    for _attempt in range(10):
        start_at_fraction(max(0.0, 0.9 - took))
        t0 = time.monotonic()
        pbs.stat_jobs()
        took = time.monotonic() - t0
        waits = pbs.pacer.waits
        pbs.history(["0.vm", "3.vm"])
        if pbs.pacer.waits > waits:
            break
    else:
        pytest.fail("the pacer never had to wait in 10 tries")
    assert not calls(log)[-1]["throttled"]


def test_early_in_a_second_the_throttle_is_paid_rather_than_waited_out(fake, tmp_path):
    """Two calls from early in a second: the pacer does not wait, the second
    is throttled.  A busy machine can end the first call late in the second, or
    start the second in the next one (nothing to test): then the pair is tried
    again."""
    log = tmp_path / "calls.jsonl"
    fake.set("80-final", log=str(log))
    pbs = fake.backend()
    for _attempt in range(5):
        start_at_fraction(0.05)
        pbs.stat_jobs()
        waits = pbs.pacer.waits
        pbs.history(["0.vm", "3.vm"])
        listing, history = calls(log)[-2:]
        if int(listing["start"]) == int(history["start"]):
            break
    else:
        pytest.fail("the two calls never began in the same second in 5 tries")
    assert history["throttled"] and pbs.pacer.waits == waits
