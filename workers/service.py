"""``jobtap worker``: an rq worker serving the two priority queues of one site,
of several, or of every site that has queues.

With several sites the worker takes any site's ``state`` chunk before any
site's ``update`` chunk, and takes turns between the sites of a priority, so
that a flood at one site does not starve another.  Serving every site
(``sites=None``), it looks for the queues of new sites at each maintenance
pass, so a site added later is served without a restart.

It runs chunks in its own process (rq's SimpleWorker: no fork per chunk, the
Lua script and connections stay warm).  rq's own signal handling gives the
clean shutdown we want: the first SIGTERM/SIGINT lets the chunk in hand finish
(it is applied atomically or not at all), a second one stops at once.

Before it starts, and every ``maintenance`` seconds, the worker hands back
chunks that a dead worker on this host had taken (killed mid-batch): the chunk
goes back on its queue and, applied again, is a no-op for anything already
written.  Workers on other hosts are recovered by rq's own heartbeat expiry.

Redis going away (a restart, a failover) does not end the process.  A chunk in
hand waits for Redis and is finished (``apply.Applier.apply``); if rq's own
loop gives up on the lost connection, the worker starts a new rq worker with
backoff, and the chunk the old one held is handed back like a dead worker's.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import redis
from rq import Queue, SimpleWorker
from rq.exceptions import StopRequested
from rq.executions import Execution
from rq.job import Job, JobStatus
from tenacity import (
    RetryCallState,
    RetryError,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_never,
)
from tenacity.stop import stop_base
from tenacity.wait import wait_exponential, wait_random

from jobtap.connection import AnyRedis
from jobtap.contract.chunk import PRIORITIES
from jobtap.keys import SiteKeys

from . import apply
from .metrics import WorkerMetrics
from .queues import ChunkQueue

log = logging.getLogger("jobtap.workers")
HOST = socket.gethostname()
REDIS_AWAY = apply.REDIS_AWAY
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
STUCK_AFTER = 2.0  # seconds: a chunk taken and not started for this long was abandoned
# rq workers of this process that stopped (Redis went away under them): alive as
# a process, but they will never finish what they held.
_retired: set[str] = set()

# What rq's worker writes at INFO for every chunk (taken, completed, "Job OK", its
# result discarded: four lines, nearly all of a busy worker's log) and at every
# maintenance pass; written at DEBUG instead (`--log-level debug` shows them).
RQ_ROUTINE = frozenset({
    "Worker %s: %s: %s",
    "Worker %s: %s: %s (%s)",
    "Successfully completed %s job in %ss on worker %s",
    "Successfully completed job %s in %ss on worker %s",
    "Worker %s: job %s result discarded immediately",
    "Worker %s: job %s result is kept for %s seconds",
    "Worker %s: cleaning registries for queue: %s",
    "Worker %s: cleaning group registries",
})  # fmt: skip


def rq_routine_at_debug(record: logging.LogRecord) -> bool:
    """A filter of rq's worker logger: :data:`RQ_ROUTINE`'s lines at DEBUG."""
    if record.levelno == logging.INFO and isinstance(record.msg, str) and record.msg in RQ_ROUTINE:
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
    return True


def worker_name() -> str:
    return f"jobtap.{HOST}.{os.getpid()}.{uuid.uuid4().hex[:6]}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def worker_alive(conn: redis.Redis, name: str | None) -> bool:
    """Whether the rq worker called ``name`` can still finish what it holds."""
    if not name or name in _retired:
        return False
    parts = name.split(".")
    if len(parts) >= 4 and parts[0] == "jobtap" and ".".join(parts[1:-2]) == HOST:
        try:
            return _pid_alive(int(parts[-2]))
        except ValueError:
            pass
    return bool(conn.exists(f"rq:worker:{name}"))


def requeue_abandoned(queue: Queue, *, mine: str | None = None, running: str = "") -> int:
    """Put back on ``queue`` the chunks whose worker has died; return how many.

    The worker of a chunk is read from rq's execution record, which exists from
    the moment the chunk is taken (the job's own ``worker_name`` comes a little
    later).  ``mine``, the calling worker, holds only the chunk ``running``: any
    other chunk recorded under its name is abandoned too (Redis came back from a
    snapshot taken while it held that chunk)."""
    registry = queue.started_job_registry
    count = 0
    for job_id, execution_id in registry.get_job_and_execution_ids(cleanup=False):
        try:
            execution = Execution.fetch(execution_id, job_id, queue.connection)
        except Exception:  # expired between the two reads
            continue
        holder = execution.worker_name
        if mine is not None and holder == mine:
            if job_id == running:
                continue
        elif worker_alive(queue.connection, holder):
            continue
        job = queue.fetch_job(job_id)
        registry.connection.zrem(registry.key, execution.composite_key)
        if job is None:
            continue
        queue.enqueue_job(job, at_front=True)
        log.warning("handed back chunk %s of dead worker %s", job.id, execution.worker_name)
        count += 1
    return count


def taken_unstarted(queue: Queue) -> list[Job]:
    """The chunks a worker took off ``queue`` and has not recorded as started.

    rq takes a chunk by moving its id to the queue's intermediate list, and
    records it as started (the execution record :func:`requeue_abandoned`
    reads) a few round trips later: a live worker is in that gap for
    milliseconds, a worker killed in it leaves the chunk there alone, where rq
    fails it after a minute and a maintenance pass.  (Ids of chunks done,
    failed or queued again are left to rq's own clean-up.)"""
    started = set(queue.started_job_registry.get_job_ids(cleanup=False))
    taken = []
    for job_id in queue.intermediate_queue.get_job_ids():
        if job_id in started:
            continue
        job = queue.fetch_job(job_id)
        if job is None or job.get_status(refresh=False) != JobStatus.QUEUED:
            continue
        if queue.connection.lpos(queue.key, job_id) is None:
            taken.append(job)
    return taken


def requeue_taken_unstarted(queue: Queue) -> tuple[int, int]:
    """Put back on ``queue`` the chunks a worker took and died before starting
    (:func:`taken_unstarted` by two passes at least :data:`STUCK_AFTER`
    seconds apart); return how many, and how many were seen for the first
    time (a later pass decides).  A worker frozen in that gap and put back
    applies its chunk twice, and the second time writes nothing."""
    inter = queue.intermediate_queue
    requeued = waiting = 0
    for job in taken_unstarted(queue):
        first = inter.get_first_seen(job.id)
        if first is None or time.time() - first.timestamp() < STUCK_AFTER:
            inter.set_first_seen(job.id)
            waiting += 1
            continue
        inter.remove(job.id)
        queue.enqueue_job(job, at_front=True)
        log.warning("handed back chunk %s, taken by a worker that died before starting it", job.id)
        requeued += 1
    return requeued, waiting


def hand_back(queues: Sequence[Queue]) -> int:
    """Before a worker starts: every chunk a dead worker left (:func:`requeue_abandoned`),
    waiting :data:`STUCK_AFTER` for a second look when one may have been taken
    and never started; return how many went back."""
    count = 0
    waiting = False
    for queue in queues:
        requeued, seen_first = requeue_taken_unstarted(queue)
        count += requeue_abandoned(queue) + requeued
        waiting |= seen_first > 0
    if waiting:
        time.sleep(STUCK_AFTER)
        count += sum(requeue_taken_unstarted(q)[0] for q in queues)
    return count


QUEUE_PREFIX = "jobtap."


def site_of_queue(name: str) -> str | None:
    """The site of a jobtap rq queue name (``jobtap.SITE.PRIORITY``), else None."""
    if not name.startswith(QUEUE_PREFIX):
        return None
    site, _, priority = name[len(QUEUE_PREFIX) :].rpartition(".")
    return site if site and priority in PRIORITIES else None


def sites_with_queues(queue_redis: redis.Redis) -> list[str]:
    """Every site whose collector has ever enqueued a chunk here (rq keeps the
    names of the queues it has seen in ``rq:queues``)."""
    found = {site_of_queue(q.name) for q in Queue.all(connection=queue_redis)}
    return sorted(s for s in found if s)


def site_queues(queue_redis: redis.Redis, sites: Sequence[str]) -> list[Queue]:
    """Every site's ``state`` queue, then every site's ``update`` queue."""
    return [
        ChunkQueue(SiteKeys(site).rq_queue(p), connection=queue_redis)
        for p in PRIORITIES
        for site in sites
    ]


class JobtapWorker(SimpleWorker):
    """SimpleWorker that hands back chunks of dead local workers, takes turns
    between its sites within a priority, (``discover``) adds the queues of sites
    that appear while it runs, and remembers whether it was asked to stop
    (rather than losing Redis)."""

    stop_wanted = False
    busy = False
    server: str | None = None  # the run_id of the Redis server of the queues
    queue_class = ChunkQueue  # takes chunks with LMOVE, whatever the number of queues

    def prepare_job_execution(self, job, remove_from_intermediate_queue: bool = False) -> None:
        # rq leaves the id in the intermediate list when it serves several queues
        # (it popped with BLPOP then); ChunkQueue always moves it there.
        super().prepare_job_execution(job, remove_from_intermediate_queue=True)

    def __init__(self, *args: Any, sites: Sequence[str], discover: bool = False, **kw: Any):
        super().__init__(*args, **kw)
        self.sites = list(sites)
        self.discover = discover
        self.log.addFilter(rq_routine_at_debug)  # once: a filter is added only once

    def _set_connection(self, connection: redis.Redis) -> redis.Redis:
        """rq raises the connection's socket timeout above its longest wait for
        a chunk, in the pool's settings: connections made before keep theirs
        (redis-py 8's default, 5 s), and an idle worker's first wait on its
        bells (up to 5 s) timed out on the one ``jobtap worker`` had opened,
        a "could not connect" and a backoff every few seconds while idle.  The
        pool is emptied so that every connection is made with the settings."""
        connection = super()._set_connection(connection)
        connection.connection_pool.reset()
        return connection

    def subscribe(self) -> None:
        """No channel for rq's commands (``rq shutdown``; jobtap stops workers with
        SIGTERM): its thread retried a lost Redis on its own every 2 s, a second
        retry loop writing between the worker loop's (1, 2, 4, ... s)."""

    @property
    def dequeue_timeout(self) -> int:
        # Wake up for the maintenance pass even when no chunk comes.
        return min(super().dequeue_timeout, max(1, int(self.maintenance_interval)))

    def clean_registries(self) -> None:
        if self.discover:
            self.add_new_sites()
        for queue in self.queues:
            requeue_abandoned(queue)
            requeue_taken_unstarted(queue)
        super().clean_registries()

    def add_new_sites(self) -> list[str]:
        new = [s for s in sites_with_queues(self.connection) if s not in self.sites]
        if new:
            self.sites += new
            self.queues = site_queues(self.connection, self.sites)
            self._ordered_queues = self.queues[:]
            log.info("serving the queues of new site(s) %s", ", ".join(new))
        return new

    def reorder_queues(self, reference_queue: Queue) -> None:
        """After a chunk of site S, the sites after S come first, within each
        priority; ``state`` queues always before ``update`` queues."""
        site = site_of_queue(reference_queue.name)
        if site not in self.sites or len(self.sites) < 2:
            return
        i = self.sites.index(site) + 1
        turn = self.sites[i:] + self.sites[:i]
        by_name = {q.name: q for q in self.queues}
        self._ordered_queues = [by_name[SiteKeys(s).rq_queue(p)] for p in PRIORITIES for s in turn]

    def execute_job(self, job, queue) -> None:
        self.busy = True
        try:
            self.hand_back_after_a_restart(job.id)
            super().execute_job(job, queue)
        finally:
            self.busy = False

    def hand_back_after_a_restart(self, running: str) -> None:
        """If the queues' Redis restarted since the last chunk, it may have come
        back from a snapshot that lists chunks under this worker's name which it
        no longer holds: hand them back at once (rq would wait for them to time out)."""
        server = self.connection.info("server").get("run_id")
        if self.server is not None and server != self.server:
            for queue in self.queues:
                requeue_abandoned(queue, mine=self.name, running=running)
        self.server = server

    def request_stop(self, signum, frame) -> None:
        self.stop_wanted = True
        try:
            super().request_stop(signum, frame)
        except REDIS_AWAY:  # rq asks Redis whether it is busy: answer it ourselves
            if not self.busy:
                raise StopRequested() from None
            self._stop_requested = True  # the chunk in hand finishes first


def tune_gc() -> None:
    """Fewer, cheaper garbage collections: a chunk allocates tens of thousands of
    short-lived dicts, none of them cyclic; everything imported so far is frozen
    out of the collector's scans."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 50)


def run_worker(
    queue_redis: redis.Redis,
    data_redis: AnyRedis,
    sites: str | Sequence[str] | None,
    *,
    burst: bool = False,
    settings: apply.Settings | None = None,
    maintenance: int = 30,
    max_jobs: int | None = None,
    metrics: WorkerMetrics | None = None,
    backoff: tuple[float, float] = (0.5, 30.0),
    burst_attempts: int = 10,
) -> bool:
    """Serve the ``state`` queues of ``sites`` before their ``update`` queues
    (``sites``: a site, several, or None for every site with queues, found
    again at each maintenance pass); return whether any chunk was processed.

    Runs until asked to stop (SIGTERM/SIGINT), or in ``burst`` mode until the
    queues are empty.  When Redis goes away, waits for it with exponential
    backoff (``backoff``: first and longest wait, in seconds) and carries on; in
    burst mode it gives up (``redis.ConnectionError``) after ``burst_attempts``
    losses in a row.  ``metrics``: count each chunk in these series.

    ``queue_redis`` is a plain Redis (rq has no cluster support); the data may
    be a plain Redis or a Redis Cluster."""
    discover = sites is None
    names = [sites] if isinstance(sites, str) else list(sites or [])
    while discover and not names:
        names = sites_with_queues(queue_redis)
        if not names:
            if burst:
                return False
            log.info("no site has queues yet: looking again in %d s", maintenance)
            time.sleep(maintenance)
    tune_gc()
    loop = _WorkerLoop(queue_redis, data_redis, names, burst, settings, maintenance, max_jobs)
    loop.discover = discover
    loop.metrics = metrics
    retrying = Retrying(
        retry=retry_if_result(lambda done: not done) | retry_if_exception_type(REDIS_AWAY),
        wait=wait_exponential(multiplier=backoff[0], max=backoff[1]) + wait_random(0, backoff[0]),
        stop=_stopped(loop.stop) | (stop_after_attempt(burst_attempts) if burst else stop_never),
        sleep=loop.stop.wait,
        before_sleep=_log_restart,
        retry_error_cls=_GaveUp,
    )
    previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}
    try:
        retrying(loop.serve)
    except _GaveUp as exc:
        outcome = exc.last_attempt
        if not loop.stop.is_set():
            if outcome.failed:
                raise outcome.exception() from None
            raise redis.ConnectionError("gave up: rq's loop kept ending") from None
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return loop.worked


class _WorkerLoop:
    """One rq worker after another, for as long as Redis keeps going away."""

    def __init__(self, queue_redis, data_redis, sites, burst, settings, maintenance, max_jobs):
        self.queue_redis, self.data_redis = queue_redis, data_redis
        self.sites = list(sites)
        self.discover = False  # look for new sites' queues at each maintenance pass
        self.burst, self.settings = burst, settings
        self.maintenance, self.max_jobs = maintenance, max_jobs
        self.metrics: WorkerMetrics | None = None
        self.stop = threading.Event()
        self.worked = False

    def serve(self) -> bool:
        """Run one rq worker; True when done (asked to stop, burst drained)."""
        if self.stop.is_set():  # a signal came while waiting to start again
            return True
        worker: JobtapWorker | None = None
        try:
            apply.configure(self.data_redis, self.settings, self.metrics)
            queues = site_queues(self.queue_redis, self.sites)
            hand_back(queues)
            worker = JobtapWorker(
                queues,
                connection=self.queue_redis,
                name=worker_name(),
                maintenance_interval=self.maintenance,
                default_result_ttl=0,
                sites=self.sites,
                discover=self.discover,
            )
            self.worked |= worker.work(
                burst=self.burst,
                logging_level=logging.getLevelName(logging.getLogger().level),
                max_jobs=self.max_jobs,
            )
            return (
                worker.stop_wanted
                or self.max_jobs is not None
                or (self.burst and _drained(worker.queues))
            )
        finally:
            if worker is not None:
                self.sites = worker.sites  # with any found while it ran
                _retired.add(worker.name)
                if worker.stop_wanted:
                    self.stop.set()
            # rq's handlers ask Redis whether a chunk is in hand; between two rq
            # workers there is none, and Redis may be away
            if threading.current_thread() is threading.main_thread():
                for sig in _STOP_SIGNALS:
                    signal.signal(sig, lambda signum, frame: self.stop.set())


class _GaveUp(RetryError):
    pass


class _stopped(stop_base):
    """Stop retrying once the worker was asked to stop."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()


def _drained(queues: list[Queue]) -> bool:
    """Whether every queue is empty (burst mode is done); False if Redis is away."""
    try:
        return all(q.count == 0 for q in queues)
    except REDIS_AWAY:
        return False


def _log_restart(state: RetryCallState) -> None:
    outcome = state.outcome
    why = f"lost Redis: {outcome.exception()}" if outcome and outcome.failed else "rq's loop ended"
    wait = state.next_action.sleep if state.next_action else 0.0
    log.warning("worker: %s; starting again in %.1f s", why, wait)
