"""Redis losing data again and again under the whole pipeline, in real time.

    python -m bench.redis_loss_soak [--minutes 30] [--every 3] [--jobs 400]

The scenario of issue 12 (sim.rig.lossrun): the sim pipeline with an
in-process collector, a real ``jobtap worker`` kept running by a supervisor, a
``client.stream()`` consumer, an ``all_jobs=True`` subscriber and a ``wait()``.
Every ``--every`` minutes Redis is SIGKILLed in the middle of the flow and
started again, alternately empty (between two cycles, the worker's next chunk
one of several batches made for the old epoch) and on an RDB snapshot taken
half a period earlier with chunks waiting in the queue (in the middle of a
cycle: observed before the loss, shipped after); the worker is SIGKILLed twice
per period at random moments.

Every event is checked against its content, not only its id: a tap reads every
entry of the site stream (with no de-duplication) and each consumer's events
are compared with what the stream held.  At the end it prints events written /
delivered / duplicates / lost / reused ids / ids with two contents (with
examples) / version gaps / ended jobs without their final, and exits 1 if any of
those is not 0 (or the wait() went wrong).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

from jobtap.sim.localredis import RedisServer
from sim.rig.lossrun import LossRun


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
        server, workdir, seed=args.seed, jobs=args.jobs, nodes=max(60, args.jobs // 10),
        strict=False, wait_cycles=60,
    )  # fmt: skip
    unfinished = ""
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
        try:
            run.finish()
        except AssertionError as exc:  # a consumer that never caught up: counted below
            unfinished = str(exc)
        server.stop()
    took = time.monotonic() - started
    figures = run.figures()
    print(f"\nredis_loss_soak: {took / 60:.1f} min, a loss every {args.every:g} min, "
          f"{args.jobs} jobs; {platform.node()}, {os.cpu_count()} cores")  # fmt: skip
    for name, value in figures.items():
        print(f"  {name:46} {value}")
    written = figures["written"] or 1
    print(f"  {'written per second':46} {figures['written'] / took:.1f}")
    for name in ("stream", "subscriber"):
        got = figures[f"lost ({name})"]
        print(f"  {f'{name}: delivered / written':46} {1 - got / written:.4f}")
    failures = {name: figures[name] for name in FAILURES if figures[name]}
    if not figures["wait() right"]:
        failures["wait() right"] = False
    if unfinished:
        failures["finish"] = unfinished
    for eid in run.written.two_contents(10):
        print(f"  two contents: {eid}")
    for name, got in (("stream", run.streamed), ("subscriber", run.subscribed)):
        for eid in got.reused[:5]:
            print(f"  {name} got {eid} with two contents")
    for key, versions in run.written.version_gaps()[:5]:
        print(f"  versions of {key}: {versions}")
    print(f"FAIL: {failures}" if failures else "PASS")
    sys.exit(1 if failures else 0)


# Figures that must be 0 (LossRun.figures()).
FAILURES = (
    "lost (stream)",
    "lost (subscriber)",
    "reused ids (written twice)",
    "ids with two contents",
    "version gaps",
    "ended without a final (subscriber)",
)


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
