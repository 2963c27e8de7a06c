"""PBS: a collector cycle in which 1,000 jobs leave the live list at once (the end
of a job array) and are resolved from history, through the qstat stand-in that
charges what a real OpenPBS 23.06 charges (sim/standins/pbs_standin.py: the
200 ms same-second throttle, 35 ms per authenticated connection, ~400
privileged ports held 60 s in TIME_WAIT, 1 s per retry when they run out).

    python -m bench.pbs_history [--jobs 1000]              # qstat -E: one call
    python -m bench.pbs_history --ungrouped                # also the old way (~80 s)

Starts its own redis-server on a free port.  Cycle 1 ships the running jobs;
cycle 2 finds the live list empty and asks history for all of them.  Printed:
the history step, the whole cycle, and the stand-in's account of the history
call (connections, port waits, throttle).  Target: under 2 s for 1,000 jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from jobtap.collector.backends.pbs import PBSBackend
from jobtap.collector.cycle import Collector
from jobtap.sim.localredis import RedisServer
from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.pbs_jobs import FINISHED, RUNNING, job_ids, write_jobs

FIXTURES = fixtures_dir() / "pbs"


def one_run(workdir: Path, n: int, grouped: bool) -> dict:
    """Cycle 1 (n running jobs), then cycle 2 (all gone); the figures of cycle 2."""
    ids = job_ids(n)
    live = write_jobs(FIXTURES, RUNNING, ids, workdir / "live.json")
    empty = write_jobs(FIXTURES, RUNNING, [], workdir / "empty.json")
    done = write_jobs(FIXTURES, FINISHED, ids, workdir / "done.json")
    control = workdir / "control.json"
    log = workdir / "calls.jsonl"
    os.environ["JOBTAP_FAKE_PBS"] = str(control)
    os.environ["JOBTAP_FAKE_PYTHON"] = sys.executable

    def stage(live_file: Path) -> None:
        doc = {"dir": str(FIXTURES), "stage": "80-final", "mode": "ok", "file": str(live_file),
               "history_file": str(done), "log": str(log)}  # fmt: skip
        control.write_text(json.dumps(doc))

    backend = PBSBackend(qstat=str(FAKE_BIN / "qstat"), pbsnodes=str(FAKE_BIN / "pbsnodes"),
                         tz="UTC", timeout=600, grouped=grouped)  # fmt: skip
    server = RedisServer(workdir / "redis").start()
    try:
        col = Collector(  # full stats: this measures the history of vanished jobs
            backend, server.client(), site="bench", nodes_every=10**6, reconcile_every=0
        )
        stage(live)
        col.run_cycle(with_nodes=False)
        stage(empty)
        calls_before = len(log.read_text().splitlines())
        t0 = time.perf_counter()
        report = col.run_cycle(with_nodes=False)
        whole = time.perf_counter() - t0
    finally:
        server.stop()
    calls = [json.loads(x) for x in log.read_text().splitlines()[calls_before:]]
    history = [c for c in calls if "-x" in c["args"]]
    return {
        "grouped": grouped,
        "history_s": report.timings.get("history", 0.0),
        "cycle_s": whole,
        "finalised": report.counts.get("finalised", 0),
        "qstat_calls": len(history),
        "connections": sum(c["connections"] for c in history),
        "port_waits": sum(c["port_waits"] for c in history),
        "throttled": sum(1 for c in history if c["throttled"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--ungrouped", action="store_true", help="also time qstat -x without -E")
    args = ap.parse_args()
    runs = []
    for grouped in (True, False) if args.ungrouped else (True,):
        with tempfile.TemporaryDirectory(prefix="jobtap-bench-") as tmp:
            runs.append(one_run(Path(tmp), args.jobs, grouped))
    print(f"{args.jobs} jobs leave the live list at once; history through the qstat stand-in")
    print("| history call | history step | whole cycle | finals | qstat calls | connections "
          "| port waits | throttled |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for run in runs:
        name = "`qstat -E -x -f -F json -t ids`" if run["grouped"] else "`qstat -x …` (no -E)"
        print(f"| {name} | {run['history_s']:.3f} s | {run['cycle_s']:.3f} s | "
              f"{run['finalised']} | {run['qstat_calls']} | {run['connections']} | "
              f"{run['port_waits']} | {run['throttled']} |")  # fmt: skip
    if len(runs) == 2:
        print(f"ratio (without -E / with -E, history step): "
              f"{runs[1]['history_s'] / runs[0]['history_s']:.0f}x")  # fmt: skip
    verdict = "PASS" if runs[0]["history_s"] < 2.0 else "FAIL"
    print(f"target: history of {args.jobs} jobs under 2 s with -E: {verdict}")


if __name__ == "__main__":
    main()
