"""Jobs that are submitted, run and end entirely between two probes: each gets
exactly one ``new`` and one ``final`` with its exit status, through a probe
cycle, on PBS and on Flux (through the stand-ins of sim/standins, which answer
as the real commands do; the real Slurm is in tests/live/test_slurm_tiers.py).
Every cycle here runs synchronously and ``drain`` applies what it shipped
before anything is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import time

from jobtap.collector.backends.flux import decode_jobid, encode_f58
from jobtap.collector.cycle import Collector
from jobtap.collector.plan import PROBE, RECONCILE
from jobtap.events import record_of
from jobtap.schema import TERMINAL
from sim.rig.paths import FAKES, fixtures_dir
from sim.rig.pipeline import FakePBS, drain, site_events
from sim.standins import flux_standin
from tests.backends.test_flux import FINAL, FakeFlux, stage_times

SITE = "short"
PBS = fixtures_dir() / "pbs"
FLUX = fixtures_dir() / "flux"


def events_by_job(r) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for e in site_events(r, SITE):
        if e["kind"] == "job":
            out.setdefault(e["object_id"], []).append(e)
    return out


def assert_new_then_final(events: list[dict], state: str, exit_status: int | None) -> None:
    assert [(e["type"], e["version"]) for e in events] == [("new", 1), ("final", 2)]
    record = record_of(events[-1])
    assert (record["state"], record["exit_status"]) == (state, exit_status)


def test_pbs_short_jobs_are_found_by_qselect_x(tmp_path, monkeypatch, r):
    """Four jobs of the captured server appear and end after one probe and
    before the next: ``qselect -x`` names them (their mtime moved, ``-x``
    shows finished ones), one ``qstat -E -x`` brings their final records."""
    pbs = FakePBS(tmp_path, PBS, monkeypatch)
    short = {"3.vm": ("failed", 3), "4.vm": ("completed", 0), "7.vm": ("completed", 0),
             "8.vm": ("failed", -29)}  # fmt: skip
    later = time.time() + 3600
    files = dict(file=str(PBS / "10-busy.qstat-t-f.json"),
                 history_file=str(PBS / "80-final.qstat-t-f-x.json"))  # fmt: skip
    pbs.set(
        "10-busy", **files, appear=dict.fromkeys(short, later), ends=dict.fromkeys(short, later)
    )
    # The server has held its other jobs, unchanged, for 100 s: the stand-in
    # learns their records as of then (it keeps each job's mtime).
    os.utime(pbs.control, (time.time() - 100, time.time() - 100))
    subprocess.run([FAKES / "bin" / "qselect", "-x", "-t", "m.gt.200001010000"], check=True,
                   capture_output=True)  # fmt: skip
    col = Collector(pbs.backend(), r, site=SITE, nodes_every=10**6)
    assert col.run_cycle().tier == RECONCILE
    drain(r, SITE)
    assert not set(short) & set(events_by_job(r))  # not submitted yet
    now = time.time()  # they are submitted, run and end, all after the last probe
    pbs.set("10-busy", **files, appear=dict.fromkeys(short, now), ends=dict.fromkeys(short, now))
    report = col.run_cycle()
    drain(r, SITE)
    assert report.tier == PROBE
    assert report.costs["probe"][0] == 1 and report.costs["stat"][0] == 1  # qselect, qstat -E
    assert report.counts["targeted"] == len(short)  # the other jobs' records did not move
    events = events_by_job(r)
    for job_id, (state, status) in short.items():
        assert_new_then_final(events[job_id], state, status)
    col.run_cycle(tier=RECONCILE)  # nothing more for them, whatever the tier
    drain(r, SITE)
    assert all(len(events_by_job(r)[job_id]) == 2 for job_id in short)


def test_flux_short_jobs_are_found_by_flux_jobs_a_since(tmp_path, monkeypatch, r):
    """The first jobs of the captured Flux run, all ended between two probes:
    ``flux jobs -a -A --since`` lists them (``-A`` alone, what the backend ran
    before, lists active jobs only and missed them)."""
    fake = FakeFlux(tmp_path, monkeypatch)
    jobs = flux_standin.job_dirs(FLUX)
    t0 = min(job.final["t_submit"] for job in jobs) - 1  # before the first submission
    t1 = stage_times()["02-phase1-done"]
    now = [t0]  # the instance's clock, which the stand-in answers for
    col = Collector(fake.backend(clock=lambda: now[0]), r, site=SITE, nodes_every=10**6,
                    reconcile_every=3600, clock=lambda: now[0])  # fmt: skip
    fake.set(time=t0)
    assert col.run_cycle().tier == RECONCILE
    drain(r, SITE)
    now[0] = t1
    fake.set(time=t1)
    report = col.run_cycle()
    drain(r, SITE)
    assert report.tier == PROBE and report.costs["probe"][0] == 1 and "stat" not in report.costs
    short = {}
    for job in jobs:
        record = job.at(t1)
        if job.at(t0) is None and record is not None and record["state"] == "INACTIVE":
            short[encode_f58(record["id"])] = record["name"]
    assert len(short) >= 3, short
    events = events_by_job(r)
    for job_id, name in short.items():
        state, status, _ = FINAL[name]
        assert state in TERMINAL
        assert_new_then_final(events[job_id], state, status)
    active_only = subprocess.run([FAKES / "bin" / "flux", "jobs", "-A", "--json"],
                                 capture_output=True, check=True)  # fmt: skip
    listed = {j["id"] for j in json.loads(active_only.stdout)["jobs"]}
    assert not listed & {decode_jobid(j) for j in short}
