"""What the site-epoch check costs Redis in every apply batch.

    python -m bench.epoch_cost [--jobs 5000] [--rounds 4] [--checks 20000]

Every apply script first runs ensure_epoch (jobtap.contract.epoch: one HMGET of meta,
INFO server, a string match).  Wall-clock throughput on a shared 2-core machine
is too noisy to show a cost this small, so this measures Redis' own CPU time per
call (INFO commandstats, usec_per_call): the apply script on batches of 50 real
changes (each with an event), and the epoch check run on its own.  The ratio of
the two is the share of each batch's Redis time the check takes.
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import redis

from jobtap.contract.chunk import Chunk, upsert
from jobtap.contract.epoch import EpochGuard
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from jobtap.workers.apply import Applier
from sim.rig.records import job_record

SITE = "cost"


def evalsha_usec(r: redis.Redis) -> tuple[int, float]:
    stats = r.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), float(stats.get("usec_per_call", 0.0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--checks", type=int, default=20_000)
    args = ap.parse_args()
    server = RedisServer(Path(tempfile.mkdtemp(prefix="jobtap-epoch-cost-")) / "redis").start()
    try:
        r = server.client()
        applier = Applier(r)
        keys = SiteKeys(SITE)
        ids = [f"{i}.pbs" for i in range(args.jobs)]
        at = datetime.now(UTC).isoformat()
        applier.apply(Chunk(SITE, 1, at, "job", [upsert(j, "fp", job_record(j, site=SITE))
                                                  for j in ids]))  # fmt: skip
        r.config_resetstat()
        for n in range(2, args.rounds + 2):
            recs = [job_record(j, site=SITE, comment=f"round {n}") for j in ids]
            applier.apply(Chunk(SITE, n, at, "job", [upsert(j, "fp", rec) for j, rec in
                                                     zip(ids, recs, strict=True)]))  # fmt: skip
        batches, batch_usec = evalsha_usec(r)
        guard = EpochGuard(r)
        r.config_resetstat()
        for _ in range(args.checks):
            guard.ensure(keys, 0)
        checks, check_usec = evalsha_usec(r)
    finally:
        server.stop()
    per_object = batch_usec / applier.settings.batch
    print(f"apply script: {batches} batches of {applier.settings.batch} changed jobs, "
          f"{batch_usec:.1f} us of Redis CPU each ({per_object:.1f} us an object)")  # fmt: skip
    print(f"epoch check on its own: {checks} calls, {check_usec:.1f} us each")
    print(f"share of a batch's Redis time: {check_usec / batch_usec:.2%}")


if __name__ == "__main__":
    main()
