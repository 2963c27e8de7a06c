"""Redis memory of a simulated PBS site at the workers' default retention.

    python -m bench.memory [--jobs 100000] [--users 200] [--interval 30] [--usage-interval 600]
    python -m bench.memory --jobs 10000          # a quick run (about a minute a side)
    python -m bench.memory --jobs 20000 --sides "format 2,format 2 + listpack"

Fills a redis-server of its own like a site whose last ``--jobs`` jobs are within the
retention of a finished job's hash (2 days by default), through the real worker path
(``Applier``), then prints ``INFO memory`` and where the bytes are, by key kind.

The site is the simulator (``jobtap.sim``), not the 5,000-job fixture that bench.apply
repeats: the fixture's jobs are all held, so they never get the fields a job gains as it
lives (``exec_host``, ``exec_vnode``, ``resources_used``, ``stime``, ``Exit_status``,
``obittime``, the scheduler's comments), while the simulator renders every stage of a
life exactly as OpenPBS 23.06 prints it, with a site's mix: arrays, holds, ``qdel`` of
queued and running jobs, failures, walltime kills, node outages.  Its records are the
same size as the fixture's (about 1.4 KB of JSON a queued job).  A mini-collector drives
it in virtual time, the steps of the collector's probe tier: every ``--interval``
virtual seconds (30; ``jobtap collector``'s default is 5 s, which only adds the events
of states shorter than 30 s, a few exiting ones, and makes the fill 4 times as long:
most of it is then the worker's fixed cost per chunk) the jobs whose record changed
(``qselect -t m.gt.T`` with 2 s of overlap), their records (live, or from history when
they finished), the collector's own fingerprints (``fingerprint_all``) and normaliser
(PBS's ``normalise_job``), an upsert of each job whose fingerprint moved (a finished one
with ``live=False``, so its fingerprint is dropped as a reconciliation would), in chunks
of 1,000; every 30 virtual seconds (the collector's 6 cycles of 5 s) the nodes and
queues (``pbsnodes -av``, ``qstat -Q -f``) the same way.  Each chunk goes straight to
``Applier.apply``: no rq, no collector's ``meta`` health.  So every job goes through its
life (new, held or queued, running with usage updates, exiting, final: completed, failed
or cancelled) and the streams hold what a site's would.

The site: ``--users`` users (200 by default: a mid-sized site's active users over two
days) drawing jobs with the simulator's Zipf-like weights (1/rank^0.8: the busiest user
submits about 10% of the jobs, the median one 0.3%); ``--jobs // 10`` jobs live at any
time (the simulator keeps the live count there); as many 16-cpu nodes as run ``--jobs``
jobs in the retention (1,488 for 100,000 jobs, which the simulator then gets through in
36.5 virtual hours) and the simulator's two queues.  A running job's ``resources_used``
moves every ``--usage-interval`` virtual seconds (600 by default: about 5 updates a job;
a real MoM reports every minute or two, which would make ten times as many update
events, fill the users' streams up to their cap of ``user_maxlen`` for far more users,
and make the fill last an hour).  The fill stops at the cycle in which the ``--jobs``-th
job was first seen.  At 100,000 jobs it applies about 960,000 events and takes 8 min 36 s
a side on the project's 2-core machine shared with other work (load average 3;
docs/performance.md); events and expiry times are stamped with the wall clock, so
nothing is trimmed by age and no hash expires.

With the fill, the CPU redis-server spent in it (``INFO cpu``) per event applied: the
sides are filled one after the other, not alternated, so a shared machine's load moves it
more than ``bench.apply --config-side`` (ABBA) is moved.

What it prints, after the fill (``MEMORY USAGE key SAMPLES 0`` of every key, over a
``SCAN``): ``used_memory``, ``used_memory_dataset`` and the RSS; the bytes of each key
kind (named after ``jobtap.keys.SiteKeys``, whose key names it matches, split into the
live and the finished job hashes by their TTL) with their share and the bytes per event
in each stream and per job hash, and the hashes' encodings.  ``MEMORY USAGE`` of a stream
counts its radix tree generously (about 10% over), so the bench also deletes each kind's
keys in turn at the end and prints how much ``used_memory`` fell: what the allocator
really gave each kind.  Then a job hash field by field, what in it is held twice, and
what other ways of storing it would take: the same fields written again as they are,
under a ``hash-max-listpack-value`` large enough for a listpack (``CONFIG SET`` on the
bench's own server, restored after), with ``native`` in a key of its own, without the
fields held twice, and ``native`` alone (copies of a sample of the hashes in database 1,
under the same key names, deleted after).

Sides: ``SIDES`` maps a name to a ``Side``: the workers' ``Settings`` and the redis.conf
directives its redis-server runs with ("format 1": events with the whole record, native
included, as before event format 2; "format 2": the default, lean events; "format 2 +
listpack": the same with deploy/redis/jobtap.conf's ``hash-max-listpack-value``); each
side is filled the same way (same seed, same records) on a redis-server of its own, one
after the other, and the breakdowns are printed side by side with the ratio of
``used_memory`` of each side to the first.  Adding a side is one line there; ``--sides
"format 1,format 2"`` runs only those (all by default).
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import shutil
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from bench.apply import RepeatingApplier, applier_at, config_args, redis_cpu
from bench.native_pack import ZlibNativeApplier
from jobtap.collector.backends.pbs import normalise_job, normalise_node, normalise_queue
from jobtap.collector.cycle import CycleReport, compare, normalise_many
from jobtap.collector.fingerprint import fingerprint_all
from jobtap.collector.ledger import Seen
from jobtap.collector.ship import chunked
from jobtap.contract import chunk as contract
from jobtap.contract.chunk import Chunk
from jobtap.entries import EVENT
from jobtap.keys import SiteKeys
from jobtap.packing import NATIVE_FORMS, native_of
from jobtap.schema import BOOKKEEPING, JOB, NODE, QUEUE, TERMINAL
from jobtap.sim import Simulation
from jobtap.sim.localredis import RedisServer
from jobtap.sim.model import DEFAULT_USERS
from jobtap.workers.apply import Applier, Settings
from jobtap.workers.service import tune_gc

SITE = "hpc1"
MB = 1e6


@dataclass(frozen=True)
class Side:
    """What a side is: the workers' Settings, and the redis.conf directives of its
    redis-server ("hash-max-listpack-value 8192"), on top of a redis-server as built."""

    settings: Settings
    redis_config: tuple[str, ...] = ()
    rev: str | None = None  # the apply step of this commit (bench.apply.applier_at), not the tree's
    applier: type[Applier] = Applier  # the tree's, or a bench's variant of it

    def __str__(self) -> str:
        at = f"; workers/ of {self.rev}" if self.rev else ""
        if self.applier is not Applier:
            at += f"; {self.applier.__name__}"
        return f"{self.settings}; redis-server {list(self.redis_config) or 'as built'}{at}"


# The sides: name -> Side.  Each is filled on a redis-server of its own and printed
# beside the others; the first is the one the others are compared with.  The lean
# events' change compares Settings(event_version=1) with Settings(event_version=2).
SIDES: dict[str, Side] = {
    # events with the whole record, the scheduler's native one included
    "format 1": Side(Settings(event_version=1)),
    # lean events (the default): the native record stays in the job's hash
    "format 2": Side(Settings()),
    # deploy/redis/jobtap.conf's: a job hash is a listpack, not a hashtable
    "format 2 + listpack": Side(Settings(), ("hash-max-listpack-value 8192",)),
    # the same with a finished job's native record kept as plain JSON, as before
    # native_z and native_zd (jobtap.packing) and as --plain-finished-native keeps it
    "format 2 + listpack + plain native": Side(
        Settings(pack_finished_native=False), ("hash-max-listpack-value 8192",)
    ),
    # the same with a finished job's native record packed without a dictionary
    # (native_z), as every worker packed it before native_zd
    "format 2 + listpack + native_z": Side(
        Settings(), ("hash-max-listpack-value 8192",), applier=ZlibNativeApplier
    ),
    # the same with stream nodes of 64 KB, not Redis' 4 KB (stream-node-max-bytes):
    # fewer nodes, so less of each entry's bytes in node headers and the radix tree
    "format 2 + listpack + 64 KB stream nodes": Side(
        Settings(), ("hash-max-listpack-value 8192", "stream-node-max-bytes 65536")
    ),
    # the same with the users' finished sets as listpacks up to 512 jobs, not 128
    # (zset-max-listpack-entries): most users' sets, at the price of inserts that
    # scan the listpack
    "format 2 + listpack + 512-job zset listpacks": Side(
        Settings(), ("hash-max-listpack-value 8192", "zset-max-listpack-entries 512")
    ),
    # the same with format-2 events as they were before they held each byte once:
    # the whole record less native, and changes ({attr: [old, new]}) in place of was
    "format 2 + listpack + repeating events": Side(
        Settings(), ("hash-max-listpack-value 8192",), applier=RepeatingApplier
    ),
    # the same with each job event in both streams, as --copy-events writes it and
    # as every worker wrote before events were stored once (jobtap.entries)
    "format 2 + listpack + copied events": Side(
        Settings(store_events_once=False), ("hash-max-listpack-value 8192",)
    ),
    # the same before the users' streams were bounded by the site stream's window
    # (each user's by user_maxlen alone)
    "format 2 + listpack at 0cb794e": Side(
        Settings(), ("hash-max-listpack-value 8192",), "0cb794e"
    ),
}


# -- the fill ----------------------------------------------------------------------------
@dataclass
class Site:
    """What the simulated site is and how it is collected."""

    jobs: int = 100_000
    users: int = 200
    live: int | None = None  # jobs live at a time; None: jobs // 10
    nodes: int | None = None  # None: as many as run `jobs` jobs in the retention
    interval: float = 30.0  # virtual seconds between two collector cycles
    usage_interval: float = 600.0
    nodes_every: float = 30.0  # virtual seconds between two stats of the nodes and queues
    chunk: int = 1000
    seed: int = 1

    def user_names(self) -> list[str]:
        """Names like a site's logins (``alice0``, ``bob0``... ``alice1``...)."""
        n = len(DEFAULT_USERS)
        return [f"{DEFAULT_USERS[i % n]}{i // n}" for i in range(self.users)]

    def live_jobs(self) -> int:
        return self.live if self.live is not None else max(100, self.jobs // 10)

    def node_count(self, retention: int) -> int:
        """Nodes enough to run ``jobs`` jobs in ``retention`` seconds, from the rate
        the simulator finds a 100-node cluster sustains (it grows with the nodes)."""
        if self.nodes is not None:
            return self.nodes
        probe = Simulation(
            seed=self.seed, nodes=100, initial_jobs=1, users=self.user_names(), node_mtbf=0
        )
        per_node = probe.arrival_rate / 100  # submissions per second
        subjobs = 1 + probe.p_array * 5  # an array is a parent and 2-8 subjobs
        return max(8, math.ceil(self.jobs / (retention * per_node * subjobs)))


@dataclass
class Filled:
    """What the fill did."""

    cycles: int = 0
    virtual_hours: float = 0.0
    seconds: float = 0.0
    nodes: int = 0
    jobs: int = 0
    live: int = 0
    applied: Counter[str] = field(default_factory=Counter)  # events by type and kind
    finals: Counter[str] = field(default_factory=Counter)  # final states
    redis_cpu: float = 0.0  # seconds of CPU redis-server spent in the fill (INFO cpu)


def observed(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


def collect(site: Site, retention: int, filled: Filled) -> Iterator[Chunk]:
    """The chunks a collector would ship from the simulated site, cycle by cycle,
    until ``site.jobs`` jobs have been seen (see the module's docstring)."""
    filled.nodes = site.node_count(retention)
    sim = Simulation(
        seed=site.seed, nodes=filled.nodes, initial_jobs=site.live_jobs(),
        users=site.user_names(), usage_interval=site.usage_interval,
        history_keep=1.0, history_duration=600.0,
    )  # fmt: skip
    seen: dict[str, dict[str, Seen]] = {JOB: {}, NODE: {}, QUEUE: {}}
    states: dict[str, str] = {}
    since: float | None = None
    nodes_at = -math.inf
    cycle = 0
    while len(seen[JOB]) < site.jobs:
        cycle += 1
        if cycle > 1:
            sim.advance(site.interval)
        filled.cycles, filled.jobs = cycle, len(seen[JOB])
        report = CycleReport(cycle=cycle, observed_at=observed(sim.now))
        # qselect -x -t m.gt.T (everything at first), then qstat -x -f of those
        ids = sim.changed_since(since - 2.0) if since is not None else sim.live_ids()
        since = sim.now
        natives = sim.live_jobs_by_id(ids)
        live = set(natives)
        natives.update(sim.history_jobs([j for j in ids if j not in live]))
        yield from _ship(site, report, JOB, natives, live, seen[JOB], normalise_job, states)
        if sim.now - nodes_at >= site.nodes_every:
            nodes_at = sim.now
            for kind, stat, normalise in (
                (NODE, sim.nodes, normalise_node),
                (QUEUE, sim.queues, normalise_queue),
            ):
                natives = stat()
                yield from _ship(site, report, kind, natives, set(natives), seen[kind], normalise)
    filled.cycles = cycle
    filled.virtual_hours = (sim.now - sim.start_time) / 3600
    filled.jobs = len(seen[JOB])
    filled.live = sum(1 for s in states.values() if s not in TERMINAL)
    filled.finals.update(s for s in states.values() if s in TERMINAL)


def _ship(
    site: Site,
    report: CycleReport,
    kind: str,
    natives: dict[str, Any],
    live: set[str],
    seen: dict[str, Seen],
    normalise: Any,
    states: dict[str, str] | None = None,
) -> Iterator[Chunk]:
    fps = fingerprint_all(natives)
    changed, _ = compare({oid: seen[oid] for oid in fps if oid in seen}, fps)
    records = normalise_many(
        lambda oid, native: normalise(oid, native, tz="UTC"), natives, changed, SITE, report, kind
    )
    items = []
    for oid, record in records.items():
        state = record.get("state") or ""
        seen[oid] = Seen(fps[oid], state)
        if states is not None:
            states[oid] = state
        items.append(contract.upsert(oid, fps[oid], record, live=oid in live))
    for part in chunked(items, site.chunk):
        yield Chunk(SITE, report.cycle, report.observed_at, kind, list(part))


def fill(
    r, settings: Settings, site: Site, rev: str | None = None, applier_class: type = Applier
) -> Filled:
    """Fill ``r`` with the site through an ``applier_class`` with ``settings``
    (the ``Applier`` of commit ``rev`` if given)."""
    filled = Filled()
    applier = (applier_at(rev) if rev else applier_class)(r, settings)
    cpu0 = redis_cpu(r)
    t0 = shown = time.perf_counter()
    for c in collect(site, settings.retention, filled):
        if time.perf_counter() - shown > 30:
            shown = time.perf_counter()
            print(f"  ... {shown - t0:.0f} s: cycle {filled.cycles:,}, {filled.jobs:,} jobs seen",
                  file=sys.stderr)  # fmt: skip
        totals = applier.apply(c)
        for etype, n in totals.items():
            if etype not in ("events", "skipped", "objects", "conflicts"):
                filled.applied[f"{c.kind} {etype}"] += n
    filled.seconds = time.perf_counter() - t0
    filled.redis_cpu = redis_cpu(r) - cpu0
    return filled


# -- key kinds ---------------------------------------------------------------------------
# The per-object keys, by the SiteKeys method that names them
PER_OBJECT = ("job", "user_jobs", "user_events", "user_finished", "node", "queue")
LABELS = {
    "events": "site stream",
    "user_events": "users' streams",
    "job live": "job hashes, live",
    "job finished": "job hashes, finished",
    "node": "node hashes",
    "queue": "queue hashes",
    "owner": "owner hash (job -> user)",
    "fingerprints": "fingerprints hash",
    "expiry": "expiry zset",
    "oldest_finished": "oldest-finished zset",
    "user_jobs": "users' live-job sets",
    "user_finished": "users' finished-job sets",
    "node_index": "node index set",
    "queue_index": "queue index set",
    "meta": "meta",
}


class KeyKinds:
    """Tells a key's kind from ``SiteKeys``' naming: a site-wide key by the attribute
    that holds its name, a per-object key by the method that makes it."""

    def __init__(self, site: str):
        k = SiteKeys(site)
        self.fixed: dict[str, str] = {}
        for name, value in vars(k).items():
            # a channel and a key may share a name (the node channel and index)
            if isinstance(value, str) and value.startswith(k.base) and "channel" not in name:
                self.fixed[value.removeprefix(k.base)] = name
        self.base = k.base
        self.patterns = []
        for method in PER_OBJECT:
            made = getattr(k, method)(*(["USERMARK", "IDMARK"][: _arity(method)]))
            rx = re.escape(made.removeprefix(k.base))
            rx = rx.replace("USERMARK", "(?P<user>[^:]+)").replace("IDMARK", "(?P<id>.+)")
            self.patterns.append((method, re.compile(rx + "$")))

    def kind(self, key: str) -> tuple[str, str | None]:
        """(kind, user or None); kind "other" for a key SiteKeys does not name."""
        if not key.startswith(self.base):
            return "other", None
        tail = key[len(self.base) :]
        if tail in self.fixed:
            return self.fixed[tail], None
        for method, rx in self.patterns:
            m = rx.match(tail)
            if m:
                return method, m.groupdict().get("user")
        return "other", None


def _arity(method: str) -> int:
    return {"job": 2, "user_jobs": 1, "user_events": 1, "user_finished": 1, "node": 1, "queue": 1}[
        method
    ]


@dataclass
class Kind:
    keys: int = 0
    bytes: int = 0
    units: int = 0  # stream entries, hash fields, set or zset members
    encodings: Counter[str] = field(default_factory=Counter)


@dataclass
class Measured:
    info: dict[str, Any]
    kinds: dict[str, Kind]
    names: dict[str, list[str]]  # kind -> its keys
    users_with_streams: int = 0
    user_stream_lengths: list[int] = field(default_factory=list)
    # stream kind -> (entries sampled, mean bytes of an entry's fields and values,
    # mean bytes of its event JSON, event types in the sample)
    entries: dict[str, tuple[int, float, float, Counter[str]]] = field(default_factory=dict)
    freed: dict[str, int] = field(default_factory=dict)  # kind -> used_memory freed by DEL

    @property
    def job_keys(self) -> dict[str, list[str]]:
        return {p: self.names.get(f"job {p}", []) for p in ("live", "finished")}


def measure(r, site: str = SITE) -> Measured:
    """``MEMORY USAGE key SAMPLES 0`` of every key, by kind, with its size and encoding."""
    kinds: dict[str, Kind] = {}
    by_kind: dict[str, list[str]] = {}
    tell = KeyKinds(site)
    lengths: list[int] = []
    names = [k.decode() for k in r.scan_iter(count=2000)]
    for i in range(0, len(names), 1000):
        batch = names[i : i + 1000]
        pipe = r.pipeline(transaction=False)
        for key in batch:
            pipe.memory_usage(key, samples=0)
            pipe.type(key)
            pipe.object("encoding", key)
            pipe.ttl(key)
        replies = pipe.execute()
        sizes = []
        for j, key in enumerate(batch):
            usage, rtype, encoding, ttl = replies[4 * j : 4 * j + 4]
            kind, _ = tell.kind(key)
            if kind == "job":
                kind = "job finished" if ttl >= 0 else "job live"
            by_kind.setdefault(kind, []).append(key)
            sizes.append((key, kind, int(usage or 0), rtype.decode(), encoding))
        pipe = r.pipeline(transaction=False)
        for key, _, _, rtype, _ in sizes:
            {"stream": pipe.xlen, "hash": pipe.hlen, "set": pipe.scard, "zset": pipe.zcard}.get(
                rtype, pipe.strlen
            )(key)
        for (_, kind, usage, _, encoding), units in zip(sizes, pipe.execute()):
            k = kinds.setdefault(kind, Kind())
            k.keys += 1
            k.bytes += usage
            k.units += int(units)
            k.encodings[(encoding or b"?").decode()] += 1
            if kind == "user_events":
                lengths.append(int(units))
    info = r.info("memory")
    m = Measured(info, kinds, by_kind, len(lengths), lengths)
    for kind in ("events", "user_events"):
        m.entries[kind] = stream_sample(r, by_kind.get(kind, []), 2000)
    return m


def stream_sample(r, keys: list[str], wanted: int) -> tuple[int, float, float, Counter[str]]:
    """The newest entries of ``keys`` (up to ``wanted``, spread over the streams):
    how many, mean bytes of an entry's field names and values, mean bytes of its
    event JSON, and the event types among them."""
    if not keys:
        return 0, 0.0, 0.0, Counter()
    each = max(1, wanted // len(keys))
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.xrevrange(key, count=each)
    entries = [fields for reply in pipe.execute() for _, fields in reply][:wanted]
    sizes = [sum(len(f) + len(v) for f, v in e.items()) for e in entries]
    json = [len(e.get(EVENT, b"")) for e in entries]
    types = Counter(  # an entry naming its event's stream is a job's (jobtap.entries)
        (orjson.loads(e[EVENT]).get("kind", "?") if EVENT in e else "job (named)")
        + " "
        + e[b"type"].decode()
        for e in entries
        if b"type" in e
    )
    n = len(entries) or 1
    return len(entries), sum(sizes) / n, sum(json) / n, types


def free_by_kind(r, m: Measured) -> None:
    """Delete each kind's keys in turn and note how much ``used_memory`` fell: what
    each kind takes as the allocator counts it (MEMORY USAGE of a stream is an
    estimate: its radix tree is counted generously)."""
    order = [k for k in ORDER if k in m.names] + sorted(set(m.names) - set(ORDER))
    before = r.info("memory")["used_memory"]
    for kind in order:
        keys = m.names[kind]
        for i in range(0, len(keys), 1000):
            r.delete(*keys[i : i + 1000])
        after = r.info("memory")["used_memory"]
        m.freed[kind] = before - after
        before = after
    m.freed["(left after every key was deleted)"] = before


# -- a job hash, field by field ----------------------------------------------------------
@dataclass
class Anatomy:
    sample: dict[str, int]  # live/finished -> hashes sampled
    fields: dict[str, dict[str, float]]  # field -> part -> mean bytes (name + value)
    present: dict[str, dict[str, float]]  # field -> part -> share of hashes that have it
    twice: dict[str, dict[str, float]]  # what is held twice -> part -> mean bytes
    ways: dict[str, dict[str, float]]  # way of storing -> part -> mean MEMORY USAGE
    encodings: dict[str, dict[str, Counter[str]]]  # way -> part -> encodings


def anatomy(r, measured: Measured, sample: int) -> Anatomy:
    """A sample of the job hashes field by field, and copies of them stored other
    ways in database 1 of the bench's own server (deleted after)."""
    scratch = r.connection_pool.connection_kwargs
    r1 = type(r)(host=scratch["host"], port=scratch["port"], db=1)
    parts = {}
    for part, keys in measured.job_keys.items():
        step = max(1, len(keys) // sample)
        parts[part] = sorted(keys)[::step][:sample]
    fields: dict[str, dict[str, float]] = {}
    present: dict[str, dict[str, float]] = {}
    twice: dict[str, dict[str, float]] = {}
    ways: dict[str, dict[str, float]] = {}
    encodings: dict[str, dict[str, Counter[str]]] = {}
    old_value = r.config_get("hash-max-listpack-value")["hash-max-listpack-value"]
    tell = KeyKinds(SITE)
    try:
        for part, keys in parts.items():
            pipe = r.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
                pipe.memory_usage(key, samples=0)
                pipe.object("encoding", key)
            replies = pipe.execute()
            hashes = [
                ({f.decode(): v for f, v in replies[3 * i].items()}, replies[3 * i + 1],
                 replies[3 * i + 2].decode())
                for i in range(len(keys))
            ]  # fmt: skip
            n = len(hashes) or 1
            sums: Counter[str] = Counter()
            have: Counter[str] = Counter()
            dup: Counter[str] = Counter()
            for key, (h, _, _) in zip(keys, hashes):
                _, user = tell.kind(key)
                for f, v in h.items():
                    sums[f] += len(f) + len(v)
                    have[f] += 1
                for what, size in _held_twice(key, h, user).items():
                    dup[what] += size
            for f in sums:
                fields.setdefault(f, {})[part] = sums[f] / n
                present.setdefault(f, {})[part] = have[f] / n
            for what in dup:
                twice.setdefault(what, {})[part] = dup[what] / n
            stored = [usage for _, usage, _ in hashes]
            ways.setdefault("as stored", {})[part] = statistics.mean(stored) if stored else 0
            encodings.setdefault("as stored", {})[part] = Counter(e for _, _, e in hashes)
            for way, usage, enc in _other_ways(r, r1, keys, [h for h, _, _ in hashes], old_value):
                ways.setdefault(way, {})[part] = usage
                encodings.setdefault(way, {})[part] = enc
    finally:
        r.config_set("hash-max-listpack-value", old_value)
        r1.flushdb()
    return Anatomy({p: len(k) for p, k in parts.items()}, fields, present, twice, ways, encodings)


def _held_twice(key: str, h: dict[str, bytes], user: str | None) -> dict[str, int]:
    """Bytes (field name + value) of what this hash holds that is also elsewhere."""
    out: dict[str, int] = {}

    def count(what: str, f: str) -> None:
        if f in h:
            out[what] = out.get(what, 0) + len(f) + len(h[f])

    jid = h.get("id", b"").decode()
    if jid and key.endswith(jid):
        count("id (also in the key)", "id")
    count("site (also in the key)", "site")
    if user is not None and h.get("user", b"").decode() == user:
        count("user (also in the key)", "user")
    count("scheduler (one value for the whole site)", "scheduler")
    native = native_of(h) or {}
    if isinstance(native, dict) and h.get("native_state", b"").decode() == native.get("job_state"):
        count("native_state (also in native's job_state)", "native_state")
    derived = [f for f in h if f not in NATIVE_FORMS and f not in BOOKKEEPING]
    out["every normalised field (derived from native, site, id)"] = sum(
        len(f) + len(h[f]) for f in derived
    )
    return out


LEAN_DROP = ("id", "site", "user", "scheduler", "native_state")


def _other_ways(
    r, r1, keys: list[str], hashes: list[dict[str, bytes]], old_value: Any
) -> Iterator[tuple[str, float, Counter[str]]]:
    """Mean MEMORY USAGE of the sample's hashes written other ways (in database 1,
    under the same key names, so the key's own bytes are the same)."""
    big = str(1 << 20)

    def store(way: str, listpack: bool, hash_of, native_apart: bool):
        r.config_set("hash-max-listpack-value", big if listpack else old_value)
        pipe = r1.pipeline(transaction=False)
        for key, h in zip(keys, hashes):
            fields = hash_of(h)
            if native_apart:
                fields = {f: v for f, v in fields.items() if f != "native"}
                if "native" in h:
                    pipe.set(key + "#native", h["native"])
            if fields:
                pipe.hset(key, mapping=fields)
        pipe.execute()
        pipe = r1.pipeline(transaction=False)
        for key in keys:
            pipe.memory_usage(key, samples=0)
            pipe.object("encoding", key)
            if native_apart:
                pipe.memory_usage(key + "#native", samples=0)
        replies = pipe.execute()
        step = 3 if native_apart else 2
        total = 0
        enc: Counter[str] = Counter()
        for i in range(len(keys)):
            total += int(replies[step * i] or 0)
            enc[(replies[step * i + 1] or b"?").decode()] += 1
            if native_apart:
                total += int(replies[step * i + 2] or 0)
        r1.flushdb()
        return way, total / (len(keys) or 1), enc

    def lean(h):
        return {f: v for f, v in h.items() if f not in LEAN_DROP}

    def native_only(h):
        return {f: v for f, v in h.items() if f in NATIVE_FORMS}

    yield store("written again as they are", False, dict, False)
    yield store("listpack (hash-max-listpack-value 1 MB)", True, dict, False)
    yield store("native in a string key of its own, the rest a hash", False, dict, True)
    yield store("the same, the rest a listpack", True, dict, True)
    yield store("without the fields held twice, listpack", True, lean, False)
    yield store("without the fields held twice, native apart", True, lean, True)
    yield store("native alone (a listpack of one field)", True, native_only, False)


# -- printing ----------------------------------------------------------------------------
ORDER = (
    "events", "user_events", "job live", "job finished", "user_finished", "node", "queue", "owner",
    "fingerprints", "expiry", "oldest_finished", "user_jobs", "node_index", "queue_index", "meta",
)  # fmt: skip


def print_fill(name: str, side: Side, site: Site, filled: Filled) -> None:
    finals = ", ".join(f"{n:,} {s}" for s, n in filled.finals.most_common())
    events = ", ".join(f"{n:,} {t}" for t, n in sorted(filled.applied.items()))
    print(f"[{name}] {side}")
    print(f"  filled in {filled.seconds:.0f} s: {filled.cycles:,} collector cycles of "
          f"{site.interval:g} virtual s ({filled.virtual_hours:.1f} virtual hours), "
          f"{filled.nodes:,} nodes, {site.users} users")  # fmt: skip
    print(f"  jobs: {filled.jobs:,} ({filled.live:,} live; finished: {finals})")
    applied = sum(filled.applied.values())
    print(f"  events applied: {applied:,} ({events})")
    print(f"  Redis CPU in the fill (INFO cpu): {filled.redis_cpu:.1f} s, "
          f"{1e6 * filled.redis_cpu / max(1, applied):.1f} µs per event")  # fmt: skip


def print_breakdown(sides: dict[str, Measured]) -> None:
    names = list(sides)
    width = max(28, *(len(n) + 2 for n in sides))
    print()
    print("Redis memory (MB = 10^6 bytes)".ljust(40) + "".join(f"{n:>{width}}" for n in names))
    for label, field_ in (
        ("used_memory", "used_memory"),
        ("used_memory_dataset", "used_memory_dataset"),
        ("used_memory_overhead", "used_memory_overhead"),
        ("used_memory_rss", "used_memory_rss"),
    ):
        cells = "".join(f"{m.info[field_] / MB:>{width - 3},.1f} MB" for m in sides.values())
        print(f"{label:<40}{cells}")
    first = sides[names[0]].info["used_memory"]
    print(f"{'used_memory / ' + names[0]:<40}"
          + "".join(f"{m.info['used_memory'] / first:>{width - 1}.2f}x"
                    for m in sides.values()))  # fmt: skip
    print()
    print("by key kind: MEMORY USAGE MB, its share of used_memory, keys; "
          "used_memory freed by deleting them, MB")  # fmt: skip
    wide = 40
    print(f"{'':<40}" + "".join(f"{n:>{wide}}" for n in names))
    kinds = [k for k in ORDER if any(k in m.kinds for m in sides.values())]
    kinds += sorted({k for m in sides.values() for k in m.kinds} - set(kinds))
    for kind in kinds:
        cells = ""
        for m in sides.values():
            k = m.kinds.get(kind, Kind())
            share = 100 * k.bytes / m.info["used_memory"]
            freed = m.freed.get(kind, 0) / MB
            cells += f"{k.bytes / MB:>11,.1f} {share:>5.1f}% {k.keys:>8,} {freed:>11,.1f}"
        print(f"{LABELS.get(kind, kind):<40}{cells}")
    cells = ""
    for m in sides.values():
        total = sum(k.bytes for k in m.kinds.values())
        freed = sum(v for k, v in m.freed.items() if k in m.kinds) / MB
        cells += f"{total / MB:>11,.1f} {100 * total / m.info['used_memory']:>5.1f}% " + (
            f"{sum(k.keys for k in m.kinds.values()):>8,} {freed:>11,.1f}"
        )
    print(f"{'all keys':<40}{cells}")
    cells = "".join(
        f"{m.freed.get('(left after every key was deleted)', 0) / MB:>{wide},.1f}"
        for m in sides.values()
    )
    print(f"{'used_memory with no key left':<40}{cells}")
    print()
    print("per unit".ljust(40) + "".join(f"{n:>{width}}" for n in names))
    rows = [
        ("site stream: entries", "events", "units"),
        ("  bytes per entry (MEMORY USAGE)", "events", "per"),
        ("  bytes per entry (freed by DEL)", "events", "freed"),
        ("  an entry's fields (newest, sampled)", "events", "fields"),
        ("  of which the event JSON", "events", "json"),
        ("users' streams: entries", "user_events", "units"),
        ("  bytes per entry (MEMORY USAGE)", "user_events", "per"),
        ("  bytes per entry (freed by DEL)", "user_events", "freed"),
        ("  an entry's fields (newest, sampled)", "user_events", "fields"),
        ("  of which the event JSON", "user_events", "json"),
        ("job hashes, live: bytes per hash", "job live", "perkey"),
        ("  (freed by DEL)", "job live", "freedkey"),
        ("job hashes, finished: bytes per hash", "job finished", "perkey"),
        ("  (freed by DEL)", "job finished", "freedkey"),
        ("node hashes: bytes per hash", "node", "perkey"),
        ("owner hash: bytes per job", "owner", "per"),
        ("fingerprints hash: bytes per entry", "fingerprints", "per"),
        ("expiry zset: bytes per job", "expiry", "per"),
    ]
    for label, kind, how in rows:
        cells = ""
        for m in sides.values():
            k = m.kinds.get(kind, Kind())
            value = _per_unit(m, kind, how)
            cells += f"{value:>{width}}"
        print(f"{label:<40}{cells}")
    for what in ("users with a stream", "users' stream length: max / median"):
        cells = ""
        for m in sides.values():
            lengths = sorted(m.user_stream_lengths) or [0]
            value = (
                f"{m.users_with_streams:,}"
                if what.startswith("users with")
                else f"{lengths[-1]:,} / {statistics.median(lengths):,.0f}"
            )
            cells += f"{value:>{width}}"
        print(f"{what:<40}{cells}")
    for kind in ("events", "user_events"):
        print(f"event types among the sampled entries of the {LABELS[kind]}")
        for name, m in sides.items():
            types = m.entries.get(kind, (0, 0.0, 0.0, Counter()))[3]
            total = sum(types.values()) or 1
            print(f"  {name}: " + ", ".join(
                f"{t} {100 * n / total:.0f}%" for t, n in types.most_common()))  # fmt: skip
    print()
    print("encodings".ljust(40) + "".join(f"{n:>{width}}" for n in names))
    for kind in kinds:
        cells = ""
        for m in sides.values():
            enc = m.kinds.get(kind, Kind()).encodings
            cells += f"{', '.join(f'{e} {n:,}' for e, n in enc.most_common()):>{width}}"
        print(f"{LABELS.get(kind, kind):<40}{cells}")


def _per_unit(m: Measured, kind: str, how: str) -> str:
    k = m.kinds.get(kind, Kind())
    if not (k.keys and k.units):
        return "-"
    sampled = m.entries.get(kind, (0, 0.0, 0.0, Counter()))
    if how == "fields":
        return f"{sampled[1]:,.0f} ({sampled[0]:,} entries)"
    freed = m.freed.get(kind, 0)
    values = {
        "units": k.units,
        "per": k.bytes / k.units,
        "freed": freed / k.units,
        "json": sampled[2],
        "perkey": k.bytes / k.keys,
        "freedkey": freed / k.keys,
    }
    return f"{values[how]:,.0f}"


def print_anatomy(name: str, a: Anatomy, measured: Measured) -> None:
    parts = [p for p in ("live", "finished") if a.sample.get(p)]
    counts = {p: len(measured.job_keys[p]) for p in parts}
    print()
    print(f"[{name}] a job hash field by field: mean bytes (field name + value) over "
          + ", ".join(f"{a.sample[p]:,} of the {counts[p]:,} {p}" for p in parts)
          + "; in brackets the share of hashes that have the field")  # fmt: skip
    head = "".join(f"{p:>22}" for p in parts)
    print(f"{'field':<58}{head}")
    order = sorted(a.fields, key=lambda f: -max(a.fields[f].values()))
    for f in order:
        cells = "".join(
            f"{a.fields[f].get(p, 0):>14,.0f} ({100 * a.present[f].get(p, 0):>3.0f}%)"
            for p in parts
        )
        print(f"{f:<58}{cells}")
    total = {p: sum(a.fields[f].get(p, 0) for f in a.fields) for p in parts}
    print(f"{'all fields':<58}" + "".join(f"{total[p]:>22,.0f}" for p in parts))
    print()
    print("what a job hash holds twice (mean bytes, field name + value)")
    for what, per in a.twice.items():
        print(f"{what:<58}" + "".join(f"{per.get(p, 0):>22,.0f}" for p in parts))
    print()
    print("a job hash stored other ways: mean MEMORY USAGE (bytes), and what that "
          "would make of all of them (MB)")  # fmt: skip
    print(f"{'way':<58}" + "".join(f"{p:>22}" for p in parts) + f"{'all job hashes':>18}")
    base = None
    for way, per in a.ways.items():
        all_mb = sum(per.get(p, 0) * counts[p] for p in parts) / MB
        base = all_mb if base is None else base
        enc = " ".join(
            f"{p[0]}:{','.join(e for e, _ in a.encodings[way][p].most_common())}" for p in parts
        )
        print(f"{way:<58}" + "".join(f"{per.get(p, 0):>22,.0f}" for p in parts)
              + f"{all_mb:>12,.1f} MB {all_mb - base:>+7,.1f}   [{enc}]")  # fmt: skip


# -- main --------------------------------------------------------------------------------
def run_side(name: str, side: Side, site: Site, sample: int) -> tuple[Measured, Anatomy]:
    server = RedisServer(args=config_args(list(side.redis_config))).start()
    try:
        r = server.client()
        filled = fill(r, side.settings, site, side.rev, side.applier)
        print_fill(name, side, site, filled)
        measured = measure(r)
        a = anatomy(r, measured, sample)
        free_by_kind(r, measured)
        return measured, a
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100_000, help="jobs within the retention")
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--live", type=int, default=None, help="live jobs (default: jobs / 10)")
    ap.add_argument("--nodes", type=int, default=None,
                    help="nodes (default: enough to run --jobs jobs in the retention)")  # fmt: skip
    ap.add_argument("--interval", type=float, default=30.0, help="virtual s between cycles")
    ap.add_argument("--usage-interval", type=float, default=600.0,
                    help="virtual s between a running job's usage updates")  # fmt: skip
    ap.add_argument("--sample", type=int, default=2000,
                    help="job hashes of each kind (live, finished) looked at closely")  # fmt: skip
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sides", default=",".join(SIDES),
                    help=f"the sides to fill, in this order (of {', '.join(SIDES)})")  # fmt: skip
    args = ap.parse_args()
    sides = {name: SIDES[name] for name in args.sides.split(",")}
    logging.basicConfig(level=logging.WARNING)
    tune_gc()
    site = Site(
        jobs=args.jobs, users=args.users, live=args.live, nodes=args.nodes,
        interval=args.interval, usage_interval=args.usage_interval, seed=args.seed,
    )  # fmt: skip
    measured: dict[str, Measured] = {}
    anatomies: dict[str, Anatomy] = {}
    for name, side in sides.items():
        measured[name], anatomies[name] = run_side(name, side, site, args.sample)
    print_breakdown(measured)
    for name in sides:
        print_anatomy(name, anatomies[name], measured[name])


if __name__ == "__main__":
    main()
