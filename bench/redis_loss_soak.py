"""Redis losing data again and again under the whole pipeline, in real time.

    python -m bench.redis_loss_soak [--minutes 30] [--every 3] [--jobs 400]

The scenario of issue 12 (tests.support.lossrun): the sim pipeline with an
in-process collector, a real ``jobtap worker`` kept running by a supervisor, a
``client.stream()`` consumer, an ``all_jobs=True`` subscriber and a ``wait()``.
Every ``--every`` minutes Redis is SIGKILLed in the middle of the flow and
started again, alternately empty and on an RDB snapshot taken half a period
earlier; the worker is SIGKILLed twice per period at random moments.  At the end
it prints events written / delivered / duplicates / lost / reused ids (the
target: 0 lost, 0 reused ids, 0 version gaps, a final for every ended job).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import tempfile
import time
from pathlib import Path

from jobtap.cli.localredis import RedisServer
from tests.support.lossrun import LossRun


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=3.0, help="minutes between two losses")
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--seed", type=int, default=12)
    args = ap.parse_args()
    os.environ.setdefault("JOBTAP_CREDENTIALS", "/nonexistent")
    workdir = Path(tempfile.mkdtemp(prefix="jobtap-loss-soak-"))
    os.environ["XDG_STATE_HOME"] = str(workdir / "state")  # the collector's host state
    server = RedisServer(workdir / "redis").start()
    rng = random.Random(args.seed)
    run = LossRun(
        server, workdir, seed=args.seed, jobs=args.jobs, nodes=max(20, args.jobs // 10),
        strict=False, wait_cycles=60,
    )  # fmt: skip
    started = time.monotonic()
    end = started + args.minutes * 60
    period = args.every * 60
    try:
        run.start()
        n = 0
        while time.monotonic() + period <= end:
            _run_with_worker_kills(run, period / 2, rng)
            aside = run.put_aside()
            _run_with_worker_kills(run, period / 2, rng)
            if n % 2 == 0:
                run.lose_everything()
            else:
                run.go_back(aside)
            n += 1
            print(f"{(time.monotonic() - started) / 60:5.1f} min: loss {n} ({run.losses[-1]})",
                  flush=True)  # fmt: skip
        time.sleep(max(0.0, end - time.monotonic()))
    finally:
        run.finish()
        server.stop()
    took = time.monotonic() - started
    figures = run.figures()
    print(f"\nredis_loss_soak: {took / 60:.1f} min, a loss every {args.every:g} min, "
          f"{args.jobs} jobs; {platform.node()}, {os.cpu_count()} cores")  # fmt: skip
    for name, value in figures.items():
        print(f"  {name:36} {value}")
    written = figures["written"] or 1
    print(f"  {'written per second':36} {figures['written'] / took:.1f}")
    for name in ("stream", "subscriber"):
        got = figures[f"lost ({name})"]
        print(f"  {f'{name}: delivered / written':36} {1 - got / written:.4f}")


def _run_with_worker_kills(run: LossRun, seconds: float, rng: random.Random) -> None:
    """Let the pipeline run ``seconds``, killing the worker twice at random moments."""
    moments = sorted(rng.uniform(0, seconds) for _ in range(2))
    began = time.monotonic()
    for at in moments:
        time.sleep(max(0.0, began + at - time.monotonic()))
        run.worker.kill()
    time.sleep(max(0.0, began + seconds - time.monotonic()))


if __name__ == "__main__":
    main()
