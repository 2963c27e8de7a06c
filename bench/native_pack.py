"""What packing a finished job's native record saves, and what it costs the worker.

    python -m bench.native_pack [--repeat 50]

A finished job's hash keeps its native record packed (``jobtap.schema.pack_native``:
zlib level 6, then base64, in ``native_z``; docs/design-notes.md).  For the job
records of the captures in tests/fixtures (each scheduler's own JSON of a job, as
the backends store it in ``native``: PBS ``qstat -f -x -F json``, Slurm ``squeue
--json`` and ``sacct --json`` of every release captured, Flux ``flux jobs --json``),
prints per source: records, mean JSON bytes, packed bytes and their ratio, and the
CPU time of one pack (the worker, once per job: at its final) and one unpack (a
reader of the record), the best of ``--repeat`` timed passes over the records.

Then what it makes of a finished job's hash: the PBS and Slurm ``squeue --json``
records, normalised by their backend and ended (``completed``), applied through
the real ``Applier`` twice, packed and plain (``--plain-finished-native``), each
on a redis-server of its own with deploy/redis/jobtap.conf's
``hash-max-listpack-value 8192``; prints the mean ``MEMORY USAGE`` of the
hashes of each side and their ratio.
"""

from __future__ import annotations

import argparse
import gzip
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from jobtap.collector.backends import pbs
from jobtap.collector.backends.slurm import normalise_job as slurm_job
from jobtap.collector.backends.slurm import parse_squeue
from jobtap.contract.chunk import Chunk
from jobtap.keys import SiteKeys
from jobtap.schema import pack_native, unpack_native
from jobtap.sim.localredis import RedisServer
from jobtap.workers.apply import Applier, Settings

SITE = "bench"

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def jobs_in(path: Path) -> list[dict]:
    """The job objects of one capture (``Jobs`` of qstat, ``jobs`` of squeue,
    sacct and flux), or none if it holds no job list."""
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    jobs = doc.get("Jobs") or doc.get("jobs") if isinstance(doc, dict) else None
    if isinstance(jobs, dict):
        jobs = list(jobs.values())
    return [j for j in jobs or [] if isinstance(j, dict)]


def squeue_listings(release: Path) -> list[Path]:
    """A release's ``squeue --json`` captures of whole records (not the state
    probe's ids and states)."""
    return [
        p
        for p in sorted(release.glob("squeue*.json"))
        if "only-job-state" not in p.name and "state-probe" not in p.name
    ]


def sources() -> dict[str, list[str]]:
    """Source name -> the JSON text of its job records (duplicates kept once)."""
    out: dict[str, list[str]] = {}

    def add(name: str, paths: list[Path]) -> None:
        texts = {orjson.dumps(j).decode() for p in paths for j in jobs_in(p)}
        if texts:
            out[name] = sorted(texts)

    add("PBS qstat -f -x", sorted((FIXTURES / "pbs").glob("*qstat*-f*.json")))
    for release in sorted(p for p in (FIXTURES / "slurm").iterdir() if p.is_dir()):
        if release.name[:2].isdigit():
            add(f"Slurm {release.name} squeue", squeue_listings(release))
            add(f"Slurm {release.name} sacct", sorted(release.glob("sacct*.json")))
    add("Flux flux jobs", sorted((FIXTURES / "flux").glob("jobs-*.json")))
    return out


def finished_records() -> dict[str, list[dict]]:
    """Source name -> its jobs' normalised records, ended: PBS (``qstat -f -x``)
    and each Slurm release's ``squeue --json``, through their backends."""
    out: dict[str, list[dict]] = {}
    natives = {
        j.get("Job_Id") or f"{i}.pbs": j
        for p in sorted((FIXTURES / "pbs").glob("*qstat*-f*.json"))
        for i, j in enumerate(jobs_in(p))
    }
    out["PBS qstat -f -x"] = [pbs.normalise_job(i, n, tz="UTC") for i, n in natives.items()]
    for release in sorted(p for p in (FIXTURES / "slurm").iterdir() if p.is_dir()):
        if not release.name[:2].isdigit():
            continue
        jobs: dict[str, dict] = {}
        for path in squeue_listings(release):
            jobs.update(parse_squeue(path.read_bytes()))
        out[f"Slurm {release.name} squeue"] = [slurm_job(i, n) for i, n in jobs.items()]
    for records in out.values():
        for n, rec in enumerate(records):
            rec.update(site=SITE, state="completed", exit_status=0, id=f"{n}.{rec['id']}")
    return out


def hash_bytes(records: list[dict], pack: bool) -> float:
    """Mean ``MEMORY USAGE`` of these ended jobs' hashes as the workers write them."""
    server = RedisServer(args=["--hash-max-listpack-value", "8192"]).start()
    try:
        r = server.client()
        items = [{"op": "upsert", "id": rec["id"], "fp": "f", "state": rec["state"],
                  "record": rec} for rec in records]  # fmt: skip
        applier = Applier(r, Settings(pack_finished_native=pack))
        applier.apply(Chunk(SITE, 1, "2026-11-28T12:00:00+00:00", "job", items))
        keys = SiteKeys(SITE)
        sizes = [r.memory_usage(keys.job(rec["user"], rec["id"]), samples=0) for rec in records]
        assert all(sizes), "a hash was not written"
        return sum(sizes) / len(sizes)
    finally:
        server.stop()


def best_us(fn: Callable[[str], object], items: list[str], repeat: int) -> float:
    """µs per item of the fastest of ``repeat`` passes of ``fn`` over ``items``."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for item in items:
            fn(item)
        best = min(best, time.process_time() - t0)
    return 1e6 * best / len(items)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=50, help="timed passes; the best is kept")
    args = ap.parse_args()
    row = "{:<24} {:>7} {:>9} {:>9} {:>7} {:>9} {:>11}"
    print(row.format("source", "records", "JSON B", "packed B", "ratio", "pack µs", "unpack µs"))
    for name, texts in sources().items():
        packed = [pack_native(t) for t in texts]
        assert [unpack_native(p) for p in packed] == [orjson.loads(t) for t in texts]
        n = len(texts)
        plain_b, packed_b = sum(map(len, texts)) / n, sum(map(len, packed)) / n
        pack = best_us(pack_native, texts, args.repeat)
        unpack = best_us(unpack_native, packed, args.repeat)
        print(row.format(name, n, f"{plain_b:,.0f}", f"{packed_b:,.0f}",
                         f"{packed_b / plain_b:.2f}", f"{pack:.1f}", f"{unpack:.1f}"))  # fmt: skip
    print()
    row = "{:<24} {:>7} {:>12} {:>12} {:>7}"
    print("a finished job's hash, MEMORY USAGE (B), listpack (hash-max-listpack-value 8192)")
    print(row.format("source", "jobs", "plain", "packed", "ratio"))
    for name, records in finished_records().items():
        plain, packed = hash_bytes(records, pack=False), hash_bytes(records, pack=True)
        print(row.format(name, len(records), f"{plain:,.0f}", f"{packed:,.0f}",
                         f"{packed / plain:.2f}"))  # fmt: skip


if __name__ == "__main__":
    main()
