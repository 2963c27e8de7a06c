"""PBS follow mode: what jobtap adds between the moment the server records a job's
end and the SDK callback carrying its final event, side by side in one run:

* ``before``: the server hook's jobobit poke without a record (``jobtap poke``
  started in the background), so the collector re-reads the job with
  ``qstat -E -x -f -F json`` behind its pacer;
* ``after``: the jobobit hook's poke carries the job's final record (written by
  the hook itself), which the collector ships without a qstat;
* ``mom`` (``--modes``): the MoM hook's poke (execjob_epilogue, marked ended,
  ``--lead`` seconds before the server knows), re-checked with qstat.

    python -m bench.pbs_follow_latency [--jobs 40] [--gap 1.0] [--modes before,after]

Latencies: poke -> SDK callback (the poke's time is its stream entry's id, the
Redis server's clock on this host), and server records the end -> callback.
qstat calls per job end: the ``qstat -x`` calls of the follow path (refreshes
of poked jobs), per job; the probe cycles' own calls are counted apart.

There is no PBS here: the qstat stand-in plays the server, with OpenPBS's costs
(sim/standins/pbs_standin.py: the 200 ms same-second throttle, 35 ms per
connection) and its jobs ending one by one at set times (``"ends"``): before
its end a job is running, after it ``qstat -x`` shows it finished.  The hook is
deploy/pbs/jobtap_poke_hook.py itself, run with a stand-in of PBS's ``pbs``
module (sim/rig/pbs_hook.py).  A real ``jobtap worker`` applies the
chunks; an SDK client in this process takes the callbacks.  The collector is
the real service (full stat every 5 s, ``--follow``) in this process.

For each job, latency = SDK callback - the moment the stand-in starts showing
it finished.  Also timed: one ``jobtap poke`` process, and one poke written by
the MoM hook.  What PBS itself takes before the server records a job's end
cannot be measured here; docs/performance.md adds it from the real server's
figures (issue 11).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.follow_rig import JOBTAP, FollowRig, ms, percentile, print_table
from bench.pbs_rig import (
    FIXTURES,
    QSTAT_E,
    count_refreshes,
    hook_config,
    jobobit_job,
    standin_backend,
    use_standins,
)
from jobtap.sim.localredis import RedisServer
from sim.rig.pbs_hook import run_hook
from sim.rig.pbs_jobs import FINISHED, RUNNING, job_ids, write_jobs

MODES = {
    "before": "jobobit poke, no record (qstat re-check)",
    "after": "jobobit poke with the record",
    "mom": "MoM hook (execjob_epilogue, ended)",
}


def poke_times(rig: FollowRig) -> dict[str, float]:
    """When each job's first poke reached Redis (its entry id's milliseconds)."""
    times: dict[str, float] = {}
    for entry_id, fields in rig.redis.xrange(rig.keys.pokes):
        millis = int(entry_id.decode().partition("-")[0])
        for job in (fields.get(b"ids") or b"").decode().split():
            times.setdefault(job, millis / 1000)
    return times


def one_mode(workdir: Path, mode: str, args: argparse.Namespace) -> dict:
    site = f"pbsfollow{mode}"
    ids = job_ids(args.jobs, first=9000)
    live = write_jobs(FIXTURES, RUNNING, ids, workdir / "live.json")
    done = write_jobs(FIXTURES, FINISHED, ids, workdir / "done.json")
    control = workdir / "control.json"
    use_standins(control)
    start = time.time() + 8  # after the first cycle and the subscription
    rng = random.Random(args.jobs)
    ends: dict[str, float] = {}
    t = start
    for job in ids:
        ends[job] = t
        t += args.gap * rng.uniform(0.5, 1.5)  # no beat with the full cycles
    control.write_text(json.dumps({"dir": str(FIXTURES), "stage": "10-busy", "mode": "ok",
                                   "file": str(live), "history_file": str(done),
                                   "ends": ends}))  # fmt: skip
    rig = FollowRig(workdir, site)
    config = hook_config(rig, max_record=8192 if mode == "after" else 0)
    backend = standin_backend()
    finished = json.loads(done.read_text())["Jobs"]
    hook_costs: list[float] = []

    def hook(job: str, event: str) -> None:
        pbs_object = jobobit_job(finished[job])
        t0 = time.perf_counter()
        run_hook(config, workdir / f"hook-{job}.json", event, job, job=pbs_object)
        hook_costs.append(time.perf_counter() - t0)

    timers = []
    try:
        rig.start(backend, "pbs")
        shipped = count_refreshes(rig, backend)
        for job, end in ends.items():
            at = end - args.lead if mode == "mom" else end
            event = "EXECJOB_EPILOGUE" if mode == "mom" else "JOBOBIT"
            timer = threading.Timer(max(0.0, at - time.time()), hook, args=(job, event))
            timer.start()
            timers.append(timer)
        meta = rig.wait_finals(set(ends), timeout=t - time.time() + 60)
        poked = poke_times(rig)
    finally:
        for timer in timers:
            timer.cancel()
        rig.stop()
    finals = rig.finals
    latencies = [finals[j] - ends[j] for j in ends if j in finals]
    from_poke = [finals[j] - poked[j] for j in ends if j in finals and j in poked]
    to_ship = [shipped[j] - poked[j] for j in ends if j in shipped and j in poked]
    return {"mode": mode, "latencies": latencies, "missing": len(ends) - len(latencies),
            "from_poke": from_poke, "to_ship": to_ship, "hook_costs": hook_costs,
            "refreshes": int(meta.get("refreshes", 0)), "cycles": int(meta.get("cycles_ok", 0)),
            "refresh_qstats": backend.in_refreshes(QSTAT_E), "qstats": backend.counts[QSTAT_E],
            "jobs": len(ends)}  # fmt: skip


def poke_process_cost(n: int = 10) -> list[float]:
    """Wall time of one ``jobtap poke`` process (what the server hook starts)."""
    with tempfile.TemporaryDirectory(prefix="jobtap-bench-") as tmp:
        server = RedisServer(Path(tmp) / "redis").start()
        try:
            costs = []
            for _ in range(n):
                t0 = time.perf_counter()
                subprocess.run([str(JOBTAP), "poke", "--redis", server.url, "--site", "probe",
                                "1.vm"], check=True)  # fmt: skip
                costs.append(time.perf_counter() - t0)
        finally:
            server.stop()
    return costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--modes", default="before,after", help="of " + ", ".join(MODES))
    ap.add_argument("--gap", type=float, default=1.0, help="mean seconds between job ends")
    ap.add_argument(
        "--lead",
        type=float,
        default=0.3,
        help="MoM mode: seconds between the MoM's poke and the server's record",
    )
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown mode(s) {', '.join(unknown)}: choose among {', '.join(MODES)}")
    results = []
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix="jobtap-bench-") as tmp:
            results.append(one_mode(Path(tmp), mode, args))
    print(f"{args.jobs} jobs ending about every {args.gap:g} s on the qstat stand-in"
          + (f"; MoM pokes {args.lead:g} s before the server records the end"
             if "mom" in modes else ""))  # fmt: skip
    columns = [MODES[m] for m in modes]
    poke_rows = {
        label: (lambda x, p=p: ms(percentile(x["from_poke"], p)) if x["from_poke"] else "-")
        for label, p in (("poke -> callback, p50", 50), ("poke -> callback, p99", 99))
    }
    ship_rows = {
        label: (lambda x, p=p: ms(percentile(x["to_ship"], p)) if x["to_ship"] else "-")
        for label, p in (("poke -> shipped by a refresh, p50", 50), ("... p99", 99))
    }
    print_table("server records the end -> SDK callback", columns, results, {
        **poke_rows,
        **ship_rows,
        "qstat -x per job end (follow path)":
            lambda x: f"{x['refresh_qstats'] / x['jobs']:.2f} ({x['refresh_qstats']} calls)",
        "qstat -x calls in all (probe cycles too)": lambda x: str(x["qstats"]),
        "targeted refreshes / full cycles": lambda x: f"{x['refreshes']} / {x['cycles']}",
        "one hook run, p50": lambda x: ms(percentile(x["hook_costs"], 50)),
    })  # fmt: skip
    if "before" in modes or "mom" in modes:
        pokes = poke_process_cost()
        print(f"one `jobtap poke` process (before: the hook starts it): "
              f"p50 {ms(percentile(pokes, 50))}, max {ms(max(pokes))}")  # fmt: skip


if __name__ == "__main__":
    main()
