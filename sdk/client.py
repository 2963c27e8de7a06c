"""The client: read the cache instead of qstat, subscribe with callbacks, wait for a
job, and consume the deduplicated event stream.

    import jobtap

    with jobtap.Client() as client:          # $JOBTAP_REDIS, $JOBTAP_SITE, credential file
        job = client.job("12.pbs")        # Job | None, from the cache
        for j in client.jobs(user="alice", state="running"):
            print(j.id, j.queue, j.start_time)

        def on_change(change: jobtap.Change) -> None:
            print(change.type, change.object_id, change.record.state)

        with client.subscribe(on_change, jobs=["12.pbs"]):   # current record, then changes
            done = client.wait("12.pbs", timeout=3600)       # -> Job in a terminal state

        for change in client.stream(group="kafka"):          # at-least-once, deduplicated
            producer.send(change.json)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from .cache import Cache, Ref
from .connection import Server, Site
from .dispatcher import MAX_LAG, QUEUE_LIMIT, Dispatcher
from .errors import (
    ConfigError,
    JobNotFound,
    JobtapError,
    PermissionDenied,
    StateNotReached,
    WaitTimeout,
)
from .events import REMOVED
from .keys import SiteKeys
from .records import Change, Job, Node, Queue, object_prefix
from .redis_errors import translated
from .schema import JOB, KINDS, TERMINAL, job_states
from .stream import EventStream
from .subscribe import Subscription
from .target import Target
from .urls import SiteConfig, resolve


class Client:
    """A connection to the jobtap cache of one site, or of several.

    Args:
        redis_url: ``redis://[user:password@]host:port/db``; default ``$JOBTAP_REDIS``,
            then the credential file's ``url``, then ``redis://127.0.0.1:6379/0``.
        site: the site name; default ``$JOBTAP_SITE``, the credential file's, ``default``.
        username, password: the Redis (ACL) user; default from the credential file.
        credentials: path of a credential file (see :mod:`jobtap.credentials`); by
            default ``~/.config/jobtap/credentials`` is read if it exists and neither
            ``username`` nor ``password`` is given.  It must have mode 0600.
        sites: several sites in one client: ``{"hpc1": "redis://a/0", "hpc2":
            {"url": ..., "username": ..., "password": ...}}`` (a ``None`` value uses
            ``redis_url``).  ``site`` then picks the default one (else the first).
        timeout: seconds to wait for Redis to confirm a subscription.
        backoff: ``(first, cap)`` seconds between reconnect attempts.
        max_lag: seconds a subscription's callback may fall behind before it
            *catches up by state* instead of being given every missed event: it
            then gets one change per object that moved (finals first), the
            current record with a summary of what it stands for
            (:attr:`Change.missed`).  See :mod:`jobtap.subscribe`.  ``None``: no
            bound, every missed event is replayed (callbacks that must see each
            event: ``stream()`` is the way for those).
        queue_limit: events a subscription may have waiting for its callback;
            past it, it catches up by state too (this bounds the memory a slow
            callback can make the client hold).

    Nothing connects until the first call.  A client is safe to share between
    threads; its callbacks all run on one background thread it starts on the
    first :meth:`subscribe`.  Close it (or use ``with``) to stop that thread.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        site: str | None = None,
        username: str | None = None,
        password: str | None = None,
        credentials: str | os.PathLike[str] | None = None,
        sites: Mapping[str, Any] | None = None,
        timeout: float = 10.0,
        backoff: tuple[float, float] = (0.05, 5.0),
        max_lag: float | None = MAX_LAG,
        queue_limit: int = QUEUE_LIMIT,
    ):
        configs, default = resolve(
            redis_url,
            site=site,
            username=username,
            password=password,
            credentials=credentials,
            sites=sites,
        )
        self.timeout = timeout
        self.backoff = backoff
        self.max_lag = max_lag
        self.queue_limit = queue_limit
        self.site: str = default
        """The default site."""
        by_name = {c.site: c for c in configs}
        self.user: str | None = by_name[default].username
        """The Redis user name, taken to be the cluster user this client acts for."""
        servers: dict[tuple[str, str | None, str | None], Server] = {}
        self._sites: dict[str, Site] = {}
        for cfg in [by_name[default]] + [c for c in configs if c.site != default]:
            if cfg.server not in servers:
                servers[cfg.server] = Server(cfg, timeout=timeout)
            self._sites[cfg.site] = Site(cfg, SiteKeys(cfg.site), servers[cfg.server])
        self._caches = {name: Cache(s) for name, s in self._sites.items()}
        self._dispatcher: Dispatcher | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- sites --------------------------------------------------------------------------------
    @property
    def sites(self) -> list[str]:
        """The client's site names, the default one first."""
        return list(self._sites)

    def _site(self, site: str | None) -> Site:
        name = site or self.site
        try:
            return self._sites[name]
        except KeyError:
            raise ConfigError(f"site {name!r} is not one of {self.sites}") from None

    def _pick(self, site: str | None) -> list[Site]:
        return [self._site(site)] if site else list(self._sites.values())

    def _config(self, site: str | None = None) -> SiteConfig:
        return self._site(site).config

    # -- cache reads ---------------------------------------------------------------------------
    def job(self, job_id: str, *, user: str | None = None, site: str | None = None) -> Job | None:
        """The cached record of a job, or ``None`` if the cache does not have it.

        The owner is looked up in the site's owner index; pass ``user`` when you
        know it (a user whose ACL does not allow reading the index must).  Without
        ``site``, every site of the client is tried, the default one first.
        """
        hints = [self.user] if self.user else []
        for s in self._pick(site):
            with translated(s.url):
                job = self._caches[s.name].job(job_id, user=user, hints=hints)
            if job is not None:
                return job
        return None

    def native(
        self, job_id: str, *, user: str | None = None, site: str | None = None
    ) -> dict[str, Any] | None:
        """The scheduler's own record of a job (``Job.native``), read from its hash;
        ``None`` if the cache does not have the job.  A change's record does not
        carry it (see :mod:`jobtap.records`): this is the read that does, one
        field, located as :meth:`job` locates the job."""
        hints = [self.user] if self.user else []
        for s in self._pick(site):
            with translated(s.url):
                cache = self._caches[s.name]
                owner = user or cache.locate(job_id, hints)
                if owner is not None:
                    (native,) = cache.natives([Ref(s.name, JOB, job_id, owner)])
                    if native is not None:
                        return native
        return None

    def jobs_by_id(
        self, job_ids: Iterable[str], *, user: str | None = None, site: str | None = None
    ) -> dict[str, Job | None]:
        """The cached records of many jobs in one pipelined read (``None`` for a job
        the cache does not have): what a tool that tracks its own jobs reads on
        each status round instead of asking the scheduler.  ``user`` is the jobs'
        owner (default: the client's user; without either, the owner index is
        asked first)."""
        s = self._site(site)
        ids = list(dict.fromkeys(job_ids))
        who = user or self.user
        with translated(s.url):
            cache = self._caches[s.name]
            if who:
                owners: dict[str, str | None] = dict.fromkeys(ids, who)
            else:
                owners = cache.locate_many(ids)
            found = [(jid, owner) for jid, owner in owners.items() if owner]
            raws = cache.read([Ref(s.name, JOB, jid, owner) for jid, owner in found])
        out: dict[str, Job | None] = dict.fromkeys(ids)
        for (jid, _), raw in zip(found, raws, strict=True):
            out[jid] = Job.from_record(raw) if raw else None
        return out

    def jobs(
        self,
        user: str | None = None,
        state: str | Iterable[str] | None = None,
        *,
        finished: bool | None = None,
        site: str | None = None,
    ) -> list[Job]:
        """Cached jobs, like ``qstat``: of ``user`` (every user when ``None``, which
        needs read access to the site's owner index), in ``state`` (a state or
        several).  Finished jobs, kept for the retention period, are included when
        ``finished=True`` or when ``state`` asks for a terminal state (a user who may
        not read the owner index finds them through the final events still in their
        own stream).  Sorted by id."""
        states = sorted(job_states(state)) if state else None
        if finished is None:
            finished = any(s in TERMINAL for s in states or ())
        out: list[Job] = []
        for s in self._pick(site):
            try:
                with translated(s.url):
                    out += self._caches[s.name].jobs(user, states, finished)
            except PermissionDenied as exc:
                if user is not None:
                    raise
                raise PermissionDenied(
                    f"{exc}; listing every job of site {s.name} needs read access to "
                    f"{s.keys.owner}: pass user=..."
                ) from exc
        return out

    def nodes(
        self, state: str | Iterable[str] | None = None, *, site: str | None = None
    ) -> list[Node]:
        """Cached node records (optionally only in ``state``), sorted by name."""
        states = [state] if isinstance(state, str) else state
        out: list[Node] = []
        for s in self._pick(site):
            with translated(s.url):
                out += self._caches[s.name].nodes(states)
        return out

    def node(self, name: str, *, site: str | None = None) -> Node | None:
        """One node's cached record, or ``None``."""
        s = self._site(site)
        with translated(s.url):
            return self._caches[s.name].node(name)

    def queues(self, *, site: str | None = None) -> list[Queue]:
        """Cached queue records, sorted by name."""
        out: list[Queue] = []
        for s in self._pick(site):
            with translated(s.url):
                out += self._caches[s.name].queues()
        return out

    def queue(self, name: str, *, site: str | None = None) -> Queue | None:
        """One queue's cached record, or ``None``."""
        s = self._site(site)
        with translated(s.url):
            return self._caches[s.name].queue(name)

    # -- subscriptions -------------------------------------------------------------------------
    def _get_dispatcher(self) -> Dispatcher:
        with self._lock:
            if self._closed:
                raise JobtapError("the client is closed")
            if self._dispatcher is None:
                self._dispatcher = Dispatcher(
                    self._sites,
                    backoff=self.backoff,
                    max_lag=self.max_lag,
                    queue_limit=self.queue_limit,
                )
            return self._dispatcher

    def subscribe(
        self,
        callback: Callable[[Change], Any],
        *,
        jobs: str | Iterable[str] | None = None,
        user: str | None = None,
        all_jobs: bool = False,
        attrs: Iterable[str] | None = None,
        kinds: Iterable[str] = ("job",),
        initial: bool = True,
        site: str | None = None,
    ) -> Subscription:
        """Call ``callback(change)`` for the current record and every later change.

        What to watch (for ``kinds`` including ``"job"``):

        - ``jobs=["12.pbs", ...]``: those jobs.  The subscription ends by itself
          after the last one's ``final`` change.  A job not collected yet is waited
          for if its user is known (``user=``, or the client's user name).
        - ``user="alice"``: every job of that user, present and future.
        - ``all_jobs=True``: every job of the site (operators: reads the
          ``jobtap:{S}:all`` channel).
        - none of these: the jobs of the client's own user (:attr:`user`).

        ``kinds`` may add ``"node"`` and ``"queue"`` (every node / queue of the site).
        ``attrs`` limits ``update`` changes to those touching these attributes
        (``"native"`` covers ``native.*``); new, state, final, removed, initial and
        resync changes always go out.  With ``initial=False`` the current records
        are read (so that nothing is delivered twice) but not delivered.

        Guarantees: per object, changes arrive in version order, each once, with no
        gap; after a disconnect the client reconnects, re-reads and delivers what
        it missed (from the streams, else a ``resync`` change from the record); a
        job's ``final`` change is never missed.  Callbacks run on the client's
        background thread, one at a time: keep them short (a slow one makes
        Redis cut the connection off; that is recovered from, with a warning).  An
        exception in a callback is logged and does not stop anything.

        Returns once Redis confirmed the subscription and the initial records were
        delivered (when called from a callback: at once).
        """
        kind_set = frozenset(kinds)
        if not kind_set or not kind_set <= set(KINDS):
            raise ConfigError(f"kinds must be some of {KINDS}, not {tuple(kinds)}")
        if isinstance(jobs, str):
            jobs = [jobs]
        job_ids = list(jobs) if jobs is not None else []
        if JOB not in kind_set and (job_ids or user or all_jobs):
            raise ConfigError("jobs=, user= and all_jobs= need 'job' in kinds")
        if all_jobs and (job_ids or user):
            raise ConfigError("all_jobs=True watches every job: do not also give jobs= or user=")
        dispatcher = self._get_dispatcher()
        sites = self._pick(site)
        targets = {s.name: Target(s, kind_set) for s in sites}
        if JOB in kind_set:
            if job_ids:
                for jid, (s, owner) in self._locate(job_ids, user, sites).items():
                    ref = Ref(s.name, JOB, jid, owner)
                    targets[s.name].jobs[object_prefix(s.name, JOB, jid)] = ref
            elif all_jobs:
                for t in targets.values():
                    t.all_jobs = True
            else:
                who = user or self.user
                if not who:
                    raise ConfigError(
                        "say what to watch: jobs=, user= or all_jobs=True "
                        "(no user name is known from the credentials)"
                    )
                for t in targets.values():
                    t.users = frozenset({who})
        chosen = [t for t in targets.values() if t.channels()]
        if not job_ids:  # (finding the jobs has just reached their sites: Redis is there)
            for t in chosen:
                with translated(t.site.url):
                    t.site.redis.ping()
        return dispatcher.subscribe(
            callback, chosen, attrs=attrs, initial=initial, timeout=self.timeout
        )

    def _locate(
        self, job_ids: list[str], user: str | None, sites: list[Site]
    ) -> dict[str, tuple[Site, str]]:
        """Each job's site and owner: ``user``'s key, else the client's own
        user's, else the owner index, site by site, a few round trips for all
        the jobs (not one or two per job: a subscription to a thousand jobs is
        set up as fast as to one)."""
        placed: dict[str, tuple[Site, str]] = {}
        hints = [user] if user else ([self.user] if self.user else [])
        for s in sites:
            todo = [jid for jid in dict.fromkeys(job_ids) if jid not in placed]
            if not todo:
                break
            with translated(s.url):
                owners = self._caches[s.name].locate_many(todo, hints, index=not user)
            placed.update((jid, (s, owner)) for jid, owner in owners.items() if owner)
        hint = user or self.user
        for jid in job_ids:
            if jid in placed:
                continue
            if not hint:
                where = ", ".join(s.name for s in sites)
                raise JobNotFound(
                    f"job {jid} is not in the cache of site {where}; pass user= to wait for it"
                )
            placed[jid] = (sites[0], hint)  # not collected yet: wait for it on its user's channel
        return {jid: placed[jid] for jid in job_ids}

    def wait(
        self,
        job_id: str,
        states: str | Iterable[str] = TERMINAL,
        timeout: float | None = None,
        *,
        user: str | None = None,
        site: str | None = None,
    ) -> Job:
        """Block until the job is in one of ``states`` (default: completed, failed or
        cancelled) and return its record; at once if it already is.

        Raises :class:`~jobtap.errors.WaitTimeout` (a ``TimeoutError``) after
        ``timeout`` seconds, :class:`~jobtap.errors.StateNotReached` if the job finished
        in another state (or left the cache), :class:`~jobtap.errors.JobNotFound` if the
        cache does not know the job and its user is unknown.  Built on
        :meth:`subscribe`: no polling.
        """
        wanted = job_states(states)
        if self._dispatcher is not None and self._dispatcher.in_thread:
            raise JobtapError("wait() would block the callback thread: call it elsewhere")
        started = time.monotonic()
        done = threading.Event()
        seen: list[Job] = []  # the last record seen
        reached: list[Job] = []
        ended: list[Change] = []  # its final or removed change, in another state

        def on_change(change: Change) -> None:
            job = job_of(change)
            seen[:] = [job]
            if job.state in wanted:
                reached.append(job)
                done.set()
            elif change.final or change.type == REMOVED:
                ended.append(change)
                done.set()

        sub = self.subscribe(on_change, jobs=[job_id], user=user, attrs=("state",), site=site)
        sub.add_done_callback(done.set)  # also wake up if the client is closed meanwhile
        try:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
            if not done.wait(left):
                raise wait_timeout(job_id, wanted, timeout, seen[-1] if seen else None)
        finally:
            sub.close()
        if reached:
            return reached[0]
        if ended:
            raise not_reached(job_id, ended[0], wanted)
        raise stopped_waiting(job_id, sub.error)

    # -- the stream -------------------------------------------------------------------------------
    def stream(
        self,
        group: str | None = None,
        consumer: str | None = None,
        since: str | None = None,
        user: str | None = None,
        *,
        site: str | None = None,
        count: int = 1000,
        block: float = 2.0,
        claim_idle: float = 60.0,
        idle_timeout: float | None = None,
        dedupe: int = 200_000,
        native: bool = False,
    ) -> EventStream:
        """Iterate over the site's event stream (or ``user``'s), deduplicated.

        With ``group``, a consumer group (created at ``since``, default: new events
        only) shares the events among its consumers with acks and crash recovery;
        otherwise the stream is read from ``since`` (a stream id, ``"0"`` for all it
        holds; default: new events only).  Delivery is at least once; see
        :mod:`jobtap.stream` for the details.  ``idle_timeout`` ends the iteration after
        that many seconds without events.  ``native=True`` puts each object's native
        record, read from its hash once per batch, into the event's ``record.native``
        (``None`` where the hash has expired; see :mod:`jobtap.stream`).
        """
        return EventStream(
            self._site(site),
            group=group,
            consumer=consumer,
            since=since,
            user=user,
            count=count,
            block=block,
            claim_idle=claim_idle,
            idle_timeout=idle_timeout,
            dedupe=dedupe,
            backoff=self.backoff,
            native=native,
        )

    # -- lifetime ----------------------------------------------------------------------------------
    def close(self) -> None:
        """End every subscription, stop the background thread, close connections."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            dispatcher = self._dispatcher
        if dispatcher is not None:
            dispatcher.close()
        for server in {id(s.server): s.server for s in self._sites.values()}.values():
            server.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<jobtap Client sites={self.sites} user={self.user!r}>"


def _states(states: frozenset[str]) -> str:
    return "/".join(sorted(states))


def job_of(change: Change) -> Job:
    """The record of a change delivered to wait(), whose subscription is to one job."""
    return cast(Job, change.record)


def not_reached(job_id: str, ended: Change, wanted: frozenset[str]) -> StateNotReached:
    """The error for a job that ended (``ended``: its final or removed change)
    in a state other than ``wanted``."""
    job = job_of(ended)
    if ended.type == REMOVED:
        return StateNotReached(f"job {job_id} left the cache (purged after retention?)", job)
    reason = f", reason: {job.reason}" if job.reason else ""
    return StateNotReached(
        f"job {job_id} finished as {job.state}{reason}, not {_states(wanted)}", job
    )


def stopped_waiting(job_id: str, error: JobtapError | None) -> JobtapError:
    """The error of a wait whose subscription ended before the job did: why it
    failed, or the client was closed."""
    return error or JobtapError(f"stopped waiting for job {job_id}: the client was closed")


def wait_timeout(
    job_id: str, wanted: frozenset[str], timeout: float | None, last: Job | None
) -> WaitTimeout:
    state = last.state if last else "not collected yet"
    return WaitTimeout(
        f"job {job_id} did not reach {_states(wanted)} within {timeout:g} s (last state: {state})",
        last,
    )
