"""Reading the cache of one site: locating a job's owner, reading hashes
(pipelined), listing a user's or the site's jobs, the nodes and the queues.

Used by :class:`jobtap.Client` in the caller's thread and by the dispatcher thread
for snapshots and resyncs.  Raises redis-py errors; callers translate them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import redis

from .connection import AnyRedis, Site
from .events import split_event_id
from .packing import NATIVE_FIELDS, native_read
from .records import Job, Node, Queue, natural_key
from .replies import text
from .schema import JOB, NODE, QUEUE
from .schema import from_hash as decode_hash

log = logging.getLogger("jobtap.sdk")

PIPELINE_BATCH = 1000


class Ref(NamedTuple):
    """One object of one site; ``user`` is the job's owner (``None`` for nodes and queues)."""

    site: str
    kind: str
    oid: str
    user: str | None = None


def key_of(site: Site, ref: Ref) -> str:
    if ref.kind == JOB:
        if ref.user is None:
            raise ValueError(f"job {ref.oid}: its key needs its owner")
        return site.keys.job(ref.user, ref.oid)
    if ref.kind == NODE:
        return site.keys.node(ref.oid)
    return site.keys.queue(ref.oid)


class Cache:
    """Cache reads of one site."""

    def __init__(self, site: Site):
        self.site = site
        self.keys = site.keys

    @property
    def r(self) -> AnyRedis:
        """The site's data client (made at first use)."""
        return self.site.redis

    # -- owners -----------------------------------------------------------------------
    def owner(self, job_id: str) -> str | None:
        """The job's user from the owner index; ``None`` if unknown or not readable."""
        try:
            user = self.r.hget(self.keys.owner, job_id)
        except redis.exceptions.NoPermissionError:
            return None
        return text(user) if user is not None else None

    def owners(self) -> dict[str, str]:
        """Every job id -> user of the site (needs read access to the owner index)."""
        return {text(k): text(v) for k, v in self.r.hgetall(self.keys.owner).items()}

    def locate(self, job_id: str, hints: Sequence[str] = ()) -> str | None:
        """The job's user: the first of ``hints`` (the client's own user) whose key
        exists, else the owner index; ``None`` when the job is not in the cache.

        Hints first: an ordinary user may not read the owner index, and asking
        anyway would cost a refused round trip (and an ACL LOG entry) every time."""
        return self.locate_many([job_id], hints)[job_id]

    def locate_many(
        self, job_ids: Sequence[str], hints: Sequence[str] = (), *, index: bool = True
    ) -> dict[str, str | None]:
        """:meth:`locate` for many jobs in two round trips at most: every hint's
        key of every job in one pipeline, then one HMGET of the owner index for
        the jobs left (unless ``index`` is false)."""
        found: dict[str, str | None] = dict.fromkeys(job_ids)
        pairs = [(jid, hint) for jid in found for hint in hints if hint]
        if pairs:
            pipe = self.r.pipeline(transaction=False)
            for jid, hint in pairs:
                pipe.exists(self.keys.job(hint, jid))
            for (jid, hint), exists in zip(pairs, pipe.execute(), strict=True):
                if exists and found[jid] is None:
                    found[jid] = hint
        rest = [jid for jid, user in found.items() if user is None]
        if rest and index:
            try:
                users = self.r.hmget(self.keys.owner, rest)
            except redis.exceptions.NoPermissionError:
                users = []
            for jid, user in zip(rest, users):
                found[jid] = text(user) if user is not None else None
        return found

    # -- hashes -----------------------------------------------------------------------------
    def read(self, refs: Sequence[Ref], *, native: bool = True) -> list[dict[str, Any] | None]:
        """Decoded hashes of ``refs`` (``None`` for a missing key), pipelined;
        ``native=False``: without their native records (``from_hash``)."""
        out: list[dict[str, Any] | None] = []
        for start in range(0, len(refs), PIPELINE_BATCH):
            pipe = self.r.pipeline(transaction=False)
            for ref in refs[start : start + PIPELINE_BATCH]:
                pipe.hgetall(key_of(self.site, ref))
            out.extend(decode_hash(raw, native=native) if raw else None for raw in pipe.execute())
        return out

    def job(self, job_id: str, user: str | None = None, hints: Sequence[str] = ()) -> Job | None:
        owner = user or self.locate(job_id, hints)
        if owner is None:
            return None
        raw = self.r.hgetall(self.keys.job(owner, job_id))
        return Job.from_hash(raw)

    def natives(
        self, refs: Sequence[Ref], *, damaged_as_none: bool = False
    ) -> list[dict[str, Any] | None]:
        """The ``native`` field of each of ``refs``' hashes, decoded (``None`` for
        a missing key or field), pipelined: the scheduler's own record, which
        events of format 2 leave out (see :mod:`jobtap.events`).  A packed record
        that cannot be read (a hash edited by hand) raises ``ValueError``, or,
        with ``damaged_as_none`` (a stream joining records into its events: one
        such hash must not stop it), is ``None`` with a warning naming it."""
        out: list[dict[str, Any] | None] = []
        for start in range(0, len(refs), PIPELINE_BATCH):
            batch = refs[start : start + PIPELINE_BATCH]
            pipe = self.r.pipeline(transaction=False)
            for ref in batch:
                pipe.hmget(key_of(self.site, ref), NATIVE_FIELDS)
            for ref, values in zip(batch, pipe.execute(), strict=True):
                try:
                    out.append(native_read(values))
                except ValueError as exc:
                    if not damaged_as_none:
                        raise
                    log.warning("jobtap: %s: %s; given without it", key_of(self.site, ref), exc)
                    out.append(None)
        return out

    def live_job_ids(self, user: str) -> list[str]:
        return sorted(
            (text(x) for x in self.r.smembers(self.keys.user_jobs(user))), key=natural_key
        )

    def jobs(
        self,
        user: str | None = None,
        states: Iterable[str] | None = None,
        finished: bool = False,
    ) -> list[Job]:
        """Jobs of ``user`` (every user when ``None``), optionally only in
        ``states``; finished jobs (kept for the retention period) only when
        ``finished``."""
        if user is not None:
            refs = [Ref(self.site.name, JOB, jid, user) for jid in self.live_job_ids(user)]
            if finished:
                try:
                    ended = [jid for jid, u in self.owners().items() if u == user]
                except redis.exceptions.NoPermissionError:
                    ended = self.finished_job_ids(user)  # a user's ACL: own stream only
                live = {r.oid for r in refs}
                refs += [Ref(self.site.name, JOB, jid, user) for jid in ended if jid not in live]
        else:
            refs = [Ref(self.site.name, JOB, jid, u) for jid, u in self.owners().items()]
        wanted = set(states) if states is not None else None
        jobs = []
        for rec in self.read(refs):
            if rec is None:
                continue
            job = Job.from_record(rec)
            if job.final and not finished:
                continue
            if wanted is not None and job.state not in wanted:
                continue
            jobs.append(job)
        jobs.sort(key=lambda j: (natural_key(j.id), j.user or ""))
        return jobs

    def finished_job_ids(self, user: str) -> list[str]:
        """The user's finished jobs whose hash is kept (for a user who may not read
        the owner index): the user's finished set, and the finals still in the
        user's stream, which hold those that ended before the workers kept the set
        (an upgrade: the stream is bounded, see workers/apply.lua, so this part can
        go once every site's older finished jobs are past the retention)."""
        out: dict[str, None] = dict.fromkeys(self.ended_since(user, 0))
        prefix = f"{self.site.name}:"
        end = "+"
        while True:
            page = self.r.xrevrange(self.keys.user_events(user), max=end, count=1000) or []
            for _, fields in page:
                if fields and fields.get(b"type") == b"final":
                    job_prefix, _, _ = split_event_id(text(fields[b"id"]))
                    out.setdefault(job_prefix[len(prefix) :], None)
            if len(page) < 1000:
                return list(out)
            end = "(" + text(page[-1][0])

    def ended_since(self, user: str, ms: int) -> list[str]:
        """The user's finished jobs that ended at or after ``ms`` (Redis' clock, as
        a stream id's first part), whose hash may still be kept."""
        key = self.keys.user_finished(user)
        try:
            ids: list[bytes] = self.r.zrange(key, ms, "+inf", byscore=True) or []  # type: ignore[assignment]
            return [text(x) for x in ids]
        except redis.exceptions.NoPermissionError:
            log.warning(
                "jobtap: the Redis user may not run ZRANGE: finished jobs are known from the "
                "user's stream alone, which may have let older ones go (run jobtap acl sync "
                "to grant it)"
            )
            return []

    # -- nodes and queues -------------------------------------------------------------------
    def names(self, kind: str) -> list[str]:
        index = self.keys.node_index if kind == NODE else self.keys.queue_index
        return sorted((text(x) for x in self.r.smembers(index)), key=natural_key)

    def nodes(self, states: Iterable[str] | None = None) -> list[Node]:
        refs = [Ref(self.site.name, NODE, n) for n in self.names(NODE)]
        wanted = set(states) if states is not None else None
        out = [Node.from_record(rec) for rec in self.read(refs) if rec is not None]
        return [n for n in out if wanted is None or n.state in wanted]

    def queues(self) -> list[Queue]:
        refs = [Ref(self.site.name, QUEUE, q) for q in self.names(QUEUE)]
        return [Queue.from_record(rec) for rec in self.read(refs) if rec is not None]

    def node(self, name: str) -> Node | None:
        return Node.from_hash(self.r.hgetall(self.keys.node(name)))

    def queue(self, name: str) -> Queue | None:
        return Queue.from_hash(self.r.hgetall(self.keys.queue(name)))
