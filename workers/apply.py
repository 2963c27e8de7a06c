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

from sdk.events import FINAL, NEW, REMOVED, STATE, UPDATE, event_id, object_key
from sdk.keys import SiteKeys
from sdk.schema import BOOKKEEPING, JOB, NODE, TERMINAL, UNKNOWN, decode_value, to_hash

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


class ApplyConflict(RuntimeError):
    """Other workers kept changing the same objects; rq retries the chunk."""


_config: dict[str, Any] = {"redis": None, "settings": Settings()}


def configure(data_redis: redis.Redis | None, settings: Settings | None = None) -> None:
    """Set the data Redis and retention for this worker process (see workers.service)."""
    _config["redis"] = data_redis
    if settings is not None:
        _config["settings"] = settings


def apply_chunk(payload: bytes) -> dict[str, int]:
    """rq entry point: apply one chunk; return counts for the rq log."""
    r = _config["redis"]
    if r is None:
        from rq import get_current_connection

        r = get_current_connection()
    return Applier(r, _config["settings"]).apply(orjson.loads(payload))


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Applier:
    def __init__(self, r: redis.Redis, settings: Settings | None = None):
        self.redis = r
        self.settings = settings or Settings()
        self.script = r.register_script(_SCRIPT)

    def apply(self, chunk: dict[str, Any]) -> dict[str, int]:
        keys = SiteKeys(chunk["site"])
        kind = chunk["kind"]
        for _ in range(self.settings.max_attempts):
            plan = self._plan(keys, kind, chunk)
            if not plan.items:
                return {"events": 0, "skipped": plan.skipped}
            reply = self._run(keys, chunk, plan)
            if _s(reply[0]) == "ok":
                return {"events": int(reply[1]), "skipped": plan.skipped}
            time.sleep(0.001)  # another worker wrote one of our objects: read again
        raise ApplyConflict(f"gave up on a {kind} chunk of cycle {chunk['cycle']} of {keys.site}")

    # -- reading and diffing -------------------------------------------------------
    def _plan(self, keys: SiteKeys, kind: str, chunk: dict[str, Any]) -> _Plan:
        items = chunk["items"]
        users: list[str | None] = []
        if kind == JOB:
            need = [it["id"] for it in items if it["op"] == "vanished"]
            owners = dict(zip(need, self.redis.hmget(keys.owner, need))) if need else {}
            for it in items:
                if it["op"] == "vanished":
                    u = owners.get(it["id"])
                    users.append(_s(u) if u is not None else None)
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
        pipe = self.redis.pipeline(transaction=False)
        for k in object_keys:
            if k is not None:
                pipe.hgetall(k)
        replies = iter(pipe.execute())
        plan = _Plan()
        for it, user, okey in zip(items, users, object_keys):
            if okey is None:  # a vanished job we never stored: nothing to finalise
                plan.skipped += 1
                continue
            stored = {_s(k): _s(v) for k, v in next(replies).items()}
            self._diff(plan, keys, kind, chunk, it, user, okey, stored)
        return plan

    def _diff(self, plan, keys, kind, chunk, it, user, okey, stored) -> None:
        cycle, oid, op = int(chunk["cycle"]), it["id"], it["op"]
        fp_field = object_key(kind, oid)
        live = it.get("live", True)
        if stored.get("final") == "1" or (stored and int(stored.get("cycle") or 0) >= cycle):
            plan.skipped += 1
            return
        if op == "remove" and not stored:
            plan.skipped += 1
            return
        if op == "upsert":
            new = to_hash(it["record"])
        elif op == "vanished":
            new = dict(stored)
            new.update(state=UNKNOWN, reason="vanished", end_time=chunk["observed_at"])
        else:  # remove
            new = dict(stored)
        for f in BOOKKEEPING:
            new.pop(f, None)
        changes = _changes(stored, new) if op != "remove" else {}
        expected = stored.get("version", "")
        if stored and not changes and op != "remove":
            # Same record (e.g. a restarted collector re-shipping): note the cycle only.
            fp_value = f"{it.get('fp', '')} {new.get('state', '')}" if live else ""
            plan.add(
                _Item(
                    "touch",
                    expected,
                    oid,
                    "",
                    "",
                    "",
                    "",
                    b"",
                    fp_field,
                    fp_value,
                    "0",
                    {"cycle": str(cycle)},
                    okey,
                    self._index(keys, kind),
                    keys.events,
                )
            )
            return
        version = int(expected or 0) + 1
        state = new.get("state", "")
        final = kind == JOB and (state in TERMINAL or op == "vanished")
        if op == "remove":
            etype = REMOVED
        elif final:
            etype = FINAL
        elif not stored:
            etype = NEW
        elif "state" in changes:
            etype = STATE
        else:
            etype = UPDATE
        new["version"] = str(version)
        new["updated_at"] = chunk["observed_at"]
        new["cycle"] = str(cycle)
        if final:
            new["final"] = "1"
        record = {f: decode_value(f, v) for f, v in new.items() if f not in ("cycle", "final")}
        eid = event_id(keys.site, kind, oid, version)
        event = {
            "id": eid,
            "site": keys.site,
            "kind": kind,
            "type": etype,
            "object_id": oid,
            "user": user,
            "version": version,
            "observed_at": chunk["observed_at"],
            "changes": changes,
            "record": record,
        }
        if kind == JOB:
            channel, index = keys.user_channel(user), keys.user_jobs(user)
            stream = keys.user_events(user)
        else:
            channel, index, stream = keys.nodes_channel, self._index(keys, kind), keys.events
        fp_value = f"{it.get('fp', '')} {state}" if (live and op == "upsert") else ""
        plan.add(
            _Item(
                "remove" if op == "remove" else "apply",
                expected,
                oid,
                user or "",
                channel,
                eid,
                etype,
                orjson.dumps(event),
                fp_field,
                fp_value,
                "1" if final else "0",
                new if op != "remove" else {},
                okey,
                index,
                stream,
            )
        )

    @staticmethod
    def _index(keys: SiteKeys, kind: str) -> str:
        return keys.node_index if kind == NODE else keys.queue_index

    # -- writing -----------------------------------------------------------------------
    def _run(self, keys: SiteKeys, chunk: dict[str, Any], plan: _Plan) -> list:
        s = self.settings
        now_ms = int(time.time() * 1000)
        min_id = f"{now_ms - s.max_age * 1000}-0" if s.max_age else ""
        kargs = [keys.events, keys.owner, keys.fingerprints, keys.expiry]
        argv: list[Any] = [
            chunk["cycle"],
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
        return self.script(keys=kargs, args=argv)


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


def _changes(stored: dict[str, str], new: dict[str, str]) -> dict[str, list[Any]]:
    """Attribute-level diff of two encoded records: ``{attr: [old, new]}``.

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
            b = orjson.loads(value) if value else {}
            if not isinstance(a, dict) or not isinstance(b, dict):
                out[f] = [a, b]
                continue
            for k in b.keys() | a.keys():
                if a.get(k) != b.get(k):
                    out[f"native.{k}"] = [a.get(k), b.get(k)]
        else:
            out[f] = [decode_value(f, old), decode_value(f, value)]
    return out
