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
"""

from __future__ import annotations

import argparse
import gzip
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from jobtap.schema import pack_native, unpack_native

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
            add(f"Slurm {release.name} squeue", sorted(release.glob("squeue*.json")))
            add(f"Slurm {release.name} sacct", sorted(release.glob("sacct*.json")))
    add("Flux flux jobs", sorted((FIXTURES / "flux").glob("jobs-*.json")))
    return out


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


if __name__ == "__main__":
    main()
