"""Flux follow mode: from the end of a job (its ``finish`` event, or the
exception or clean that ended a job that never ran) to the SDK callback carrying
its final event, with the job's new record built from the journal events
(``from_journal``, the default) and with a ``flux jobs --json ID`` listing per
refresh (the way before).

    python -m bench.flux_follow_latency [--speed 1]

There is no Flux here: the recorded journal of the fixtures (19 jobs over about
35 s, captured on flux-core 0.88) is replayed in real time by the stand-in of
Flux's Python bindings under the ``flux python`` stand-in, which runs the real
journal reader; ``flux jobs`` (the stand-in) answers as of the moment the
replay has reached, and costs at least what the real one does (0.21 s).  The
collector is the real service (``--follow``, full stat every 5 s) in this
process, with a real ``jobtap worker`` and an SDK client.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from bench.follow_rig import FollowRig, print_table
from jobtap.collector.backends.flux import FluxBackend, encode_f58
from tests.fakes import flux_standin
from tests.support.paths import FAKE_BIN, fixtures_dir

FIXTURES = fixtures_dir() / "flux"


def job_ends() -> dict[str, float]:
    """Each job's end (recorded time): finish, else a fatal exception, else clean."""
    ends = {}
    for job in flux_standin.job_dirs(FIXTURES):
        names = {e["name"]: e["timestamp"] for e in reversed(job.events)}
        fatal = [
            e["timestamp"]
            for e in job.events
            if e["name"] == "exception" and (e.get("context") or {}).get("severity") == 0
        ]
        ends[encode_f58(job.final["id"])] = names.get("finish") or (fatal or [None])[0] or names[
            "clean"]  # fmt: skip
    return ends


def one_mode(workdir: Path, from_journal: bool, speed: float) -> dict:
    site = "fluxjournal" if from_journal else "fluxlisting"
    clock = workdir / "journal-clock"
    control = workdir / "control.json"
    settings = {"dir": str(FIXTURES), "mode": "ok", "journal_speed": speed,
                "journal_clock": str(clock), "journal_end": "open"}  # fmt: skip
    control.write_text(json.dumps(settings))
    os.environ["JOBTAP_FAKE_FLUX"] = str(control)
    rig = FollowRig(workdir, site)

    def instance_clock() -> float:  # the recorded instance's time: where the replay is
        return flux_standin.replay_time(settings) or 0.0

    backend = FluxBackend(flux=str(FAKE_BIN / "flux"), timeout=30, from_journal=from_journal,
                          clock=instance_clock)  # fmt: skip
    ends = job_ends()
    try:
        rig.start(backend, "flux")
        span = (max(ends.values()) - min(ends.values())) / speed
        meta = rig.wait_finals(set(ends), timeout=span + 60)
        wall, first = (float(x) for x in clock.read_text().split())
    finally:
        rig.stop()
    finals = rig.finals
    at = {job: wall + (end - first) / speed for job, end in ends.items()}
    latencies = {job: finals[job] - at[job] for job in ends if job in finals}
    return {"from_journal": from_journal, "latencies": list(latencies.values()),
            "missing": len(ends) - len(latencies), "derived": backend.journal.derived,
            "listed": backend.journal.listed, "refreshes": int(meta.get("refreshes", 0)),
            "cycles": int(meta.get("cycles_ok", 0))}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speed", type=float, default=1.0, help="journal replay speed")
    args = ap.parse_args()
    results = []
    for from_journal in (True, False):
        with tempfile.TemporaryDirectory(prefix="jobtap-bench-") as tmp:
            results.append(one_mode(Path(tmp), from_journal, args.speed))
    print_table("end of job -> SDK callback", ["records from the journal",
                "`flux jobs --json ID`"], results, {
        "records built from the journal / listed": lambda x: f"{x['derived']} / {x['listed']}",
        "targeted refreshes / full cycles": lambda x: f"{x['refreshes']} / {x['cycles']}",
    })  # fmt: skip


if __name__ == "__main__":
    main()
