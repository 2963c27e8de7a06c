"""PSI/J's executor tests (the psij-python sdist's unmodified test files, with the
harness of sim/rig/psij_harness) on the real Slurm of deploy/slurm/start.sh, PSI/J's
stock ``slurm`` executor and ``jobtap-slurm`` side by side; jobtap in follow mode
(the slurmctld hook, ``jobtap collector --follow``, ``jobtap worker``) on a fresh
redis-server.  Prints both columns, their totals and the ratio; exits 1 if a test
the stock executor passes fails with ``jobtap-slurm``, if ``jobtap-slurm`` fails
``test_cancel``, or if it is not at least twice as fast.

    sudo .venv/bin/python -m bench.psij_suite                 # the full suite, ~5 min
    sudo .venv/bin/python -m bench.psij_suite test_executor.py::test_cancel
    sudo VENV/bin/python -m bench.psij_suite --tests CHECKOUT/tests   # see bench.psij_head

Needs root; starts Slurm if it is not running and takes the live tests' Slurm lock.
tests/live/test_psij.py runs a part of it in ``make test``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import sys
import tempfile
import time
from pathlib import Path

from jobtap.sim.localredis import RedisServer
from sim.rig.psij_upstream import (
    EXECUTOR_TESTS,
    EXECUTORS,
    check_side_by_side,
    executor_tests,
    jobtap_on_slurm,
    prepare,
    run_suite,
)
from sim.rig.slurm import SLURM_22, cancel_everything


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.psij_suite")
    parser.add_argument("selection", nargs="*", help="test files or node ids (default: all)")
    parser.add_argument(
        "--tests", type=Path, help="a PSI/J tests folder (default: the installed sdist's)"
    )
    args = parser.parse_args(argv)
    default = executor_tests(args.tests) if args.tests else list(EXECUTOR_TESTS)
    selection = args.selection or default
    print(f"psij-python {importlib.metadata.version('psij-python')}, tests from "
          f"{args.tests or 'its sdist'}: {' '.join(selection)}", flush=True)  # fmt: skip
    with SLURM_22.held(), tempfile.TemporaryDirectory(prefix="psij-suite-") as tmp:
        cancel_everything()
        redis = RedisServer(Path(tmp) / "redis").start()
        try:
            run_dir = prepare(Path(tmp) / "psij-tests", args.tests)
            t0 = time.monotonic()
            with jobtap_on_slurm(redis.url, Path(tmp)) as env:
                result = run_suite(run_dir, EXECUTORS, selection, env=env, timeout=3600)
            wall = time.monotonic() - t0
        finally:
            redis.stop()
            cancel_everything()
    print(result.table())
    print(f"wall time {wall:.0f} s; machine: {platform.node()}, {platform.platform()}")
    try:
        ratio = check_side_by_side(result)
    except AssertionError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    stock, ours = EXECUTORS
    print(
        f"{stock}: {result.totals[stock]:.1f} s, {ours}: {result.totals[ours]:.1f} s: "
        f"{ratio:.1f}x faster with jobtap"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
