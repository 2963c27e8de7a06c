"""Redis key and channel names: the contract every reader and writer shares
(``jobtap.keys`` is this module under its public name).  A new key goes here.

All keys of a site carry the hash tag ``{site}`` so that a Redis Cluster keeps a
site on one shard and every multi-key step stays atomic.  User names are
percent-escaped (anything outside ``[A-Za-z0-9._-]``) so that ACL glob patterns
built from them match exactly one user and nothing else.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import unquote

from ..errors import BadName

__all__ = [
    "POKES_MAXLEN",
    "PREFIX",
    "BadName",
    "EVERY_KEY",
    "EVERY_STREAM",
    "SITE_IN_PATTERN",
    "SiteKeys",
    "bell_key",
    "check_site",
    "escape_user",
    "is_user_channel",
    "unescape_user",
]

PREFIX = "jobtap"
POKES_MAXLEN = 10_000  # entries kept in a site's poke stream (approximately)
# ACL glob patterns (jobtap.acl): every jobtap key; every stream of events
EVERY_KEY = f"{PREFIX}:*"
EVERY_STREAM = f"{PREFIX}:*:events"
# the site named in a key or a pattern of its keys
SITE_IN_PATTERN = re.compile(rf"{PREFIX}:\{{([A-Za-z0-9._-]+)\}}:")

_SAFE_USER = re.compile(r"[^A-Za-z0-9._-]")
_SITE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@lru_cache(maxsize=16384)  # a worker names each user's keys for every change of theirs
def escape_user(user: str) -> str:
    """Percent-encode every byte of ``user`` outside ``[A-Za-z0-9._-]``.

    The result never contains a glob character (``* ? [ ] \\``) nor ``:``, so
    ``jobtap:{S}:u:<escaped>:*`` matches that user's keys only.
    """
    if not user:
        raise BadName("empty user name")
    return _SAFE_USER.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), user)


def is_user_channel(name: str, user: str) -> bool:
    """Whether ``name`` is ``user``'s channel on some site."""
    return name.startswith(f"{PREFIX}:{{") and name.endswith(f":u:{escape_user(user)}")


def unescape_user(escaped: str) -> str:
    return unquote(escaped)


def check_site(site: str) -> str:
    if not _SITE_NAME.match(site or ""):
        raise BadName(f"site name {site!r} must be 1-64 characters of A-Z a-z 0-9 . _ -")
    return site


class SiteKeys:
    """Every key and channel name of one site.

    >>> k = SiteKeys("hpc1")
    >>> k.job("alice", "12.pbs")
    'jobtap:{hpc1}:u:alice:job:12.pbs'
    """

    def __init__(self, site: str):
        self.site = check_site(site)
        self.base = f"{PREFIX}:{{{site}}}"
        # Site-wide keys.
        self.owner = f"{self.base}:owner"  # hash job id -> user
        self.events = f"{self.base}:events"  # stream of every event
        self.meta = f"{self.base}:meta"  # collector health
        self.all_channel = f"{self.base}:all"
        self.nodes_channel = f"{self.base}:nodes"
        # The collector's health after every cycle (a small JSON object; jobtap top).
        self.health_channel = f"{self.base}:health"
        # Internal bookkeeping (not part of the reader contract).
        self.fingerprints = f"{self.base}:fingerprints"  # hash kind:id -> "fp state"
        # zset: each user's finished set (its key) -> when the oldest job in it
        # ended (ms): whose finished jobs' hashes have expired, for the workers to
        # drop them from the owner index, the fingerprints and the set
        self.oldest_finished = f"{self.base}:oldest-finished"
        # zset job id -> time its hash expires: written before oldest_finished, and
        # only drained now (a site's jobs that finished before the upgrade)
        self.expiry = f"{self.base}:expiry"
        self.node_index = f"{self.base}:nodes"  # set of node names
        self.queue_index = f"{self.base}:queues"  # set of queue names
        self.pokes = f"{self.base}:pokes"  # stream of "job X just changed" (follow mode)
        # The collector's lease (jobtap.contract.lease): a hash holder, generation...
        self.lease = f"{self.base}:collector"
        self.standbys = f"{self.base}:standbys"  # hash holder -> JSON (since, seen)

    # Per-user keys -------------------------------------------------------------
    def user_base(self, user: str) -> str:
        return f"{self.base}:u:{escape_user(user)}"

    def job(self, user: str, job_id: str) -> str:
        return f"{self.user_base(user)}:job:{job_id}"

    def user_jobs(self, user: str) -> str:
        return f"{self.user_base(user)}:jobs"

    def user_events(self, user: str) -> str:
        return f"{self.user_base(user)}:events"

    def user_finished(self, user: str) -> str:
        """Sorted set of the user's finished jobs whose hash is kept, scored by when
        they ended (Redis' clock in ms, as the streams' ids): how a user lists
        them without the owner index, and how a subscriber finds the jobs that
        ended while it was away, whatever the streams still hold."""
        return f"{self.user_base(user)}:finished"

    def user_channel(self, user: str) -> str:
        return self.user_base(user)

    def user_pattern(self, user: str) -> str:
        """ACL glob pattern of every key of ``user``."""
        return f"{self.user_base(user)}:*"

    # Nodes and queues ----------------------------------------------------------
    def node(self, name: str) -> str:
        return f"{self.base}:node:{name}"

    def queue(self, name: str) -> str:
        return f"{self.base}:queue:{name}"

    @property
    def node_pattern(self) -> str:
        """ACL glob pattern of every node's hash."""
        return self.node("*")

    @property
    def queue_pattern(self) -> str:
        """ACL glob pattern of every queue's hash."""
        return self.queue("*")

    # rq queues (plain names: rq keeps them under rq:queue:NAME) ---------------
    def rq_queue(self, priority: str) -> str:
        """``priority`` is ``state`` (new, state changes, finals) or ``update``."""
        return f"jobtap.{self.site}.{priority}"


def bell_key(queue_key: str) -> str:
    """The bell list of the rq queue at ``queue_key`` (jobtap.workers.queues)."""
    return f"{queue_key}:bell"
