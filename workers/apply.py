"""The rq job: apply one chunk shipped by the collector.

For each object of the chunk the worker reads the stored record, computes the
attribute-level changes, bumps ``version`` and builds the event and its JSON;
then one Lua script per batch writes every hash, appends to the streams and
publishes, after checking that the version, epoch and cycle of each object are
still the ones the worker read (if another worker wrote one, or noted a newer
cycle on it, the worker reads again and retries).  The script decodes nothing:
it compares those three fields and writes what it is given.  Together with
the cycle number this makes a chunk safe to apply in any order and on retry:

- a record from a cycle older than (or equal to) the stored one is ignored;
- a job whose ``final`` event went out is never changed again;
- a record equal to the stored one bumps nothing and emits nothing.

The same script first makes sure of the site's epoch (``epoch.lua``): each
batch is sent with the epoch its events were made for (``_Plan.epoch``); if the
site is in another one (Redis lost data since, and a new epoch began), nothing
is written and the worker makes the events again for the new epoch, where
versions count from 1.  A batch planned before the worker learnt of the new
epoch (the next batch is planned while Redis runs the current one) is refused
and made again the same way.  If Redis goes away in the middle of a chunk, the
worker waits for it (``Settings.redis_wait``) and applies the chunk again from
the start: what was written already is skipped by the cycle check, so the chunk
is finished, never half-applied.

Events are made in the format ``Settings.event_version`` names (see
``jobtap.events``): 2, the default, leaves the scheduler's native record out of
the event (it is in the hash the same script writes); 1 writes the whole record,
for sites whose consumers still read ``native`` from events.

A job's final write packs its native record (``Settings.pack_finished_native``,
``jobtap.packing``): nothing diffs a finished job again, and its
hash, most of it the native record, is kept for the retention (two days).

A job's event is stored once (``Settings.store_events_once``, ``jobtap.entries``):
in its user's stream, with the site stream's entry of the same id naming that
stream instead of holding the event a second time.

A job whose first record has already ended (it was submitted, ran and ended
between two stats) gets two events, ``new`` (version 1) then ``final``
(version 2), both with that record, written by the same script (each checked
against what the worker read): every job has exactly one of each.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import redis
from hiredis import pack_command
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
    wait_random,
)

from jobtap.cluster import publish_command
from jobtap.connection import AnyRedis
from jobtap.contract.chunk import REMOVE, UPSERT, VANISHED, Chunk, Item
from jobtap.contract.epoch import EPOCH_LUA, EpochGuard, epoch_args
from jobtap.contract.lease import FENCE_LUA
from jobtap.events import (
    EVENT_VERSION,
    EVENT_VERSIONS,
    FINAL,
    NEW,
    REMOVED,
    STATE,
    UPDATE,
    Event,
    make_event,
    object_key,
)
from jobtap.keys import SiteKeys
from jobtap.packing import PRIMED_NATIVE, pack_native
from jobtap.schema import (
    BOOKKEEPING,
    FIELDS,
    JOB,
    NODE,
    TERMINAL,
    UNKNOWN,
    decode_value,
    from_hash,
    to_hash,
)

from .destinations import CLUSTER_CHANGES, Destination, Destinations
from .metrics import WorkerMetrics, lag_seconds, note_in_meta

log = logging.getLogger("jobtap.workers")

_HERE = Path(__file__).parent
_SCRIPT = EPOCH_LUA + FENCE_LUA + (_HERE / "apply.lua").read_text()

# Redis errors that end when Redis is back: restarting, loading its data, or a
# primary that became a replica in a failover.
REDIS_AWAY = (redis.ConnectionError, redis.TimeoutError, redis.exceptions.ReadOnlyError)


@dataclass
class Settings:
    """Retention of what the workers write."""

    retention: int = 2 * 86400  # seconds a finished job's hash is kept
    site_maxlen: int = 100_000  # events kept in the site stream (approximately)
    user_maxlen: int = 10_000  # events kept in each user's stream
    max_age: int = 7 * 86400  # events older than this are trimmed (seconds; 0: never)
    max_attempts: int = 20
    batch: int = 50  # objects written by one atomic script call (smaller scripts run faster)
    redis_wait: float = 240.0  # seconds to wait for a Redis that went away mid-chunk
    # On a Redis Cluster: how long a chunk is retried across a failover or a
    # slot move, and how long a chunk waits for a replica to have it.
    cluster_patience: float = 60.0
    replica_wait_ms: int = 1000
    # How long a vanished job that was never stored is waited for: the older
    # chunk that brings it may be in another worker's hands right now.
    vanished_wait: float = 5.0
    # The event format written (jobtap.events): 2 leaves the native record out
    # of events (it stays in the hash); 1 for sites whose consumers still read
    # it from events.
    event_version: int = EVENT_VERSION
    # A finished job's native record kept packed (jobtap.packing): with its
    # dictionary, about 0.3 of its bytes for PBS, 0.11-0.15 for Slurm; readers
    # before it see none.
    pack_finished_native: bool = True
    # A job's event stored once, in its user's stream, the site stream naming it
    # (jobtap.entries): half the streams' memory; readers before it cannot read
    # the site stream's job events.  A user's stream is then bounded by the site
    # stream's window alone (user_maxlen applies to copies only).
    store_events_once: bool = True

    def __post_init__(self) -> None:
        if self.event_version not in EVENT_VERSIONS:
            raise ValueError(
                f"event_version must be one of {EVENT_VERSIONS}, not {self.event_version!r}"
            )


class _Fenced(Exception):
    """The chunk's lease generation is below the site's (the lease fence, jobtap.contract.lease)."""

    def __init__(self, current: int):
        self.current = current


class ApplyConflict(RuntimeError):
    """Other workers kept changing the same objects; rq retries the chunk."""


_applier: Applier | None = None  # one per worker process: one script load, one pool


def configure(
    data_redis: AnyRedis,
    settings: Settings | None = None,
    metrics: WorkerMetrics | None = None,
) -> Applier:
    """Set up this worker process's :class:`Applier` (see workers/service.py)."""
    global _applier
    _applier = Applier(data_redis, settings, metrics)
    return _applier


def apply_chunk(payload: bytes) -> dict[str, int]:
    """rq entry point (``chunk.APPLY_FUNC``): apply one chunk; return counts for
    the rq log.  A process that was not configured applies to rq's connection."""
    if _applier is None:
        from rq import get_current_connection

        configure(get_current_connection())
    assert _applier is not None
    return _applier.apply(Chunk.decode(payload))


class Applier:
    """Applies chunks to one Redis or to a Redis Cluster (see workers/destinations.py:
    on a cluster the site's batches go to the node that holds it, events are
    published on sharded channels, and a chunk is done once a replica has it).
    Each chunk's counts go to the site's ``meta`` and, if given, to ``metrics``
    (workers/metrics.py)."""

    def __init__(
        self,
        r: AnyRedis,
        settings: Settings | None = None,
        metrics: WorkerMetrics | None = None,
    ):
        self.redis = r
        self.settings = settings or Settings()
        self.metrics = metrics
        self.destinations = Destinations(r, _SCRIPT)
        self.publish = publish_command(r)
        self.guard = EpochGuard(r)
        self.epochs: dict[str, str] = {}  # site -> the epoch events are made for

    def apply(self, chunk: Chunk) -> dict[str, int]:
        """Apply ``chunk`` (see :meth:`_apply`).

        If Redis goes away meanwhile, wait for it with backoff (up to
        ``settings.redis_wait`` seconds) and apply it again from the start.  On a
        cluster, a failover or a slot move under the chunk (the node gone, MOVED,
        TRYAGAIN, CLUSTERDOWN...) is waited out the same way, for up to
        ``settings.cluster_patience`` seconds, reading the cluster's map again
        before each new try; the chunk is done once a replica has it."""
        keys = SiteKeys(chunk.site)
        if not self.destinations.cluster:
            retrying = Retrying(
                retry=retry_if_exception_type(REDIS_AWAY),
                wait=wait_exponential(multiplier=0.05, max=5.0) + wait_random(0, 0.05),
                stop=stop_after_delay(self.settings.redis_wait),
                before_sleep=_log_retry,
                reraise=True,
            )
            for attempt in retrying:
                with attempt:
                    return self._apply(self.destinations.for_site(keys), keys, chunk)
            raise AssertionError("unreachable: tenacity returns or raises")
        deadline = time.monotonic() + self.settings.cluster_patience
        delay = 0.05
        while True:
            try:
                dest = self.destinations.for_site(keys)
                totals = self._apply(dest, keys, chunk)
                dest.wait_for_a_replica(self.settings.replica_wait_ms)
                return totals
            except CLUSTER_CHANGES as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("site %s: the cluster changed under a chunk (%s: %s); applying "
                            "it again", chunk.site, type(exc).__name__, exc)  # fmt: skip
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                try:
                    self.destinations.refresh()
                except CLUSTER_CHANGES as again:
                    log.info("the cluster map is not readable yet: %s", again)

    def _apply(self, dest: Destination, keys: SiteKeys, chunk: Chunk) -> dict[str, int]:
        """Apply a chunk as a series of atomic batches of ``settings.batch`` objects.

        The stored records of the whole chunk are read in one pipeline first.
        Then each batch's script is sent without waiting for its reply, and
        the next batch is diffed while Redis runs it: on two cores most of
        Redis' work overlaps ours.  Each batch re-checks the versions it read
        and is written atomically; a batch that lost a race is read again and
        redone.  A chunk cut short by a crash is finished by its retry (the
        applied batches are then skipped by the cycle check).
        """
        started = time.perf_counter()
        if chunk.site not in self.epochs:
            self.epochs[chunk.site] = self.guard.ensure(keys, chunk.cycle).epoch
        reads = self._read(dest, keys, chunk)
        due = self._due_finished(dest, keys)  # drained by the first batch sent
        size = self.settings.batch
        totals = {"events": 0, "skipped": 0, "objects": 0, "conflicts": 0}
        pool = dest.writer.connection_pool
        conn = pool.get_connection()
        clean = False
        try:
            in_flight: tuple[Chunk, _Plan] | None = None
            for i in range(0, len(reads), size):
                part = chunk.part([it for it, _, _, _ in reads[i : i + size]])
                plan = self._plan(keys, chunk, reads[i : i + size])
                if in_flight is not None:
                    self._finish(conn, dest, keys, *in_flight, totals)
                    in_flight = None
                if plan.items:
                    plan.due, due = due, []
                    self._send(conn, dest, keys, part, plan)
                    in_flight = (part, plan)
                else:
                    totals["skipped"] += plan.skipped
            if in_flight is not None:
                self._finish(conn, dest, keys, *in_flight, totals)
            clean = True
        except _Fenced as fence:
            clean = True  # the reply was read
            totals["fenced"] = 1
            log.warning("site %s: dropped a %s chunk of cycle %d from lease generation %d: "
                        "generation %d holds the site now", chunk.site, chunk.kind, chunk.cycle,
                        chunk.lease, fence.current)  # fmt: skip
        finally:
            if not clean:  # a reply may still be on its way: never reuse this socket
                conn.disconnect()
            pool.release(conn)
        self._report(dest, keys, chunk, totals, time.perf_counter() - started)
        return totals

    def _report(
        self, dest: Destination, keys: SiteKeys, chunk: Chunk, totals: dict[str, int], took: float
    ) -> None:
        now = time.time()
        lag = lag_seconds(chunk.observed_at, now)
        at = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")
        note_in_meta(dest.writer, keys, totals, at, lag)  # the node that holds the site
        if self.metrics is not None:
            self.metrics.chunk_applied(chunk.site, chunk.kind, totals, took, lag)

    def _send(self, conn, dest: Destination, keys: SiteKeys, part: Chunk, plan: _Plan) -> None:
        kargs, argv = self._args(keys, part, plan)
        # packed by hiredis, in C: redis-py's own packer (Python, per argument)
        # cost the worker more per change than diffing the record
        conn.send_packed_command(
            [pack_command(("EVALSHA", dest.script.sha, len(kargs), *kargs, *argv))]
        )

    def _finish(
        self, conn, dest: Destination, keys, part, plan: _Plan, totals: dict[str, int]
    ) -> None:
        try:
            reply = conn.read_response()
        except redis.exceptions.NoScriptError:  # Redis restarted or flushed its scripts
            reply = None  # _run below loads the script again
        for _ in range(self.settings.max_attempts):
            outcome = _s(reply[0]) if reply is not None else None
            if outcome == "ok":
                totals["events"] += int(reply[1])
                totals["skipped"] += plan.skipped
                totals["objects"] += len(plan.items)
                for item in plan.items:
                    if item.etype:
                        totals[item.etype] = totals.get(item.etype, 0) + 1
                return
            if outcome == "fenced":  # a deposed collector's chunk: nothing was written
                raise _Fenced(int(reply[1]))
            if outcome is not None:
                if outcome == "epoch":  # the events were made for another epoch: remake them
                    new = _s(reply[1])
                    if new != self.epochs.get(keys.site):
                        log.warning("site %s: epoch %s began; events are made for it",
                                    keys.site, new)  # fmt: skip
                    self.epochs[keys.site] = new
                else:  # another worker wrote one of these objects: read again
                    totals["conflicts"] += 1
                    time.sleep(0.001)
                due = plan.due  # the retry drains what the refused batch was to
                plan = self._plan(keys, part, self._read(dest, keys, part))
                plan.due = due
                if not plan.items:
                    totals["skipped"] += plan.skipped
                    return
            reply = self._run(dest, keys, part, plan)
        raise ApplyConflict(f"gave up on a {part.kind} batch of cycle {part.cycle}")

    # -- reading and diffing -------------------------------------------------------
    def _read(self, dest: Destination, keys: SiteKeys, chunk: Chunk) -> list[tuple]:
        """``(item, user, key, stored record)`` for every item of ``chunk``;
        key is None for a vanished job that was never stored."""
        items, kind = chunk.items, chunk.kind
        users: list[str | None] = []
        if kind == JOB:
            need = [it["id"] for it in items if it["op"] == VANISHED]
            owners = self._owners(dest, keys, need) if need else {}
            for it in items:
                if it["op"] == VANISHED:
                    users.append(owners.get(it["id"]))
                else:
                    users.append(it["record"].get("user"))
        else:
            users = [None] * len(items)
        object_keys = []
        for it, user in zip(items, users):
            if kind != JOB:
                object_keys.append(keys.node(it["id"]) if kind == NODE else keys.queue(it["id"]))
            elif user:
                object_keys.append(keys.job(user, it["id"]))
            else:
                object_keys.append(None)
        replies = iter(dest.read_hashes([k for k in object_keys if k is not None]))
        return [
            (it, user, okey, next(replies) if okey is not None else None)
            for it, user, okey in zip(items, users, object_keys)
        ]

    def _owners(self, dest: Destination, keys: SiteKeys, ids: list[str]) -> dict[str, str | None]:
        """The owners of vanished jobs, from the owner index.

        A pool of workers applies a site's chunks side by side, so a job that
        appeared in one cycle and vanished in the next may be finalised here
        while the older chunk that creates it is still in another worker's
        hands.  Skipping it would lose its final for good (the collector has
        moved on): it is waited for, ``settings.vanished_wait`` seconds at most."""
        owners: dict[str, str | None] = dict(zip(ids, dest.reader.hmget(keys.owner, ids)))
        deadline = time.monotonic() + self.settings.vanished_wait
        missing = [j for j, user in owners.items() if user is None]
        if missing:
            log.info("site %s: %d vanished job(s) not stored yet (%s...): waiting for them",
                     keys.site, len(missing), missing[0])  # fmt: skip
        while missing and time.monotonic() < deadline:
            time.sleep(0.02)
            owners.update(zip(missing, dest.reader.hmget(keys.owner, missing)))
            missing = [j for j in missing if owners[j] is None]
        return owners

    def _due_finished(self, dest: Destination, keys: SiteKeys) -> list[str]:
        """The users' finished sets whose oldest job's hash has expired (ended
        more than the retention ago), a few a chunk: the script drains them
        (apply.lua), and with them the owner index and the fingerprints."""
        cutoff = int(time.time() * 1000) - self.settings.retention * 1000
        due = dest.reader.zrangebyscore(keys.oldest_finished, "-inf", f"({cutoff}", 0, 4)
        return [_s(key) for key in due]

    def _plan(self, keys: SiteKeys, chunk: Chunk, reads: list[tuple]) -> _Plan:
        """The batch's writes and events, made for the epoch the worker believes
        in now; the plan keeps that epoch, which the script is sent with."""
        plan = _Plan(self.epochs[keys.site])
        for it, user, okey, stored in reads:
            if okey is None or _stale(chunk, it, stored):  # nothing to do for this one
                plan.skipped += 1
                continue
            for item in self._diff(keys, chunk, it, user, okey, stored, plan.epoch):
                plan.add(item)
        return plan

    def _diff(
        self,
        keys: SiteKeys,
        chunk: Chunk,
        it: Item,
        user: str | None,
        okey: str,
        stored: dict,
        epoch: str,
    ) -> list[_ObjectWrite]:
        """What writing ``it`` over ``stored`` in ``epoch`` takes: the fields,
        the event(s), where."""
        kind, oid, op = chunk.kind, it["id"], it["op"]
        new, record = _new_record(chunk, it, stored)
        changes = _changes(stored, new, record) if op != REMOVE else {}
        expected = _identity(stored)
        live = it.get("live", True)
        if stored and not changes and op != REMOVE:
            # Same record (e.g. a restarted collector re-shipping): note the cycle only.
            fp_value = f"{it.get('fp', '')} {new.get('state', '')}" if live else ""
            unused = self._index(keys, kind)  # a touch writes no index, stream or set
            touch = _ObjectWrite(
                op="touch", expected=expected, oid=oid, fp_field=object_key(kind, oid),
                fp_value=fp_value, final="0", fields={"cycle": str(chunk.cycle)}, key=okey,
                index=unused, stream=keys.events, finished=unused,
            )  # fmt: skip
            return [touch]
        # versions count within an epoch: the first change in a new one is 1 again
        version = int(stored.get("version") or 0) + 1 if stored.get("epoch") == epoch else 1
        state = new.get("state", "")
        final = kind == JOB and (state in TERMINAL or op == VANISHED)
        fields = _fields_to_write(chunk, op, stored, new, changes, version, final)
        if fields and stored.get("epoch") != epoch:  # the epoch this version counts in
            fields["epoch"] = epoch
        if final and self.settings.pack_finished_native and new.get("native"):
            fields.update(self._packed_native(new["native"], {**stored, **fields}))
        w = _Write(keys, chunk, it, user, okey, live, state, epoch, expected)
        if final and not stored:  # ended before it was ever seen: new, then final
            fields.pop("final")
            done = {f: fields[f] for f in ("updated_at", "cycle", "epoch")}
            done.update(version=str(version + 1), final="1")
            # Both are checked against what was read ("" here): the script writes
            # the first before the second.
            return [self._item(w, NEW, version, changes, record, fields, False),
                    self._item(w, FINAL, version + 1, {}, record, done, True)]  # fmt: skip
        etype = _event_type(op, final, bool(stored), changes)
        return [self._item(w, etype, version, changes, record, fields, final)]

    def _packed_native(self, text: str, fields: dict[str, str]) -> dict[str, str]:
        """The fields that keep a finished job's native record ``text`` packed in
        its hash, whose fields once written are ``fields`` (jobtap.packing)."""
        return {"native": "", PRIMED_NATIVE: pack_native(text, fields)}

    def _item(
        self,
        w: _Write,
        etype: str,
        version: int,
        changes: dict[str, Any],
        record: dict[str, Any],
        fields: dict[str, str],
        final: bool,
    ) -> _ObjectWrite:
        """One write of an object with its event (``record`` as of ``version``)."""
        keys, kind, oid, op = w.keys, w.chunk.kind, w.it["id"], w.it["op"]
        record = {**record, "version": version, "updated_at": w.chunk.observed_at}
        event = self._event(
            site=keys.site, epoch=w.epoch, kind=kind, type=etype, object_id=oid, user=w.user,
            version=version, observed_at=w.chunk.observed_at, changes=changes, record=record,
            event_version=self.settings.event_version,
        )  # fmt: skip
        if kind == JOB:
            assert w.user is not None
            channel, index = keys.user_channel(w.user), keys.user_jobs(w.user)
            stream, finished = keys.user_events(w.user), keys.user_finished(w.user)
        else:
            channel, index, stream = keys.nodes_channel, self._index(keys, kind), keys.events
            finished = index
        fp_value = f"{w.it.get('fp', '')} {w.state}" if (w.live and op == UPSERT) else ""
        return _ObjectWrite(
            op="remove" if op == REMOVE else "apply", expected=w.expected, oid=oid,
            user=w.user or "", channel=channel, eid=event["id"], etype=etype,
            json=orjson.dumps(event), fp_field=object_key(kind, oid), fp_value=fp_value,
            final="1" if final else "0", fields=fields, key=w.okey, index=index, stream=stream,
            finished=finished,
        )  # fmt: skip

    def _event(self, **what: Any) -> Event:
        """The event of one write (``jobtap.events.make_event``)."""
        return make_event(**what)

    @staticmethod
    def _index(keys: SiteKeys, kind: str) -> str:
        return keys.node_index if kind == NODE else keys.queue_index

    # -- writing -----------------------------------------------------------------------
    def _run(self, dest: Destination, keys: SiteKeys, chunk: Chunk, plan: _Plan) -> list:
        """Run one batch's script and wait for its reply."""
        kargs, argv = self._args(keys, chunk, plan)
        return dest.script(keys=kargs, args=argv)

    def _args(self, keys: SiteKeys, chunk: Chunk, plan: _Plan) -> tuple[list, list]:
        s = self.settings
        now_ms = int(time.time() * 1000)
        min_id = f"{now_ms - s.max_age * 1000}-0" if s.max_age else ""
        kargs = [keys.events, keys.owner, keys.fingerprints, keys.expiry, keys.meta,
                 keys.oldest_finished]  # fmt: skip
        argv: list[Any] = [
            chunk.cycle,
            now_ms,
            s.site_maxlen,
            s.user_maxlen,
            s.retention,
            min_id,
            keys.all_channel,
            len(plan.items),
            plan.epoch,  # the epoch the events carry, not the one believed in now
            *epoch_args(chunk.cycle),
            self.publish,
            "1" if s.store_events_once else "0",
        ]
        for item in plan.items:
            kargs += item.keys()
            argv += item.argv()
        kargs += plan.due  # last of the keys: the finished sets to drain
        argv.append(chunk.lease)  # last: the lease fence (the lease fence, jobtap.contract.lease)
        return kargs, argv


@dataclass(slots=True)
class _Write:
    """What every write of one chunk item shares."""

    keys: SiteKeys
    chunk: Chunk
    it: Item
    user: str | None
    okey: str
    live: bool
    state: str
    epoch: str
    expected: tuple[str, str, str]  # version, epoch and cycle read: the script checks them


@dataclass(slots=True, kw_only=True)
class _ObjectWrite:
    """One object's write and its event, as ``apply.lua`` takes them: three KEYS
    (:meth:`keys`) and an item's ARGV (:meth:`argv`, the one place that knows the
    script's order)."""

    op: str  # "apply", "remove", or "touch" (a record equal to the stored one: its cycle)
    expected: tuple[str, str, str]  # version, epoch and cycle read: the script checks them
    oid: str
    user: str = ""
    channel: str = ""  # where the event is published
    eid: str = ""  # the event's id
    etype: str = ""
    json: bytes = b""  # the event
    fp_field: str  # the object's field in the fingerprints hash
    fp_value: str  # "fingerprint state", or "" to leave it
    final: str  # "1": the object's final
    fields: dict[str, str]  # the hash fields to write
    key: str  # the object's hash
    index: str  # the owner's job index, or the node/queue set
    stream: str  # the stream the event goes to
    finished: str  # the owner's finished jobs (jobs only; the index again otherwise)

    def keys(self) -> list[str]:
        return [self.key, self.index, self.stream, self.finished]

    def argv(self) -> list[Any]:
        argv: list[Any] = [
            self.op, *self.expected, self.oid, self.user, self.channel, self.eid, self.etype,
            self.json, self.fp_field, self.fp_value, self.final, len(self.fields),
        ]  # fmt: skip
        for f, v in self.fields.items():
            argv += [f, v]
        return argv


class _Plan:
    """One batch's writes, with the epoch their events were made for: the
    script writes them only if the site is in that epoch."""

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.items: list[_ObjectWrite] = []
        self.skipped = 0
        self.due: list[str] = []  # users' finished sets to drain (Applier._due_finished)

    def add(self, item: _ObjectWrite) -> None:
        self.items.append(item)


_MISSING = object()


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _log_retry(state) -> None:
    exc = state.outcome.exception() if state.outcome else None
    log.warning(
        "Redis went away while applying a chunk (%s): trying again in %.1f s",
        exc, state.next_action.sleep if state.next_action else 0.0,
    )  # fmt: skip


def _identity(stored: dict[str, str]) -> tuple[str, str, str]:
    """What the script checks is unchanged before writing: the ``version``,
    ``epoch`` and ``cycle`` read (version '' for an object not stored).  The
    cycle is in it because a record equal to the stored one writes only its
    cycle: a worker that read before that must not write an older record over
    it."""
    if not stored.get("version"):
        return ("", "", "")
    return (stored["version"], stored.get("epoch", ""), stored.get("cycle", ""))


def _stale(chunk: Chunk, it: Item, stored: dict[str, str]) -> bool:
    """Whether ``it`` must not be applied: the job's final went out, the stored
    record is from this cycle or a later one, or it removes what is not there."""
    if stored.get("final") == "1" or (stored and int(stored.get("cycle") or 0) >= chunk.cycle):
        return True
    return it["op"] == REMOVE and not stored


def _new_record(chunk: Chunk, it: Item, stored: dict[str, str]) -> tuple[dict, dict]:
    """The new record as a hash and as values.  An upsert brings it; a vanished
    job or a removed node starts from the stored one."""
    if it["op"] == UPSERT:
        record = dict(it["record"])
        return to_hash(record), record
    # every field of the kind: a hash leaves out those that never had a value
    new = dict.fromkeys(FIELDS[chunk.kind], "")
    new.update((f, v) for f, v in stored.items() if f not in BOOKKEEPING)
    if it["op"] == VANISHED:
        new.update(state=UNKNOWN, reason="vanished", end_time=chunk.observed_at)
    return new, from_hash(new)


def _event_type(op: str, final: bool, stored: bool, changes: dict[str, Any]) -> str:
    if op == REMOVE:
        return REMOVED
    if final:
        return FINAL
    if not stored:
        return NEW
    return STATE if "state" in changes else UPDATE


def _fields_to_write(
    chunk: Chunk,
    op: str,
    stored: dict[str, str],
    new: dict[str, str],
    changes: dict[str, Any],
    version: int,
    final: bool,
) -> dict[str, str]:
    """Only what changed (a new object: every field with a value) plus the bookkeeping."""
    if op == REMOVE:
        return {}
    if stored:
        native_changed = any(k.startswith("native") for k in changes)
        fields = {f: new[f] for f in new if f in changes or (f == "native" and native_changed)}
    else:  # a new object: its fields without a value are not written (absent reads as empty)
        fields = {f: v for f, v in new.items() if v != ""}
    fields["version"] = str(version)
    fields["updated_at"] = chunk.observed_at
    fields["cycle"] = str(chunk.cycle)
    if final:
        fields["final"] = "1"
    return fields


def _changes(stored: dict[str, str], new: dict[str, str], record: dict[str, Any]) -> dict:
    """Attribute-level diff: ``{attr: [old, new]}``, comparing encoded values.

    ``native`` is compared key by key (``native.substate``), so that a change
    the normaliser does not surface is still named.
    """
    out: dict[str, list[Any]] = {}
    for f, value in new.items():
        old = stored.get(f, "")
        if old == value or f in BOOKKEEPING:
            continue
        if f == "native":
            a = decode_value(f, old) if old else {}  # None if not JSON: written again
            b = record.get("native") or {}
            if not isinstance(a, dict) or not isinstance(b, dict):
                out[f] = [a, b]
                continue
            before = len(out)
            for k, v in b.items():
                was = a.get(k, _MISSING)
                if was != v:
                    out[f"native.{k}"] = [None if was is _MISSING else was, v]
            for k in a.keys() - b.keys():
                out[f"native.{k}"] = [a[k], None]
            if len(out) == before:  # same content, other order
                out["native"] = [a, b]
        else:
            out[f] = [decode_value(f, old), record.get(f)]
    return out
