"""The rq job: apply one chunk shipped by the collector.

For each object of the chunk the worker reads the stored record, computes the
attribute-level changes, bumps ``version`` and builds the event; then one Lua
script writes every hash, appends to the streams and publishes, after checking
that no other worker touched those objects in between (if one did, the worker
reads again and retries).  Together with the cycle number this makes a chunk
safe to apply in any order and on retry:

- a record from a cycle older than (or equal to) the stored one is ignored;
- a job whose ``final`` event went out is never changed again;
- a record equal to the stored one bumps nothing and emits nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import redis

from jobtap.events import FINAL, NEW, REMOVED, STATE, UPDATE, make_event, object_key
from jobtap.keys import SiteKeys
from jobtap.schema import (
    BOOKKEEPING,
    JOB,
    NODE,
    TERMINAL,
    UNKNOWN,
    decode_value,
    from_hash,
    to_hash,
)

from .chunk import REMOVE, UPSERT, VANISHED, Chunk, Item

log = logging.getLogger("jobtap.workers")

_SCRIPT = Path(__file__).with_name("apply.lua").read_text()


@dataclass
class Settings:
    """Retention of what the workers write."""

    retention: int = 2 * 86400  # seconds a finished job's hash is kept
    site_maxlen: int = 100_000  # events kept in the site stream (approximately)
    user_maxlen: int = 10_000  # events kept in each user's stream
    max_age: int = 7 * 86400  # events older than this are trimmed (seconds; 0: never)
    max_attempts: int = 20
    batch: int = 50  # objects written by one atomic script call (smaller scripts run faster)


class ApplyConflict(RuntimeError):
    """Other workers kept changing the same objects; rq retries the chunk."""


_applier: Applier | None = None  # one per worker process: one script load, one pool


def configure(data_redis: redis.Redis, settings: Settings | None = None) -> Applier:
    """Set up this worker process's :class:`Applier` (see workers/service.py)."""
    global _applier
    _applier = Applier(data_redis, settings)
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
    def __init__(self, r: redis.Redis, settings: Settings | None = None):
        self.redis = r
        self.settings = settings or Settings()
        self.script = r.register_script(_SCRIPT)
        r.script_load(_SCRIPT)  # batches are sent by sha without waiting for a reply
        # Reads go through a twin client that decodes replies in hiredis (C).
        self.reader = redis.Redis(
            connection_pool=redis.ConnectionPool(
                **{**r.connection_pool.connection_kwargs, "decode_responses": True}
            )
        )

    def apply(self, chunk: Chunk) -> dict[str, int]:
        """Apply a chunk as a series of atomic batches of ``settings.batch`` objects.

        The stored records of the whole chunk are read in one pipeline first.
        Then each batch's script is sent without waiting for its reply, and
        the next batch is diffed while Redis runs it: on two cores most of
        Redis' work overlaps ours.  Each batch re-checks the versions it read
        and is written atomically; a batch that lost a race is read again and
        redone.  A chunk cut short by a crash is finished by its retry (the
        applied batches are then skipped by the cycle check).
        """
        keys = SiteKeys(chunk.site)
        reads = self._read(keys, chunk)
        size = self.settings.batch
        totals = {"events": 0, "skipped": 0}
        conn = self.redis.connection_pool.get_connection()
        clean = False
        try:
            in_flight: tuple[Chunk, _Plan] | None = None
            for i in range(0, len(reads), size):
                part = chunk.part([it for it, _, _, _ in reads[i : i + size]])
                plan = self._plan(keys, chunk, reads[i : i + size])
                if in_flight is not None:
                    self._finish(conn, keys, *in_flight, totals)
                    in_flight = None
                if plan.items:
                    self._send(conn, keys, part, plan)
                    in_flight = (part, plan)
                else:
                    totals["skipped"] += plan.skipped
            if in_flight is not None:
                self._finish(conn, keys, *in_flight, totals)
            clean = True
        finally:
            if not clean:  # a reply may still be on its way: never reuse this socket
                conn.disconnect()
            self.redis.connection_pool.release(conn)
        return totals

    def _send(self, conn, keys: SiteKeys, part: Chunk, plan: _Plan) -> None:
        kargs, argv = self._args(keys, part, plan)
        conn.send_command("EVALSHA", self.script.sha, len(kargs), *kargs, *argv)

    def _finish(self, conn, keys, part, plan: _Plan, totals: dict[str, int]) -> None:
        try:
            reply = conn.read_response()
        except redis.exceptions.NoScriptError:  # Redis restarted or flushed its scripts
            reply = None  # _run below loads the script again
        for _ in range(self.settings.max_attempts):
            if reply is not None and reply[0] in (b"ok", "ok"):
                totals["events"] += int(reply[1])
                totals["skipped"] += plan.skipped
                return
            if reply is not None:
                time.sleep(0.001)  # another worker wrote one of these objects: read again
                plan = self._plan(keys, part, self._read(keys, part))
                if not plan.items:
                    totals["skipped"] += plan.skipped
                    return
            reply = self._run(keys, part, plan)
        raise ApplyConflict(f"gave up on a {part.kind} batch of cycle {part.cycle}")

    # -- reading and diffing -------------------------------------------------------
    def _read(self, keys: SiteKeys, chunk: Chunk) -> list[tuple]:
        """``(item, user, key, stored record)`` for every item of ``chunk``;
        key is None for a vanished job that was never stored."""
        items, kind = chunk.items, chunk.kind
        users: list[str | None] = []
        if kind == JOB:
            need = [it["id"] for it in items if it["op"] == VANISHED]
            owners = dict(zip(need, self.reader.hmget(keys.owner, need))) if need else {}
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
        pipe = self.reader.pipeline(transaction=False)
        for k in object_keys:
            if k is not None:
                pipe.hgetall(k)
        replies = iter(pipe.execute())
        return [
            (it, user, okey, next(replies) if okey is not None else None)
            for it, user, okey in zip(items, users, object_keys)
        ]

    def _plan(self, keys: SiteKeys, chunk: Chunk, reads: list[tuple]) -> _Plan:
        plan = _Plan()
        for it, user, okey, stored in reads:
            if okey is None or _stale(chunk, it, stored):  # nothing to do for this one
                plan.skipped += 1
                continue
            plan.add(self._diff(keys, chunk, it, user, okey, stored))
        return plan

    def _diff(
        self, keys: SiteKeys, chunk: Chunk, it: Item, user: str | None, okey: str, stored: dict
    ) -> _Item:
        """What writing ``it`` over ``stored`` takes: the fields, the event, where."""
        kind, oid, op = chunk.kind, it["id"], it["op"]
        new, record = _new_record(chunk, it, stored)
        changes = _changes(stored, new, record) if op != REMOVE else {}
        expected = stored.get("version", "")
        fp_field = object_key(kind, oid)
        live = it.get("live", True)
        if stored and not changes and op != REMOVE:
            # Same record (e.g. a restarted collector re-shipping): note the cycle only.
            fp_value = f"{it.get('fp', '')} {new.get('state', '')}" if live else ""
            return _Item("touch", expected, oid, "", "", "", "", b"", fp_field, fp_value, "0",
                         {"cycle": str(chunk.cycle)}, okey, self._index(keys, kind),
                         keys.events)  # fmt: skip
        version = int(expected or 0) + 1
        state = new.get("state", "")
        final = kind == JOB and (state in TERMINAL or op == VANISHED)
        etype = _event_type(op, final, bool(stored), changes)
        fields = _fields_to_write(chunk, op, stored, new, changes, version, final)
        record["version"] = version
        record["updated_at"] = chunk.observed_at
        event = make_event(
            site=keys.site, kind=kind, type=etype, object_id=oid, user=user, version=version,
            observed_at=chunk.observed_at, changes=changes, record=record,
        )  # fmt: skip
        if kind == JOB:
            assert user is not None
            channel, index = keys.user_channel(user), keys.user_jobs(user)
            stream = keys.user_events(user)
        else:
            channel, index, stream = keys.nodes_channel, self._index(keys, kind), keys.events
        fp_value = f"{it.get('fp', '')} {state}" if (live and op == UPSERT) else ""
        return _Item("remove" if op == REMOVE else "apply", expected, oid, user or "", channel,
                     event["id"], etype, orjson.dumps(event), fp_field, fp_value,
                     "1" if final else "0", fields, okey, index, stream)  # fmt: skip

    @staticmethod
    def _index(keys: SiteKeys, kind: str) -> str:
        return keys.node_index if kind == NODE else keys.queue_index

    # -- writing -----------------------------------------------------------------------
    def _run(self, keys: SiteKeys, chunk: Chunk, plan: _Plan) -> list:
        """Run one batch's script and wait for its reply."""
        kargs, argv = self._args(keys, chunk, plan)
        return self.script(keys=kargs, args=argv)

    def _args(self, keys: SiteKeys, chunk: Chunk, plan: _Plan) -> tuple[list, list]:
        s = self.settings
        now_ms = int(time.time() * 1000)
        min_id = f"{now_ms - s.max_age * 1000}-0" if s.max_age else ""
        kargs = [keys.events, keys.owner, keys.fingerprints, keys.expiry]
        argv: list[Any] = [
            chunk.cycle,
            now_ms,
            s.site_maxlen,
            s.user_maxlen,
            s.retention,
            min_id,
            keys.all_channel,
            len(plan.items),
        ]
        for item in plan.items:
            kargs += [item.key, item.index, item.stream]
            argv += [
                item.op,
                item.expected,
                item.oid,
                item.user,
                item.channel,
                item.eid,
                item.etype,
                item.json,
                item.fp_field,
                item.fp_value,
                item.final,
                len(item.fields),
            ]
            for f, v in item.fields.items():
                argv += [f, v]
        return kargs, argv


@dataclass(slots=True)
class _Item:
    op: str
    expected: str
    oid: str
    user: str
    channel: str
    eid: str
    etype: str
    json: bytes
    fp_field: str
    fp_value: str
    final: str
    fields: dict[str, str]
    key: str
    index: str
    stream: str


class _Plan:
    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.skipped = 0

    def add(self, item: _Item) -> None:
        self.items.append(item)


_MISSING = object()


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
    new = {f: v for f, v in stored.items() if f not in BOOKKEEPING}
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
    """Only what changed (a new object: everything) plus the bookkeeping."""
    if op == REMOVE:
        return {}
    if stored:
        native_changed = any(k.startswith("native") for k in changes)
        fields = {f: new[f] for f in new if f in changes or (f == "native" and native_changed)}
    else:
        fields = dict(new)
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
            a = orjson.loads(old) if old else {}
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
