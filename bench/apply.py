"""How many changed jobs one worker applies per second into one Redis.

    python -m bench.apply [--jobs 20000] [--chunk 500] [--rounds 3] [--metrics | --compare]
    python -m bench.apply --jobs 20000 --rounds 6 --against [REV]
    python -m bench.apply --jobs 20000 --rounds 4 --event-versions
    python -m bench.apply --jobs 20000 --rounds 4 --each-byte-once
    python -m bench.apply --jobs 20000 --profile
    python -m bench.apply --jobs 20000 --rounds 4 --config-side "hash-max-listpack-value 8192"

Starts its own redis-server on a free port.  Round 1 applies ``--jobs`` new jobs;
each later round changes every one of them (a state change and new
resources_used), so every item is a real diff with an event.  Measured twice:
the apply function called directly (the worker's own cost), and through rq
(collector's enqueue_many + one SimpleWorker in burst mode), which is what a
site runs.  Target: >= 10,000 changed jobs/s.  Beside each rate: Redis' own CPU
time per applied change (``INFO cpu``, used_cpu_sys + used_cpu_user of
redis-server, before and after), which a shared machine's load moves far less
than the wall clock; every applied change here writes one event.

``--metrics``: the worker counts every chunk in its Prometheus series, as
``jobtap worker --metrics-port`` does.  ``--compare``: rounds of changes applied
directly, alternately without and with metrics, on the same Redis; prints the
median rate of each and their ratio (target: metrics cost under 5%).

``--against REV``: the apply step of commit ``REV`` (its ``workers/`` package,
taken from git into a temporary folder and imported under another name; by
default ``HEAD``, so that a change not yet committed is measured against the
tree without it; the SDK's contract, which both sides share, comes from this
tree, so a revision whose workers need another contract does not import)
beside this tree's, on the same records, each on a redis-server of its own,
rounds alternated ABBA.  Prints Redis CPU µs per change (``INFO cpu``) and
changes/s of each side, and their ratio.  Needs a git checkout.

``--event-versions``: this tree's apply step writing events of format 1 (the
whole record, ``jobtap worker --event-version 1``) and of format 2 (no native
record, the default) the same way as ``--against``: on the same records, each
on a redis-server of its own, rounds alternated ABBA; prints Redis CPU µs and
worker CPU µs per change of each, the mean size of an event, and their ratios.

``--each-byte-once``: the same for format-2 events as they were before they held
each byte once (``RepeatingApplier``: the whole record less native, and
``changes``) and as they are (the lean record and ``was``).

``--profile``: where Redis' time goes in a round of changes: ``INFO
commandstats`` per change (the script's own commands counted inside
``evalsha``'s time too), then Redis' CPU for parts of that work sent on their
own: the reads (HGETALL of every record), the scripts' arguments handed to a
script that does nothing (what bringing them into Lua costs), and a round
applied in full; and the floor: the own time inside Redis of the read and the
writes each change needs (HGETALL, HSET, XADD, PUBLISH), which no write path
that keeps the contract goes below.  Then where the worker's CPU goes in that
round: each of its C libraries' parts (orjson decoding the chunks, hiredis
parsing the records read back, orjson on the native records and the events,
hiredis packing the scripts' arguments) done again on its own on the same data,
and the rest, the worker's Python.

``--redis-config "NAME VALUE"`` (repeatable): every redis-server the bench starts runs
with that directive too (as a redis.conf line says it).  ``--config-side "NAME VALUE"``
(repeatable): this tree's apply step on two redis-servers, one as ``--redis-config``
leaves it ("default") and one with these directives too ("config"), rounds alternated
ABBA as ``--against`` does; prints the same figures, the job hashes' encoding and
``used_memory`` of each side, and their ratios.  ``--pad-native BYTES``: each job's
native record grows by about that many bytes (``Variable_List``), to measure a
Slurm-sized record (the fixture's PBS records are about 1.1 KB of JSON).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import importlib
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from hiredis import pack_command

from jobtap.collector.backends.pbs import normalise_job
from jobtap.collector.ship import Shipper, chunked
from jobtap.contract.chunk import Chunk
from jobtap.entries import resolve
from jobtap.events import NEW, Event, event_id, split_native
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from jobtap.workers.apply import Applier, Settings
from jobtap.workers.metrics import WorkerMetrics, note_in_meta
from jobtap.workers.service import run_worker, tune_gc
from sim.rig.paths import fixtures_dir

SITE = "bench"
FIXTURE = fixtures_dir() / "pbs" / "bench-5000.qstat-f.json.gz"
BEFORE = "HEAD"  # --against without a revision: the last commit


def redis_cpu(r) -> float:
    """Seconds of CPU redis-server has used (system + user), from ``INFO cpu``."""
    cpu = r.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


def sample_natives(n: int, pad: int = 0) -> list[tuple[str, dict]]:
    """``n`` real PBS job records (the 5,000-job fixture, repeated with new ids);
    with ``pad``, each one's ``Variable_List`` grows by about that many bytes of
    environment (as ``qsub -V`` exports a login's), so that ``native`` is as large
    as a Slurm job's (``squeue --json``: up to 6 KB in tests/fixtures/slurm)."""
    jobs = list(orjson.loads(gzip.open(FIXTURE).read())["Jobs"].values())
    users = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
    out = []
    for i in range(n):
        native = copy.deepcopy(jobs[i % len(jobs)])
        native["Job_Owner"] = f"{users[i % len(users)]}@vm"
        for v in range(pad // 64):  # 64 bytes of JSON each: "BENCH_VAR_0001":"xxx...",
            native["Variable_List"][f"BENCH_VAR_{v:04d}"] = f"{i}-{v}".ljust(44, "x")
        out.append((f"{i}.vm", native))
    return out


def records_for_round(natives, rnd: int, site: str = SITE) -> list[dict]:
    items = []
    for jid, native in natives:
        if rnd > 0:
            native["job_state"] = "R" if rnd % 2 else "Q"
            native["resources_used"] = {"walltime": f"00:00:{rnd:02d}", "cput": rnd}
        rec = normalise_job(jid, native, tz="UTC")
        rec["site"] = site
        items.append(
            {"op": "upsert", "id": jid, "fp": f"fp{rnd}", "state": rec["state"], "record": rec}
        )
    return items


def apply_round(applier, natives, chunk: int, rnd: int, r=None) -> tuple[float, float, float]:
    """Apply round ``rnd`` (cycle ``rnd + 1``) directly; return objects per second
    of wall time and of this process's CPU time, and Redis' CPU µs per object
    (if ``r``, the applier's Redis, is given; else 0)."""
    payloads = round_payloads(natives, chunk, rnd)
    s0 = redis_cpu(r) if r is not None else 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    for p in payloads:
        applier.apply(Chunk.decode(p))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = len(natives)
    server_us = 1e6 * (redis_cpu(r) - s0) / n if r is not None else 0.0
    return n / wall, n / cpu, server_us


def round_payloads(natives, chunk: int, rnd: int) -> list[bytes]:
    """The chunks (encoded, as the collector ships them) of round ``rnd``, cycle ``rnd + 1``."""
    return [
        Chunk(SITE, rnd + 1, "2026-11-21T15:00:00+00:00", "job", list(part)).encode()
        for part in chunked(records_for_round(natives, rnd), chunk)
    ]


def bench_direct(r, natives, chunk: int, rounds: int, metrics: bool) -> list[tuple[float, float]]:
    """(changes/s, Redis CPU µs per change) of each round."""
    applier = Applier(r, metrics=WorkerMetrics() if metrics else None)
    out = []
    for rnd in range(rounds):
        rate, _, server_us = apply_round(applier, natives, chunk, rnd, r)
        out.append((rate, server_us))
    return out


def applier_at(rev: str) -> type:
    """The ``Applier`` class of commit ``rev``: its ``workers/`` folder from git,
    imported as a package of another name (its own script, diff and writes; the
    SDK's contract, which both share, from this tree)."""
    repo = Path(__file__).resolve().parent.parent
    names = subprocess.run(["git", "-C", str(repo), "ls-tree", "--name-only", f"{rev}:workers"],
                           check=True, capture_output=True, text=True).stdout.split()  # fmt: skip
    name = f"jobtap_workers_{rev.replace('/', '_').replace('~', '_').replace('^', '_')}"
    folder = Path(tempfile.mkdtemp(prefix="jobtap-bench-apply-")) / name
    folder.mkdir()
    for f in names:
        if f.endswith((".py", ".lua")):
            blob = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:workers/{f}"],
                                  check=True, capture_output=True).stdout  # fmt: skip
            (folder / f).write_bytes(blob)
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert spec is not None and spec.loader is not None
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    applier = importlib.import_module(f"{name}.apply").Applier
    shutil.rmtree(folder.parent)  # all it needs is imported (apply.py reads its script at import)
    return applier


def config_args(directives: list[str]) -> list[str]:
    """redis-server's command-line arguments for ``"name value"`` directives, as a
    redis.conf line says them (``"hash-max-listpack-value 8192"``)."""
    out = []
    for d in directives:
        name, _, value = d.strip().partition(" ")
        out += [f"--{name}", *value.split()]
    return out


@dataclass
class Side:
    """One side of a side-by-side run: what makes its apply step from a Redis
    client (an ``Applier`` class, or a function giving it settings) and its
    redis-server's extra configuration (``config_args``)."""

    applier: Callable
    server_args: list[str] = field(default_factory=list)


class RepeatingApplier(Applier):
    """This tree's apply step writing format-2 events as they were before they held
    each byte once (fe177a0): the whole record less ``native`` (the envelope's
    fields and the ``null``s in it again), and ``changes``, ``{attr: [old, new]}``,
    in place of ``was``."""

    def _event(self, **what: Any) -> Event:
        changes, native_changed = split_native(what["changes"])
        event: Event = {
            "id": event_id(what["site"], what["epoch"], what["kind"], what["object_id"],
                           what["version"]),
            **{k: what[k] for k in ("site", "epoch", "kind", "type", "object_id", "user",
                                    "version", "observed_at")},
            "changes": changes,
            "record": {k: v for k, v in what["record"].items() if k != "native"},
            "event_version": 2,
        }  # fmt: skip
        if native_changed and what["type"] != NEW:
            event["native_changed"] = native_changed
        return event


def each_byte_once(base: list[str]) -> dict[str, Side]:
    """Format-2 events as they were (``RepeatingApplier``) and as they are."""
    return {"repeating": Side(RepeatingApplier, base), "once": Side(Applier, base)}


def event_versions(base: list[str]) -> dict[str, Side]:
    """This tree's apply step writing events of format 1 (the whole record) and
    of format 2 (no native record)."""
    return {
        "format 1": Side(lambda r: Applier(r, Settings(event_version=1)), base),
        "format 2": Side(lambda r: Applier(r, Settings(event_version=2)), base),
    }


def side_by_side(natives, chunk: int, rounds: int, sides: dict[str, Side], about: str) -> None:
    """Two sides on the same records, each on a redis-server of its own (same
    streams, same hashes): a first round of new jobs, then rounds of changes in
    ABBA order.  Prints Redis' and the worker's CPU per change, changes/s and the
    mean event's bytes of each, the ratios of the second to the first, the job
    hashes' encoding and ``used_memory``."""
    a, b = sides
    servers = {k: RedisServer(args=s.server_args).start() for k, s in sides.items()}
    try:
        clients = {k: servers[k].client() for k in sides}
        appliers = {k: s.applier(clients[k]) for k, s in sides.items()}
        results: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sides}
        new = {k: apply_round(appliers[k], natives, chunk, 0, clients[k]) for k in sides}
        # the same cycle on both sides: each round's records are made once per side
        for i in range(2 * rounds):
            order = (a, b) if (i // 2) % 2 == 0 else (b, a)
            k = order[i % 2]
            results[k].append(apply_round(appliers[k], natives, chunk, 1 + i // 2, clients[k]))
        keys = SiteKeys(SITE)
        events = {k: clients[k].xlen(keys.events) for k in sides}
        sizes = {k: event_bytes(clients[k], keys.events) for k in sides}
        encodings = {k: job_encodings(clients[k], natives) for k in sides}
        memory = {k: clients[k].info("memory")["used_memory"] for k in sides}
    finally:
        for server in servers.values():
            server.stop()
    print(f"jobs: {len(natives):,}, chunk size: {chunk}, {rounds} rounds of changes each (ABBA); "
          f"{about}")  # fmt: skip
    print("side      new jobs: Redis µs/change  changes/s | changes: Redis µs/change (each round)"
          "   median   changes/s median   worker CPU µs/change median   event bytes")  # fmt: skip
    med = {}
    for k in sides:
        server_us = [x for _, _, x in results[k]]
        rates = [w for w, _, _ in results[k]]
        worker_us = statistics.median(1e6 / c for _, c, _ in results[k])
        med[k] = (statistics.median(server_us), statistics.median(rates), worker_us)
        print(f"{k:<8}  {new[k][2]:>26.1f} {new[k][0]:>10,.0f} | "
              + " ".join(f"{x:.1f}" for x in server_us)
              + f"   {med[k][0]:.1f}   {med[k][1]:,.0f}   {worker_us:.1f}"
              + f"   {sizes[k]:,.0f}")  # fmt: skip
    print(f"{b} / {a}: Redis CPU per change {med[b][0] / med[a][0]:.2f}x (new jobs "
          f"{new[b][2] / new[a][2]:.2f}x), worker CPU per change {med[b][2] / med[a][2]:.2f}x, "
          f"event bytes {sizes[b] / sizes[a]:.2f}x, "
          f"changes/s {med[b][1] / med[a][1]:.2f}x")  # fmt: skip
    print("events in each site stream: " + ", ".join(f"{events[k]:,} {k}" for k in sides))
    for k in sides:
        enc = ", ".join(f"{e} {n:,}" for e, n in encodings[k].most_common())
        print(f"{k}: job hashes {enc}; used_memory {memory[k] / 1e6:,.1f} MB")
    print(f"used_memory {b} / {a}: {memory[b] / memory[a]:.2f}x")


def event_bytes(r, stream: str, sample: int = 1000) -> float:
    """The mean size of the last ``sample`` events of ``stream`` (their JSON)."""
    entries = resolve(r, r.xrevrange(stream, count=sample))
    return statistics.mean(len(f[b"event"]) for _, f in entries if f) if entries else 0.0


def job_encodings(r, natives, sample: int = 1000) -> Counter[str]:
    """``OBJECT ENCODING`` of up to ``sample`` of the job hashes, spread over them."""
    keys = SiteKeys(SITE)
    step = max(1, len(natives) // sample)
    pipe = r.pipeline(transaction=False)
    for jid, native in natives[::step]:
        pipe.object("encoding", keys.job(native["Job_Owner"].split("@")[0], jid))
    return Counter((e or b"none").decode() for e in pipe.execute())


def hook_costs(r, chunk: int, calls: int = 2_000) -> tuple[float, float]:
    """Seconds one chunk's metrics take (``WorkerMetrics.chunk_applied``), and
    its counts in ``meta`` (``note_in_meta``, one round trip, metrics or not)."""
    metrics = WorkerMetrics()
    totals = {"events": chunk, "skipped": 0, "objects": chunk, "conflicts": 0, "state": chunk}
    t0 = time.perf_counter()
    for _ in range(calls):
        metrics.chunk_applied(SITE, "job", totals, 0.05, 0.5)
    t1 = time.perf_counter()
    for _ in range(calls):
        note_in_meta(r, SiteKeys(SITE), totals, "2026-11-21T15:00:00+00:00", 0.5)
    return (t1 - t0) / calls, (time.perf_counter() - t1) / calls


def compare(r, natives, chunk: int, pairs: int) -> None:
    """Rounds without and with metrics in ABBA order (after a first round of new
    jobs), timed by the wall clock and by this process's CPU time (what the
    metrics add to; steadier on a shared machine)."""
    off, on = Applier(r), Applier(r, metrics=WorkerMetrics())
    apply_round(off, natives, chunk, 0)
    rates: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
    for i in range(2 * pairs):
        which = ("off", "on")[i % 2] if (i // 2) % 2 == 0 else ("on", "off")[i % 2]
        rates[which].append(apply_round(off if which == "off" else on, natives, chunk, i + 1)[:2])
    print(f"jobs per round: {len(natives)}, chunk size: {chunk}, {pairs} rounds each (ABBA)")
    med = {}
    for k in ("off", "on"):
        wall = [w for w, _ in rates[k]]
        cpu = [c for _, c in rates[k]]
        med[k] = (statistics.median(wall), statistics.median(cpu))
        print(f"metrics {k:<3}  changed jobs/s: " + " ".join(f"{x:,.0f}" for x in wall)
              + f"   median {med[k][0]:,.0f}; per CPU second: median {med[k][1]:,.0f}")  # fmt: skip
    for i, what in enumerate(("wall clock", "CPU time")):
        ratio = med["on"][i] / med["off"][i]
        print(f"metrics on / off ({what}, median): {ratio:.3f}x (cost {100 * (1 - ratio):+.1f}%)")
    per_chunk, in_meta = hook_costs(r, chunk)
    wall_per_chunk = chunk / med["off"][0]
    print(
        f"the metrics of one chunk: {per_chunk * 1e6:.1f} us, "
        f"{100 * per_chunk / wall_per_chunk:.3f}% of applying it; its counts in meta (with "
        f"or without metrics): {in_meta * 1e6:.0f} us, {100 * in_meta / wall_per_chunk:.2f}%"
    )


def bench_rq(
    r, natives, chunk: int, rounds: int, first_cycle: int, metrics: bool
) -> list[tuple[float, float]]:
    """(changes/s, Redis CPU µs per change) of each round; Redis' CPU counts rq's
    own commands too (the queue is on the same server)."""
    shipper = Shipper(r, SiteKeys(SITE), chunk_size=chunk)
    out = []
    for rnd in range(rounds):
        items = records_for_round(natives, rnd + first_cycle)
        shipper.ship(first_cycle + rnd + 1, "2026-11-21T15:00:00+00:00", {("state", "job"): items})
        s0, t0 = redis_cpu(r), time.perf_counter()
        run_worker(r, r, SITE, burst=True, metrics=WorkerMetrics() if metrics else None)
        wall = time.perf_counter() - t0
        out.append((len(items) / wall, 1e6 * (redis_cpu(r) - s0) / len(items)))
    return out


def profile(natives, chunk: int, server_args: list[str]) -> None:
    """Where Redis' CPU goes in a round of changes (see the module's docstring)."""
    server = RedisServer(args=server_args).start()
    try:
        r = server.client()
        applier = Applier(r)
        keys = SiteKeys(SITE)
        apply_round(applier, natives, chunk, 0, r)
        apply_round(applier, natives, chunk, 1, r)
        n = len(natives)
        # the script calls of round 3, planned but not sent
        dest = applier.destinations.for_site(keys)
        calls, plans, okeys, events, arg_bytes = [], [], [], 0, 0
        for payload in round_payloads(natives, chunk, 2):
            c = Chunk.decode(payload)
            reads = applier._read(dest, keys, c)
            okeys += [okey for _, _, okey, _ in reads]
            for b in range(0, len(reads), applier.settings.batch):
                plan = applier._plan(keys, c, reads[b : b + applier.settings.batch])
                kargs, argv = applier._args(keys, c, plan)
                calls.append((kargs, argv))
                plans.append(plan)
                events += sum(1 for item in plan.items if item.etype)
                arg_bytes += sum(len(a) for a in (*kargs, *argv) if isinstance(a, bytes | str))
        noop = r.script_load("return 0")

        def cpu_of(send) -> float:
            pipe = r.pipeline(transaction=False)
            s0 = redis_cpu(r)
            send(pipe)
            pipe.execute()
            return 1e6 * (redis_cpu(r) - s0) / n

        reads_us = cpu_of(lambda p: [p.hgetall(k) for k in okeys])
        args_us = cpu_of(lambda p: [p.evalsha(noop, len(k), *k, *a) for k, a in calls])
        r.config_resetstat()
        _, worker_rate, full_us = apply_round(applier, natives, chunk, 2, r)
        stats = r.info("commandstats")

        def plain(p, check: bool = True) -> None:  # the writes without a script, unchecked
            s = applier.settings
            for plan in plans:
                for item in plan.items:
                    if check:  # what the script reads to check (compared by nobody here)
                        p.hmget(item.key, "version", "epoch", "cycle")
                    p.hset(item.key, mapping=item.fields)
                    entry = {"id": item.eid, "type": item.etype, "event": item.json}
                    named = {"id": item.eid, "type": item.etype, "stream": item.stream}
                    p.xadd(keys.events, named, maxlen=s.site_maxlen, approximate=True)  # type: ignore[arg-type]
                    p.xadd(item.stream, entry)  # type: ignore[arg-type]
                    p.publish(item.channel, item.json)
                    p.publish(keys.all_channel, item.json)

        plain_us = cpu_of(plain)
        writes_us = cpu_of(lambda p: plain(p, check=False))
        worker_us = 1e6 / worker_rate
        library_us = library_costs(applier, keys, dest, natives, chunk, calls)
    finally:
        server.stop()
    print(f"jobs: {n:,}, chunk size: {chunk}, batches of {applier.settings.batch}; a round of "
          f"changes: {events:,} events, {arg_bytes / n:,.0f} bytes of script arguments "
          f"per change")  # fmt: skip
    print("INFO commandstats of that round (µs: time inside Redis, wall clock)")
    print("command                 calls/change   µs/call   µs/change")
    for name, st in sorted(stats.items(), key=lambda kv: -float(kv[1]["usec"])):
        if float(st["usec"]) / n >= 0.05:
            print(f"{name.removeprefix('cmdstat_'):<22} {st['calls'] / n:>13.2f} "
                  f"{float(st['usec_per_call']):>9.1f} {float(st['usec']) / n:>11.2f}")  # fmt: skip
    print("Redis CPU (INFO cpu) per change:")
    print(f"  the whole round (reads, scripts, writes):           {full_us:6.1f} µs")
    print(f"  its reads alone (HGETALL of each record):           {reads_us:6.1f} µs")
    print(f"  its script arguments alone, to a script doing nothing: {args_us:6.1f} µs")
    print(f"  its writes as plain pipelined commands (HMGET, HSET, 2 XADD, 2 PUBLISH; no"
          f" script, nothing checked): {plain_us:.1f} µs")  # fmt: skip
    print(f"  the writes alone as plain pipelined commands (HSET, 2 XADD, 2 PUBLISH; no"
          f" read, no check, no script): {writes_us:.1f} µs")  # fmt: skip
    needed = sum(float(st["usec"]) for name, st in stats.items()
                 if name.removeprefix("cmdstat_") in CHANGE_COMMANDS) / n  # fmt: skip
    print(f"  the floor: the read and the writes each change needs, their own time inside "
          f"Redis (no script, no check, no network; commandstats of "
          f"{', '.join(c.upper() for c in CHANGE_COMMANDS)}): {needed:.1f} µs")  # fmt: skip
    print(f"Worker CPU per change in that round: {worker_us:.1f} µs; of it, the same work "
          f"done again by the C libraries alone, on the same data:")  # fmt: skip
    for what, us in library_us.items():
        print(f"  {what:<58} {us:6.1f} µs")
    rest = worker_us - sum(library_us.values())
    print(f"  {'the C libraries together':<58} {sum(library_us.values()):6.1f} µs")
    print(f"  {'the rest: the diff, the events, the bookkeeping (Python)':<58} {rest:6.1f} µs")


# The read a change's diff needs and the writes the contract asks of it (the hash,
# the site's and the user's streams, the user's and the site's channels): what
# any write path that keeps today's contract runs for each change, whatever
# checks it before writing (apply.lua: HMGET).
CHANGE_COMMANDS = ("hgetall", "hset", "xadd", "publish")


def library_costs(applier, keys, dest, natives, chunk: int, calls) -> dict[str, float]:
    """CPU µs per change that the worker's C libraries take for round 3's work,
    each part done again on its own: orjson decoding the chunks, hiredis
    parsing the records read back (with the dicts made of them), orjson
    encoding and decoding the native records (the new one for the hash, the
    stored one for the diff), orjson encoding the events, hiredis packing the
    scripts' arguments."""
    items = records_for_round(natives, 2)
    payloads = round_payloads(natives, chunk, 2)
    okeys = [keys.job(it["record"]["user"], it["id"]) for it in items]
    stored = dest.read_hashes(okeys)
    natives_new = [it["record"]["native"] for it in items]
    natives_stored = [h["native"] for h in stored]
    events = [orjson.loads(a) for _, argv in calls for a in argv if isinstance(a, bytes)]

    def cpu(work: Callable[[Any], Any], over: list) -> float:
        """CPU µs per change of ``work`` on each of ``over``, whose results are
        dropped as they come, as the worker drops a chunk's (a list of them
        would make the run pay for growing the heap)."""
        c0 = time.process_time()
        for x in over:
            work(x)
        return 1e6 * (time.process_time() - c0) / len(items)

    per_chunk = [okeys[i : i + chunk] for i in range(0, len(okeys), chunk)]
    return {
        "decoding the chunks (orjson)": cpu(Chunk.decode, payloads),
        "reading the records back (hiredis, the dicts)": cpu(dest.read_hashes, per_chunk),
        "encoding the new native records (orjson)": cpu(orjson.dumps, natives_new),
        "decoding the stored native records (orjson)": cpu(orjson.loads, natives_stored),
        "encoding the events (orjson)": cpu(orjson.dumps, events),
        "packing the scripts' arguments (hiredis)": cpu(
            lambda call: pack_command(("EVALSHA", "0" * 40, len(call[0]), *call[0], *call[1])),
            calls,
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--metrics", action="store_true", help="count in Prometheus series")
    ap.add_argument("--compare", action="store_true", help="metrics off and on, alternated")
    ap.add_argument("--profile", action="store_true", help="where Redis' CPU goes")
    ap.add_argument("--against", nargs="?", const=BEFORE, metavar="REV",
                    help=f"commit REV's apply step beside this one (default {BEFORE})")  # fmt: skip
    ap.add_argument("--each-byte-once", action="store_true",
                    help="format-2 events as before each byte once, and as they are")  # fmt: skip
    ap.add_argument("--event-versions", action="store_true",
                    help="events of format 1 and of format 2 side by side")  # fmt: skip
    ap.add_argument(
        "--redis-config",
        action="append",
        default=[],
        metavar="'NAME VALUE'",
        help="a redis.conf directive for every redis-server (repeatable)",
    )
    ap.add_argument(
        "--config-side",
        action="append",
        default=[],
        metavar="'NAME VALUE'",
        help="this apply step on a server without and one with these directives",
    )
    ap.add_argument("--pad-native", type=int, default=0, metavar="BYTES",
                    help="grow each job's native record by about BYTES")  # fmt: skip
    args = ap.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING)
    natives = sample_natives(args.jobs, args.pad_native)
    tune_gc()  # what `jobtap worker` does at start; also keeps the bench's own data out of GC
    base = config_args(args.redis_config)
    if args.against:
        sides = {"before": Side(applier_at(args.against), base), "after": Side(Applier, base)}
        about = f"before = {args.against}, after = this tree"
        side_by_side(natives, args.chunk, args.rounds, sides, about)
        return
    if args.config_side:
        config = config_args(args.config_side)
        sides = {"default": Side(Applier, base), "config": Side(Applier, base + config)}
        about = f"default = {base or 'redis-server as built'}, config = {base + config}"
        side_by_side(natives, args.chunk, args.rounds, sides, about)
        return
    if args.each_byte_once:
        about = ("repeating: format-2 events as before each byte once (the whole record, "
                 "changes), once: as they are (the lean record, was)")  # fmt: skip
        side_by_side(natives, args.chunk, args.rounds, each_byte_once(base), about)
        return
    if args.event_versions:
        about = "format 1: events with the whole record, format 2: without the native record"
        side_by_side(natives, args.chunk, args.rounds, event_versions(base), about)
        return
    if args.profile:
        profile(natives, args.chunk, base)
        return
    server = RedisServer(args=base).start()
    try:
        r = server.client()
        if args.compare:
            compare(r, natives, args.chunk, max(3, args.rounds))
            return
        direct = bench_direct(r, natives, args.chunk, args.rounds, args.metrics)
        via_rq = bench_rq(r, natives, args.chunk, args.rounds, args.rounds, args.metrics)
        print(f"jobs per round: {args.jobs}, chunk size: {args.chunk}, redis-server on one core,"
              f" metrics {'on' if args.metrics else 'off'}")  # fmt: skip
        print("round  kind                     direct apply/s (Redis µs/change)"
              "  through rq/s (Redis µs)")  # fmt: skip
        for i, ((d, d_us), (q, q_us)) in enumerate(zip(direct, via_rq)):
            kind = "new jobs" if i == 0 else "state+usage changes"
            print(f"{i + 1:>5}  {kind:<24} {d:>14,.0f} ({d_us:>5.1f})  {q:>14,.0f} ({q_us:>5.1f})")
        changed = direct[1:] or direct
        direct_mean = sum(d for d, _ in changed) / len(changed)
        direct_us = statistics.median(x for _, x in changed)
        rq_mean = sum(q for q, _ in via_rq) / len(via_rq)
        rq_us = statistics.median(x for _, x in via_rq)
        print(f"changed jobs/s (direct, mean of changed rounds): {direct_mean:,.0f}; "
              f"Redis CPU {direct_us:.1f} µs per change (median)")  # fmt: skip
        print(f"changed jobs/s (through rq, mean):               {rq_mean:,.0f}; "
              f"Redis CPU {rq_us:.1f} µs per change (median)")  # fmt: skip
        print(f"ratio to the 10,000/s target (through rq):       {rq_mean / 10_000:.2f}x")
        print(f"Redis alone at that CPU cost could take about {1e6 / rq_us:,.0f} changes/s "
              f"(one core, nothing else on it)")  # fmt: skip
        print(f"events in the site stream: {r.xlen(SiteKeys(SITE).events):,}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
