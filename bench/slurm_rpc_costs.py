"""What each way of reading jobs costs slurmctld and the client, one command at
a time, with ``--jobs`` held jobs in the queue.

    sudo .venv/bin/python -m bench.slurm_rpc_costs --jobs 2000
    sudo .venv/bin/python -m bench.slurm_rpc_costs --jobs 2000 --slurm 24.11

Needs root and a single-host Slurm of the test rig (22.05 of
deploy/slurm/start.sh by default; started if it is not running; it takes the
Slurm lock of the live tests).  Each command runs
``--runs`` times after ``sdiag --reset``; printed per run: the wall time of the
command (the client's work: squeue's rendering included), the bytes it printed,
and slurmctld's own time by RPC (``sdiag``).  The point: on 22.05 the probe's
text listing and ``squeue --json`` send slurmctld the same REQUEST_JOB_INFO,
which packs every job whatever the client prints; only single-job RPCs
(``slurmrestd`` GET /job/ID, ``scontrol show job ID``) cost little.  From
23.11, ``squeue --only-job-state`` (REQUEST_JOB_STATE: ids and states, no
records) is measured too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from bench.slurm_polling import cancel_all, sh, slurm_held
from bench.slurm_tiers import fill_queue
from jobtap.collector.backends.slurm import PROBE_FORMAT, format_of_release
from jobtap.collector.backends.slurm import rest as slurm_rest
from jobtap.collector.backends.slurm.backend import LISTING_ARGV
from sim.rig.slurm import CLUSTERS, rpc_stats


def measure(label: str, argv: list[str], runs: int, data: bytes | None = None) -> None:
    sh("sdiag", "--reset")
    t0 = time.perf_counter()
    size = 0
    for _ in range(runs):
        out = subprocess.run(argv, input=data, capture_output=True, timeout=300)
        size = len(out.stdout)
    wall = (time.perf_counter() - t0) / runs
    rpcs = {k: v for k, v in rpc_stats(sh("sdiag")).items() if k != "REQUEST_STATS_INFO"}
    ctld = sum(us for _, us in rpcs.values()) / runs / 1000
    detail = ", ".join(f"{k} {us / runs / 1000:.2f}" for k, (_, us) in sorted(rpcs.items()))
    print(f"| {label} | {wall * 1000:,.1f} | {size:,} | {ctld:.2f} | {detail} |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.slurm_rpc_costs", description=__doc__)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--slurm", choices=list(CLUSTERS), default="22.05")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: the benchmark starts Slurm and resets its statistics")
    os.environ.update(PATH=CLUSTERS[args.slurm].env()["PATH"])
    with slurm_held(args.slurm):
        try:
            held = fill_queue(args.jobs, minutes=30, nodes=CLUSTERS[args.slurm].nodes)
            print(f"\n{args.jobs:,} held jobs, {sh('sinfo', '--version').strip()};"
                  f" per run, {args.runs} runs each\n")  # fmt: skip
            print("| command | wall ms | bytes printed | slurmctld ms | slurmctld ms by RPC |")
            print("|---|---:|---:|---:|---|")
            fmt = format_of_release(sh("scontrol", "--version"))
            rest = ["env", "SLURMRESTD_SECURITY=disable_user_check", "slurmrestd",
                    "-a", "rest_auth/local", *fmt.rest_argv]  # fmt: skip
            measure("`squeue --json` (full stat)", ["squeue", *LISTING_ARGV], args.runs)
            if fmt.version >= "v0.0.40":  # 23.11+
                measure("`squeue --only-job-state --json`",
                        ["squeue", "--only-job-state", "--json"], args.runs)  # fmt: skip
            probe = ["squeue", "-h", "-a", "--local", "-t", "all", "-o", PROBE_FORMAT]
            measure("`squeue -h -a --local -t all -o PROBE` (probe)", probe, args.runs)
            one = slurm_rest.requests(fmt.version, held[:1])
            measure("slurmrestd, GET /job/ID of 1 job", rest, args.runs, one)
            ten = slurm_rest.requests(fmt.version, held[:10])
            measure("slurmrestd, GET /job/ID of 10 jobs", rest, args.runs, ten)
            measure("`scontrol -o show job ID`", ["scontrol", "-o", "show", "job", held[0]],
                    args.runs)  # fmt: skip
            measure("`squeue -j ID1,...,ID10`", ["squeue", "-h", "-j", ",".join(held[:10])],
                    args.runs)  # fmt: skip
        finally:
            cancel_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
