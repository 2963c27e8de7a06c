"""PBS follow mode: what jobtap adds between the moment the server records a job's
end and the SDK callback carrying its final event, with the server hook's poke
(jobobit: ``jobtap poke`` started in the background when the server records the
end) and with the MoM hook's poke (execjob_epilogue: written by the hook itself,
marked ended, before the server knows).

    python -m bench.pbs_follow_latency [--jobs 40] [--gap 1.0] [--lead 0.3]

There is no PBS here: the qstat stand-in plays the server, with OpenPBS's costs
(tests/fakes/pbs_standin.py: the 200 ms same-second throttle, 35 ms per
connection) and its jobs ending one by one at set times (``"ends"``): before
its end a job is running, after it ``qstat -x`` shows it finished.  The hook is
deploy/pbs/jobtap_poke_hook.py itself, run with a stand-in of PBS's ``pbs``
module (tests/support/pbs_hook.py).  A real ``jobtap worker`` applies the
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
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.follow_rig import JOBTAP, FollowRig, ms, percentile, print_table
from jobtap.cli.localredis import RedisServer
from jobtap.collector.backends.pbs import PBSBackend
from jobtap.keys import POKES_MAXLEN, SiteKeys
from tests.support.paths import FAKE_BIN, fixtures_dir
from tests.support.pbs_hook import run_hook
from tests.support.pbs_jobs import FINISHED, RUNNING, job_ids, write_jobs

FIXTURES = fixtures_dir() / "pbs"


def one_mode(workdir: Path, mode: str, args: argparse.Namespace) -> dict:
    site = f"pbsfollow{mode}"
    keys = SiteKeys(site)
    ids = job_ids(args.jobs, first=9000)
    live = write_jobs(FIXTURES, RUNNING, ids, workdir / "live.json")
    done = write_jobs(FIXTURES, FINISHED, ids, workdir / "done.json")
    control = workdir / "control.json"
    os.environ["JOBTAP_FAKE_PBS"] = str(control)
    os.environ["JOBTAP_FAKE_PYTHON"] = sys.executable
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
    hook_config = {"jobtap": str(JOBTAP), "site": site, "redis": rig.server.url,
                   "stream": keys.pokes, "maxlen": POKES_MAXLEN, "timeout": 0.25}  # fmt: skip
    backend = PBSBackend(qstat=str(FAKE_BIN / "qstat"), pbsnodes=str(FAKE_BIN / "pbsnodes"),
                         tz="UTC", timeout=30)  # fmt: skip
    hook_costs: list[float] = []

    def hook(job: str, event: str) -> None:
        t0 = time.perf_counter()
        run_hook(hook_config, workdir / f"hook-{job}.json", event, job)
        hook_costs.append(time.perf_counter() - t0)

    timers = []
    try:
        rig.start(backend, "pbs")
        for job, end in ends.items():
            at = end - args.lead if mode == "mom" else end
            event = "EXECJOB_EPILOGUE" if mode == "mom" else "JOBOBIT"
            timer = threading.Timer(max(0.0, at - time.time()), hook, args=(job, event))
            timer.start()
            timers.append(timer)
        meta = rig.wait_finals(set(ends), timeout=t - time.time() + 60)
    finally:
        for timer in timers:
            timer.cancel()
        rig.stop()
    finals = rig.finals
    latencies = [finals[j] - ends[j] for j in ends if j in finals]
    return {"mode": mode, "latencies": latencies, "missing": len(ends) - len(latencies),
            "hook_costs": hook_costs, "refreshes": int(meta.get("refreshes", 0)),
            "cycles": int(meta.get("cycles_ok", 0))}  # fmt: skip


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
    ap.add_argument("--gap", type=float, default=1.0, help="mean seconds between job ends")
    ap.add_argument(
        "--lead",
        type=float,
        default=0.3,
        help="MoM mode: seconds between the MoM's poke and the server's record",
    )
    args = ap.parse_args()
    results = []
    for mode in ("server", "mom"):
        with tempfile.TemporaryDirectory(prefix="jobtap-bench-") as tmp:
            results.append(one_mode(Path(tmp), mode, args))
    pokes = poke_process_cost()
    print(f"{args.jobs} jobs ending about every {args.gap:g} s on the qstat stand-in; "
          f"MoM pokes {args.lead:g} s before the server records the end")  # fmt: skip
    print_table("server records the end -> SDK callback", [
        "server hook (jobobit, `jobtap poke`)", "MoM hook (execjob_epilogue, ended)"], results, {
        "targeted refreshes / full cycles": lambda x: f"{x['refreshes']} / {x['cycles']}",
    })  # fmt: skip
    print(f"one `jobtap poke` process: p50 {ms(percentile(pokes, 50))}, "
          f"max {ms(max(pokes))}")  # fmt: skip
    mom = results[1]["hook_costs"]
    print(f"one MoM hook run writing its poke: p50 {ms(percentile(mom, 50))}, max {ms(max(mom))}")


if __name__ == "__main__":
    main()
