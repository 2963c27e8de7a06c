"""Flux follow mode: from the end of a job (its ``finish`` event, or the
exception or clean that ended a job that never ran) to the SDK callback carrying
its final event.

    python -m bench.flux_follow_latency [--speed 1] [--burner N] [--modes journal,before]

Modes (``--modes``, comma-separated, each run in turn):

* ``journal`` (the default way): every job's record from the journal, new
  jobs' too (jobspec on submit, R on alloc), and a pushed plan: no ``flux
  jobs`` between two reconciliations.
* ``before``: the way before, records from the journal only for jobs already
  listed once (a new job is listed), a ``flux jobs --since`` probe every cycle
  between reconciliations, and the reader's batches as they were (0.05 s
  quiet, 0.25 s at most; now 0.02 and 0.1).
* ``listing``: no records from the journal, a ``flux jobs --json ID`` listing
  per refresh, and the probe (the way before that).

``--burner N`` starts N busy processes (a CPU burner each) for the run and
stops them at the end, to measure under load.

There is no Flux here: the recorded journal of the fixtures (19 jobs over about
35 s, captured on flux-core 0.88) is replayed in real time by the stand-in of
Flux's Python bindings under the ``flux python`` stand-in, which runs the real
journal reader; ``flux jobs`` (the stand-in) answers as of the moment the
replay has reached, and costs at least what the real one does (0.21 s).  The
collector is the real service (``--follow``, a cycle every 5 s, a full stat
every 60 s) in this process, with a real ``jobtap worker`` and an SDK client.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench.follow_rig import FollowRig, print_table
from jobtap.collector.backends.base import Backend
from jobtap.collector.backends.flux import FluxBackend, encode_f58
from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.standins import flux_standin

FIXTURES = fixtures_dir() / "flux"
# The recorded jobs begin this long after the collector started (its first
# cycle, a full stat of jobs, nodes and queues, is over by then even under load):
# a collector's start is not what is measured.
START_AFTER = 5.0
MODES = {  # name: (from_journal, new_jobs, pushed, the reader's coalesce and max_delay)
    "journal": (True, True, True, 0.02, 0.1),
    "before": (True, False, False, 0.05, 0.25),
    "listing": (False, False, False, 0.05, 0.25),
}
TITLES = {"journal": "records from the journal, pushed plan",
          "before": "before: new jobs listed, probe plan",
          "listing": "`flux jobs --json ID` per refresh, probe plan"}  # fmt: skip


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


class PlanRig(FollowRig):
    """FollowRig with the collector's plan chosen: pushed (no job listing
    between reconciliations) or probing."""

    def __init__(self, workdir: Path, site: str, *, pushed: bool) -> None:
        super().__init__(workdir, site)
        self.pushed = pushed

    def start(self, backend: Backend, backend_name: str) -> PlanRig:
        import jobtap
        from bench.follow_rig import JOBTAP
        from sim.rig.paths import ROOT

        self.worker = subprocess.Popen(
            [str(JOBTAP), "worker", "--redis", self.server.url, "--site", self.site],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.client = jobtap.Client(self.server.url, site=self.site)
        self.client.subscribe(self.on_change, all_jobs=True, initial=False)
        collector = Collector(backend, self.redis, site=self.site, nodes_every=10**6,
                              pushed=self.pushed)  # fmt: skip
        self.service = CollectorService(collector, interval=self.interval, follow=True,
                                        backend_name=backend_name)  # fmt: skip
        self.runner = threading.Thread(target=self.service.run, daemon=True)
        self.runner.start()
        return self


def one_mode(workdir: Path, mode: str, speed: float) -> dict:
    from_journal, new_jobs, pushed, coalesce, max_delay = MODES[mode]
    site = f"flux{mode}"
    clock = workdir / "journal-clock"
    control = workdir / "control.json"
    calls = workdir / "calls.jsonl"
    settings = {"dir": str(FIXTURES), "mode": "ok", "journal_speed": speed,
                "journal_clock": str(clock), "journal_end": "open",
                "journal_delay": START_AFTER,
                "call_log": str(calls)}  # fmt: skip
    control.write_text(json.dumps(settings))
    os.environ["JOBTAP_FAKE_FLUX"] = str(control)
    rig = PlanRig(workdir, site, pushed=pushed)

    def instance_clock() -> float:  # the recorded instance's time: where the replay is
        return flux_standin.replay_time(settings) or 0.0

    backend = FluxBackend(flux=str(FAKE_BIN / "flux"), timeout=30, from_journal=from_journal,
                          new_jobs=new_jobs, coalesce=coalesce, max_delay=max_delay,
                          clock=instance_clock)  # fmt: skip
    ends = job_ends()
    try:
        rig.start(backend, "flux")
        span = START_AFTER + (max(ends.values()) - min(ends.values())) / speed
        meta = rig.wait_finals(set(ends), timeout=span + 60)
        wall, first = (float(x) for x in clock.read_text().split())
    finally:
        rig.stop()
    finals = rig.finals
    at = {job: wall + (end - first) / speed for job, end in ends.items()}
    latencies = {job: finals[job] - at[job] for job in ends if job in finals}
    names = {encode_f58(j.final["id"]): j.final["name"] for j in flux_standin.job_dirs(FIXTURES)}
    jobs_calls = [c["argv"] for c in map(json.loads, calls.open()) if c["argv"][:1] == ["jobs"]]
    return {
        "mode": mode,
        "latencies": list(latencies.values()),
        "per_job": {f"{names[j]} {j}": latencies[j] for j in sorted(latencies, key=at.get)},
        "missing": len(ends) - len(latencies),
        "derived": backend.journal.derived,
        "built": backend.journal.built,
        "listed": backend.journal.listed,
        "refreshes": int(meta.get("refreshes", 0)),
        "cycles": int(meta.get("cycles_ok", 0)),
        "reconciles": int(meta.get("cycles_reconcile", 0)),
        "by_id": sum(1 for a in jobs_calls if a[1:2] == ["--json"]),
        "since": sum(1 for a in jobs_calls if any(x.startswith("--since") for x in a)),
        "listings": sum(1 for a in jobs_calls if a[1:] == ["-a", "-A", "--json", "-c", "0"]),
    }


def burners(n: int) -> list[subprocess.Popen]:
    """N busy processes (each spins one core) for the run."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speed", type=float, default=1.0, help="journal replay speed")
    ap.add_argument("--burner", type=int, default=0, metavar="N",
                    help="run N CPU burners beside the benchmark")  # fmt: skip
    ap.add_argument("--per-job", action="store_true", help="also print each job's latency")
    ap.add_argument("--modes", default="journal,before",
                    help=f"comma-separated, of {', '.join(MODES)}")  # fmt: skip
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: choose from {', '.join(MODES)}")
    print(f"# {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{args.burner} CPU burner(s), journal speed {args.speed:g}")  # fmt: skip
    hogs = burners(args.burner)
    results = []
    try:
        for mode in modes:
            with tempfile.TemporaryDirectory(prefix="jobtap-bench-") as tmp:
                results.append(one_mode(Path(tmp), mode, args.speed))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    print_table("end of job -> SDK callback", [TITLES[x["mode"]] for x in results], results, {
        "records from the journal (new jobs) / listed": lambda x:
            f"{x['derived']} ({x['built']}) / {x['listed']}",
        "`flux jobs`: full listings / `--since` probes / by id": lambda x:
            f"{x['listings']} / {x['since']} / {x['by_id']}",
        "targeted refreshes / cycles (reconciliations)": lambda x:
            f"{x['refreshes']} / {x['cycles']} ({x['reconciles']})",
    })  # fmt: skip
    if args.per_job:
        for x in results:
            print(
                f"\n{x['mode']}: "
                + ", ".join(f"{k} {v * 1000:.0f}" for k, v in x["per_job"].items())
            )


if __name__ == "__main__":
    main()
