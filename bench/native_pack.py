"""What packing a finished job's native record saves, and what it costs the worker.

    python -m bench.native_pack [--repeat 50]

    python -m bench.native_pack --dictionary FILE   # a new native dictionary, from the captures

A finished job's hash keeps its native record packed (``jobtap.packing``: zlib
level 6 primed with a dictionary, then base64, in ``native_zd``; before, zlib
alone in ``native_z``; docs/design-notes.md).  For the job records of the
captures in tests/fixtures (each scheduler's own JSON of a job, as the backends
store it in ``native``: PBS ``qstat -f -x -F json``, Slurm ``squeue --json`` and
``sacct --json`` of every release captured, Flux ``flux jobs --json``), prints
per source: records, mean JSON bytes, the bytes of both packed forms and their
ratio to the JSON, and the CPU time of one pack (the worker, once per job: at its
final) and one unpack (a reader of the record), the best of ``--repeat`` timed
passes over the records.  These records have no hash, so ``native_zd`` is primed
with the scheduler's part of the dictionary alone here.

Native dictionary 1 was made from some of these captures (``DICTIONARY_SOURCES``:
PBS's, Flux's, Slurm 22.05's and 24.11's); the other Slurm releases' rows are
records it was not made from.

Then what it makes of a finished job's hash: the PBS and Slurm ``squeue --json``
records, normalised by their backend and ended (``completed``), applied through
the real ``Applier`` three times, plain (``--plain-finished-native``), packed as
before (``native_z``) and as now (``native_zd``, primed with the hash's own
fields too), each on a redis-server of its own with deploy/redis/jobtap.conf's
``hash-max-listpack-value 8192``; prints the mean ``MEMORY USAGE`` of the
hashes of each side and the ratio of the two packed forms.
"""

from __future__ import annotations

import argparse
import gzip
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from jobtap.collector.backends import pbs
from jobtap.collector.backends.slurm import normalise_job as slurm_job
from jobtap.collector.backends.slurm import parse_squeue
from jobtap.contract.chunk import Chunk
from jobtap.keys import SiteKeys
from jobtap.packing import PACKED_NATIVE, pack_native, pack_zlib, unpack_native, unpack_zlib
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


def skeleton(natives: list[dict]) -> bytes:
    """One JSON object with every key of ``natives`` in the order first seen, as a
    zlib dictionary for records like them: nested objects kept, lists cut to their
    first element, numbers 0, strings of up to 8 characters kept (``"True"``,
    ``"n"``, ``"NONE"``: what recurs from job to job), longer ones emptied (paths,
    names, times: what one site's records hold)."""

    def shape(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: shape(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape(v) for v in value[:1]]
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int | float):
            return 0
        return value if len(value) <= 8 else ""

    def merge(into: dict, other: dict) -> None:
        for k, v in other.items():
            if k not in into:
                into[k] = v
            elif isinstance(into[k], dict) and isinstance(v, dict):
                merge(into[k], v)

    merged: dict = {}
    for native in natives:
        merge(merged, shape(native))
    return orjson.dumps(merged)


# What each scheduler's part of a native dictionary is made of: the captures of
# its job records (sources()).  Slurm's changed shape at 23.02 (numbers became
# {"set", "infinite", "number"}), so it takes the two Debian releases, 22.05 and
# 24.11, each sacct then squeue (the part nearest the end is the cheapest to
# refer to); the other releases' captures are left out, and measure how the
# dictionary does on records it was not made from.
DICTIONARY_SOURCES = {
    "pbs": ("PBS qstat -f -x",),
    "slurm": ("Slurm 22.05 sacct", "Slurm 22.05 squeue", "Slurm 24.11 sacct", "Slurm 24.11 squeue"),
    "flux": ("Flux flux jobs",),
}


def dictionary() -> dict[str, str]:
    """A native dictionary (``jobtap.packing``) made from the captures: each
    scheduler's part the skeletons of its sources, one after the other."""
    texts = sources()
    return {
        scheduler: b"".join(
            skeleton([orjson.loads(t) for t in texts[name]]) for name in names
        ).decode()
        for scheduler, names in DICTIONARY_SOURCES.items()
    }


class ZlibNativeApplier(Applier):
    """The workers before native dictionaries: a finished job's native record
    packed by zlib alone (``jobtap.packing.PACKED_NATIVE``, ``native_z``)."""

    def _packed_native(self, text: str, fields: dict[str, str]) -> dict[str, str]:
        return {"native": "", PACKED_NATIVE: pack_zlib(text)}


def hash_bytes(records: list[dict], pack: bool, applier: type[Applier] = Applier) -> float:
    """Mean ``MEMORY USAGE`` of these ended jobs' hashes as the workers write them."""
    server = RedisServer(args=["--hash-max-listpack-value", "8192"]).start()
    try:
        r = server.client()
        items = [{"op": "upsert", "id": rec["id"], "fp": "f", "state": rec["state"],
                  "record": rec} for rec in records]  # fmt: skip
        applier = applier(r, Settings(pack_finished_native=pack))
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
    ap.add_argument("--dictionary", type=Path, metavar="FILE",
                    help="write a native dictionary made from the captures, and stop")  # fmt: skip
    args = ap.parse_args()
    if args.dictionary:
        args.dictionary.write_bytes(orjson.dumps(dictionary(), option=orjson.OPT_INDENT_2) + b"\n")
        return
    row = "{:<24} {:>7} {:>7} {:>14} {:>14} {:>7} {:>7} {:>7} {:>7}"
    print(
        "packed bytes (and ratio to the JSON): native_z, zlib alone (before);"
        " native_zd, with the scheduler's part of native dictionary 1 (now)"
    )
    print(row.format("source", "records", "JSON B", "native_z B", "native_zd B",
                     "pack z", "pack zd", "unpk z", "unpk zd"))  # fmt: skip
    for name, texts in sources().items():
        # the dictionary's part alone: these records have no hash to prime it
        fields = {"scheduler": name.split()[0].lower()}
        zlib_form = [pack_zlib(t) for t in texts]
        primed = [pack_native(t, fields) for t in texts]
        natives = [orjson.loads(t) for t in texts]
        assert [unpack_zlib(p) for p in zlib_form] == natives
        assert [unpack_native(p, fields) for p in primed] == natives
        n = len(texts)
        plain_b = sum(map(len, texts)) / n
        z_b, zd_b = sum(map(len, zlib_form)) / n, sum(map(len, primed)) / n
        times = (
            best_us(pack_zlib, texts, args.repeat),
            best_us(partial(pack_native, fields=fields), texts, args.repeat),
            best_us(unpack_zlib, zlib_form, args.repeat),
            best_us(partial(unpack_native, fields=fields), primed, args.repeat),
        )
        print(row.format(name, n, f"{plain_b:,.0f}", f"{z_b:,.0f} ({z_b / plain_b:.2f})",
                         f"{zd_b:,.0f} ({zd_b / plain_b:.2f})",
                         *(f"{us:.1f}" for us in times)))  # fmt: skip
    print("(µs per record: pack, the worker, once per job at its final; unpack, a reader)")
    print()
    row = "{:<24} {:>7} {:>12} {:>12} {:>12} {:>7}"
    print(
        "a finished job's hash, MEMORY USAGE (B), listpack (hash-max-listpack-value 8192);"
        " native_zd primed with the hash's own fields too"
    )
    print(row.format("source", "jobs", "plain", "native_z", "native_zd", "zd/z"))
    for name, records in finished_records().items():
        plain = hash_bytes(records, pack=False)
        zlib_b = hash_bytes(records, pack=True, applier=ZlibNativeApplier)
        primed_b = hash_bytes(records, pack=True)
        print(row.format(name, len(records), f"{plain:,.0f}", f"{zlib_b:,.0f}",
                         f"{primed_b:,.0f}", f"{primed_b / zlib_b:.2f}"))  # fmt: skip


if __name__ == "__main__":
    main()
