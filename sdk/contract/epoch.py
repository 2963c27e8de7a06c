"""The site epoch: which history of the site's Redis data events belong to.

Event ids (``S:EPOCH:JOBID:VERSION``, see :mod:`jobtap.events`) are only unique
if versions never repeat, and versions live in Redis: when Redis loses data (a
crash with the last second of writes not yet on disk, a restart without
persistence, a failover to a replica that lagged, a restore from an older
RDB/AOF), stored versions go back and the next writes would reuse ids that were
already handed out with other content.  So every write checks, atomically with
the write itself, that Redis' state is the continuation of what was written
before, and begins a new epoch if it is not (``epoch.lua``):

- ``empty``: ``meta`` has no epoch (Redis came back empty);
- ``restart``: the server's ``run_id`` is not the one the epoch began on (any
  restart or failover: the server cannot prove that it lost nothing);
- ``behind``: ``meta`` counts fewer cycles than a cycle seen outside Redis (a
  chunk from a separate queue Redis, or the collector's own last cycle, kept on
  its host): Redis came back from an older snapshot.

Whoever writes first after the loss (a worker applying a chunk, or the collector
starting a cycle) begins the epoch; the others find it.  Versions count again
from 1 in the new epoch, so ids never collide with the old ones.

The collector (``collector/service.py``, through the lease's guarded check) and
the workers (``workers/apply.py``, in every write) both run ``ensure_epoch``
from here; this module imports neither side, nor rq.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import redis

from ..events import EPOCH_LENGTH
from . import meta
from .keys import SiteKeys

# ensure_epoch(), with the meta field names (META) in front of it
EPOCH_LUA = meta.lua_prelude() + Path(__file__).with_name("epoch.lua").read_text()
_STANDALONE = EPOCH_LUA + (
    "\nreturn ensure_epoch(KEYS[1], tonumber(ARGV[1]), ARGV[2] == '1', ARGV[3], ARGV[4])\n"
)

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
_TIME_CHARS = 8  # milliseconds in base 36: 8 characters last until 2059
CAUSES = {
    "empty": "Redis had no epoch for the site (it came back empty, or is new)",
    "restart": "Redis restarted or failed over (its run_id changed)",
    "behind": "Redis went back to an older snapshot (fewer cycles than already seen)",
}


def new_epoch_name(now: float | None = None) -> str:
    """A fresh epoch name: the time in milliseconds (base 36, so names sort by
    when they were made) and four random characters (two writers making one in
    the same millisecond still differ)."""
    ms = int((time.time() if now is None else now) * 1000)
    stamp = ""
    while ms:
        ms, digit = divmod(ms, 36)
        stamp = _DIGITS[digit] + stamp
    tail = "".join(secrets.choice(_DIGITS) for _ in range(EPOCH_LENGTH - _TIME_CHARS))
    return stamp.rjust(_TIME_CHARS, "0")[-_TIME_CHARS:] + tail


def epoch_args(seen: int, *, owner: bool = False) -> list[str | int]:
    """The ARGV of ``ensure_epoch`` (apply.lua passes the same four)."""
    at = datetime.now(UTC).isoformat(timespec="milliseconds")
    return [seen, "1" if owner else "0", new_epoch_name(), at]


@dataclass(frozen=True, slots=True)
class EpochCheck:
    epoch: str
    cause: str  # "" if the epoch was already in force, else one of CAUSES
    cycle: int  # meta's cycle counter after the check (0: none)

    @property
    def began(self) -> bool:
        return bool(self.cause)


class EpochGuard:
    """Runs ``ensure_epoch`` on its own (the collector before each cycle, a
    worker before its first chunk of a site)."""

    def __init__(self, r: redis.Redis):
        self.script = r.register_script(_STANDALONE)

    def ensure(self, keys: SiteKeys, seen: int = 0, *, owner: bool = False) -> EpochCheck:
        epoch, cause, cycle = self.script(keys=[keys.meta], args=epoch_args(seen, owner=owner))
        return EpochCheck(_s(epoch), _s(cause), int(cycle))


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
