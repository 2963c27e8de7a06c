"""The site's collector lease: one active collector per site, standbys waiting,
and a generation that fences a deposed collector (Kubernetes' leader-election
``Lease`` is the model).  The whole protocol is here: the collector takes and
keeps the lease with :class:`Lease`, the workers' write runs :data:`FENCE_LUA`.

Keys, all of the site (one slot on a Redis Cluster):

- ``SiteKeys.lease``: a hash ``holder``, ``generation``, ``acquired_at``,
  ``renewed_at``, ``duration_ms``, with a PEXPIRE of the lease's duration;
- ``meta``'s ``LEASE_GENERATION``: the counter, INCR'd by each acquisition (never
  by a renewal), so a generation names one holding of the lease;
- ``SiteKeys.standbys``: a hash holder -> JSON (since, seen), each standby
  writing itself there at each poll; entries not seen for two leases are dropped.

Each step is one Lua script, a compare-and-set on holder and generation:
``acquire`` (free or expired -> ours with a new generation; a standby registers
itself when it is not), ``renew`` (ours with this generation -> PEXPIRE again),
``release`` (ours -> gone), and ``guarded`` writes (ours -> run these commands,
else none of them).  The holder identity is ``host:pid:random``.

Every chunk carries the generation (:mod:`jobtap.contract.chunk`) and the apply
step drops a chunk whose generation is below the site's (:data:`FENCE_LUA`):
a collector paused past its lease (SIGSTOP, a frozen VM) that ships the chunks
it held when it resumes writes nothing.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import redis

from . import meta
from .epoch import EPOCH_LUA
from .keys import SiteKeys

log = logging.getLogger("jobtap.collector")

HOST = socket.gethostname()
MAX_LEASE = 15.0
MIN_LEASE = 1.0


def default_lease(interval: float) -> float:
    """3 x the interval, at most 15 s (and at least 1 s)."""
    return max(MIN_LEASE, min(3 * interval, MAX_LEASE))


def new_identity(host: str = HOST) -> str:
    return f"{host}:{os.getpid()}:{secrets.token_hex(3)}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


# held(lease, holder, generation): is the lease this holder's, of this generation?
_HELD = """
local function held(lease, holder, generation)
  local cur = redis.call('HMGET', lease, 'holder', 'generation')
  return cur[1] == holder and cur[2] == generation
end
"""

# KEYS: lease, meta, standbys.  ARGV: holder, duration_ms, floor, at, dead
# (a holder known dead, taken over at once), standby TTL ms.
# -> {1, generation} or {0, holder, generation, pttl}
_ACQUIRE = (
    meta.lua_prelude()
    + """
local cur = redis.call('HMGET', KEYS[1], 'holder', 'generation')
if cur[1] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'renewed_at', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, cur[2]}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if cur[1] and cur[1] ~= ARGV[5] then
  local seen = redis.call('HGET', KEYS[3], ARGV[1])
  local since = ARGV[4]
  if seen then since = cjson.decode(seen)['since'] end
  redis.call('HSET', KEYS[3], ARGV[1], cjson.encode({since = since, seen = now_ms}))
  redis.call('PEXPIRE', KEYS[3], ARGV[6])
  return {0, cur[1], cur[2] or '', redis.call('PTTL', KEYS[1])}
end
local gen = redis.call('HINCRBY', KEYS[2], META.LEASE_GENERATION, 1)
local floor = tonumber(ARGV[3])
if gen <= floor then
  gen = floor + 1
  redis.call('HSET', KEYS[2], META.LEASE_GENERATION, gen)
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'generation', gen, 'acquired_at', ARGV[4],
  'renewed_at', ARGV[4], 'duration_ms', ARGV[2], 'previous', cur[1] or '')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[1])
-- standbys not seen for a while are gone
local all = redis.call('HGETALL', KEYS[3])
for i = 1, #all, 2 do
  local ok, v = pcall(cjson.decode, all[i + 1])
  if not ok or (now_ms - tonumber(v['seen'] or 0)) > tonumber(ARGV[6]) then
    redis.call('HDEL', KEYS[3], all[i])
  end
end
return {1, tostring(gen)}
"""
)

# KEYS: lease, meta.  ARGV: holder, generation, duration_ms, at.
# -> {1} or {0, holder, gen}.  A lease that ran out and that nobody took since
# (the counter still at this generation) is taken back with its generation:
# no other collector wrote meanwhile, so there is nothing to fence.
_RENEW = (
    meta.lua_prelude()
    + _HELD
    + """
if held(KEYS[1], ARGV[1], ARGV[2]) then
  redis.call('HSET', KEYS[1], 'renewed_at', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1}
end
local cur = redis.call('HMGET', KEYS[1], 'holder', 'generation')
if not cur[1] and redis.call('HGET', KEYS[2], META.LEASE_GENERATION) == ARGV[2] then
  redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'generation', ARGV[2], 'acquired_at', ARGV[4],
    'renewed_at', ARGV[4], 'duration_ms', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1}
end
return {0, cur[1] or '', cur[2] or ''}
"""
)

# KEYS: lease, standbys.  ARGV: holder, generation.
_RELEASE = (
    _HELD
    + """
redis.call('HDEL', KEYS[2], ARGV[1])
if held(KEYS[1], ARGV[1], ARGV[2]) then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""
)

# KEYS: lease.  ARGV: holder, generation, then per command: nargs, command, args...
# Every command's keys are the site's (one slot).  -> 1, or 0 (nothing written)
_GUARDED = (
    _HELD
    + """
if not held(KEYS[1], ARGV[1], ARGV[2]) then
  return 0
end
local pos = 3
while pos <= #ARGV do
  local n = tonumber(ARGV[pos])
  redis.call(unpack(ARGV, pos + 1, pos + n))
  pos = pos + n + 1
end
return 1
"""
)

# The collector's epoch check (ensure_epoch, epoch.lua, behind the lease check): it
# writes meta only while it holds the lease.
# KEYS: meta, lease.  ARGV: ensure_epoch's four, holder, generation.
# -> ensure_epoch's {epoch, cause, cycle}, or {'lost', '', 0}
GUARDED_EPOCH_LUA = (
    EPOCH_LUA
    + _HELD
    + """
if not held(KEYS[2], ARGV[5], ARGV[6]) then
  return {'lost', '', 0}
end
return ensure_epoch(KEYS[1], tonumber(ARGV[1]), ARGV[2] == '1', ARGV[3], ARGV[4])
"""
)


# The fence in the workers' write (workers/apply.lua is run with EPOCH_LUA, then
# this, in front).  fenced(meta, generation) -> the site's lease generation if the
# chunk's generation is below it (the chunk comes from a collector deposed since:
# it must write nothing), else false.  A chunk without a generation (0: contract
# version 1) passes only while the site has none; a site without a counter (Redis
# lost it) takes any chunk.
FENCE_LUA = """
local function fenced(meta, generation)
  local current = tonumber(redis.call('HGET', meta, META.LEASE_GENERATION) or '0')
  if (tonumber(generation) or 0) < current then
    return current
  end
  return false
end
"""


class LeaseLost(Exception):
    """This collector no longer holds the site's lease: it wrote nothing and
    steps down (the message says who holds it now)."""


@dataclass(frozen=True, slots=True)
class Holding:
    """What ``acquire`` found: ours (with our generation), or someone else's."""

    ours: bool
    holder: str
    generation: int
    ttl_ms: int = 0


class Lease:
    """One collector's side of the site lease.

    ``duration`` seconds without a renewal and the lease is free; the holder
    renews every ``duration / 3`` (:meth:`start_keeper`, a thread, so a long
    stat does not lose it) and before every write (:meth:`check`, one
    round trip).  A standby asks every ``poll`` seconds (``duration / 5``)."""

    def __init__(
        self,
        r: redis.Redis,
        keys: SiteKeys,
        *,
        duration: float,
        identity: str | None = None,
        host: str = HOST,
    ):
        self.redis = r
        self.keys = keys
        self.duration = float(duration)
        self.host = host
        self.identity = identity or new_identity(host)
        self.key = keys.lease
        self.standbys = keys.standbys
        self.generation = 0  # ours while held, else 0
        self.highest = 0  # the highest generation seen (a floor after Redis lost the counter)
        self.valid_until = 0.0  # monotonic: the lease is ours until then at most
        self.lost = threading.Event()
        self.why = ""  # why the lease was lost
        self._acquire = r.register_script(_ACQUIRE)
        self._renew = r.register_script(_RENEW)
        self._release = r.register_script(_RELEASE)
        self._guarded = r.register_script(_GUARDED)
        self._keeper: threading.Thread | None = None
        self._keeper_stop = threading.Event()
        self.on_lost: Callable[[str], None] | None = None

    @property
    def duration_ms(self) -> int:
        return max(1, int(self.duration * 1000))

    @property
    def poll(self) -> float:
        return max(0.05, self.duration / 5)

    @property
    def held(self) -> bool:
        return self.generation > 0 and not self.lost.is_set()

    # -- the steps ---------------------------------------------------------------------
    def acquire(self, *, dead: str = "") -> Holding:
        """Take the lease if it is free (or held by ``dead``, a holder known to
        be gone); else register as a standby and say who holds it."""
        started = time.monotonic()
        reply = self._acquire(
            keys=[self.key, self.keys.meta, self.standbys],
            args=[self.identity, self.duration_ms, self.highest, _now(), dead,
                  2 * self.duration_ms + 5000],
        )  # fmt: skip
        if int(reply[0]) == 1:
            self.generation = int(reply[1])
            self.highest = max(self.highest, self.generation)
            self.valid_until = started + self.duration
            self.lost.clear()
            return Holding(True, self.identity, self.generation, self.duration_ms)
        gen = int(_s(reply[2]) or 0)
        self.highest = max(self.highest, gen)
        return Holding(False, _s(reply[1]), gen, int(reply[3]))

    def renew(self) -> bool:
        """Renew the lease; False (and :attr:`lost` set) if it is no longer ours."""
        if not self.held:
            return False
        started = time.monotonic()
        reply = self._renew(
            keys=[self.key, self.keys.meta],
            args=[self.identity, self.generation, self.duration_ms, _now()],
        )
        if int(reply[0]) == 1:
            self.valid_until = started + self.duration
            return True
        self._lose(f"the lease is now {_s(reply[1]) or 'nobody'}'s (generation {_s(reply[2])})")
        return False

    def check(self) -> None:
        """Before a write: renew (one round trip) or raise :class:`LeaseLost`.
        A Redis error past the lease's end counts as lost, too."""
        if not self.held:
            raise LeaseLost(self.why or "the lease is not held")
        try:
            ok = self.renew()
        except redis.RedisError:
            if time.monotonic() > self.valid_until:
                self._lose("could not renew the lease before it ran out")
                raise LeaseLost(self.why) from None
            raise
        if not ok:
            raise LeaseLost(self.why)

    def still_valid(self) -> None:
        """No round trip: raise :class:`LeaseLost` if the lease ran out by this
        host's clock since the last renewal (a pause, a long stall)."""
        if not self.held or time.monotonic() > self.valid_until:
            if self.held:
                self._lose("the lease ran out since its last renewal (paused?)")
            raise LeaseLost(self.why or "the lease is not held")

    def release(self) -> None:
        self.stop_keeper()
        try:
            self._release(keys=[self.key, self.standbys], args=[self.identity, self.generation])
        except redis.RedisError:
            pass
        self.generation = 0

    def leave_standby(self) -> None:
        """A standby that stops waiting takes its name off the list."""
        try:
            self.redis.hdel(self.standbys, self.identity)
        except redis.RedisError:
            pass

    def guarded(self) -> GuardedWrites:
        """Writes run in one script only while the lease is ours."""
        return GuardedWrites(self)

    def _lose(self, why: str) -> None:
        if self.lost.is_set():
            return
        self.why = why
        self.lost.set()
        log.warning("lost the collector lease of site %s: %s", self.keys.site, why,
                    extra={"fields": {"generation": self.generation}})  # fmt: skip
        if self.on_lost is not None:
            self.on_lost(why)

    def stepped_down(self) -> None:
        """After a loss: no generation of ours any more."""
        self.stop_keeper()
        self.generation = 0

    # -- the keeper ---------------------------------------------------------------------
    def start_keeper(self) -> None:
        """Renew every ``duration / 3`` in a thread until stopped or lost."""
        self.stop_keeper()
        self._keeper_stop = threading.Event()
        stop = self._keeper_stop
        self._keeper = threading.Thread(target=self._keep, args=(stop,), name="lease", daemon=True)
        self._keeper.start()

    def stop_keeper(self) -> None:
        self._keeper_stop.set()
        keeper, self._keeper = self._keeper, None
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join(5)

    def _keep(self, stop: threading.Event) -> None:
        while not stop.wait(self.duration / 3):
            if not self.held:
                return
            try:
                if not self.renew():
                    return
            except redis.RedisError as exc:
                if time.monotonic() > self.valid_until:
                    self._lose(f"could not renew the lease before it ran out ({exc})")
                    return
                log.warning("lease renewal failed (%s): trying again", exc)


class GuardedWrites:
    """A few writes to the site's keys, run only while the lease is ours
    (a pipeline's subset: ``hset``, ``hincrby``, ``hdel``, ``execute_command``)."""

    def __init__(self, lease: Lease):
        self.lease = lease
        self.args: list[Any] = []

    def _add(self, *command: Any) -> GuardedWrites:
        self.args += [len(command), *command]
        return self

    def hset(self, key: str, field: str | None = None, value: Any = None,
             mapping: dict[str, Any] | None = None) -> GuardedWrites:  # fmt: skip
        pairs: list[Any] = [] if field is None else [field, value]
        for k, v in (mapping or {}).items():
            pairs += [k, v]
        return self._add("HSET", key, *pairs) if pairs else self

    def hincrby(self, key: str, field: str, amount: int = 1) -> GuardedWrites:
        return self._add("HINCRBY", key, field, amount)

    def hdel(self, key: str, *fields: str) -> GuardedWrites:
        return self._add("HDEL", key, *fields) if fields else self

    def execute_command(self, *command: Any) -> GuardedWrites:
        return self._add(*command)

    def execute(self) -> None:
        """Run the writes; raise :class:`LeaseLost` (nothing written) if the
        lease is not ours."""
        lease = self.lease
        if not lease.held:
            raise LeaseLost(lease.why or "the lease is not held")
        if not self.args:
            return
        args = [lease.identity, lease.generation, *self.args]
        if int(lease._guarded(keys=[lease.key], args=args)):
            return
        # ran out (a long stall): taken back if nobody took it since, else lost
        if lease.renew() and int(lease._guarded(keys=[lease.key], args=args)):
            return
        lease._lose("another collector holds the lease")
        raise LeaseLost(lease.why)


def describe(r: redis.Redis, keys: SiteKeys) -> dict[str, Any]:
    """The lease as ``jobtap status`` shows it: holder, generation, expiry,
    standbys (those seen lately)."""
    pipe = r.pipeline(transaction=False)
    pipe.hgetall(keys.lease)
    pipe.pttl(keys.lease)
    pipe.hgetall(keys.standbys)
    pipe.hget(keys.meta, meta.LEASE_GENERATION)
    held, pttl, standbys, counter = pipe.execute()
    now_ms = int(time.time() * 1000)  # (the operator's user may not run TIME)
    info: dict[str, Any] = {"holder": None, "generation": int(counter or 0), "standbys": []}
    if held:
        h = {_s(k): _s(v) for k, v in held.items()}
        info.update(
            holder=h.get("holder"),
            generation=int(h.get("generation") or 0),
            acquired_at=h.get("acquired_at"),
            renewed_at=h.get("renewed_at"),
            duration_s=int(h.get("duration_ms") or 0) / 1000,
            expires_in_s=round(max(0, pttl) / 1000, 3),
            previous=h.get("previous") or None,
        )
    duration = float(info.get("duration_s") or MAX_LEASE)
    for name, value in sorted(standbys.items()):
        try:
            entry = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        age = (now_ms - int(entry.get("seen") or 0)) / 1000
        if age <= 2 * duration + 5:
            info["standbys"].append(
                {"holder": _s(name), "since": entry.get("since"), "seen_s_ago": round(age, 1)}
            )
    return info


def _s(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value
