"""``jobtap worker``: an rq worker serving a site's two priority queues.

It runs chunks in its own process (rq's SimpleWorker: no fork per chunk, the
Lua script and connections stay warm).  rq's own signal handling gives the
clean shutdown we want: the first SIGTERM/SIGINT lets the chunk in hand finish
(it is applied atomically or not at all), a second one stops at once.

Before it starts, and every ``maintenance`` seconds, the worker hands back
chunks that a dead worker on this host had taken (killed mid-batch): the chunk
goes back on its queue and, applied again, is a no-op for anything already
written.  Workers on other hosts are recovered by rq's own heartbeat expiry.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import uuid

import redis
from rq import Queue, SimpleWorker
from rq.executions import Execution

from jobtap.keys import SiteKeys

from . import apply
from .chunk import PRIORITIES

log = logging.getLogger("jobtap.workers")
HOST = socket.gethostname()


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
    if not name:
        return False
    parts = name.split(".")
    if len(parts) >= 4 and parts[0] == "jobtap" and ".".join(parts[1:-2]) == HOST:
        try:
            return _pid_alive(int(parts[-2]))
        except ValueError:
            pass
    return bool(conn.exists(f"rq:worker:{name}"))


def requeue_abandoned(queue: Queue) -> int:
    """Put back on ``queue`` the chunks whose worker has died; return how many.

    The worker of a chunk is read from rq's execution record, which exists from
    the moment the chunk is taken (the job's own ``worker_name`` comes a little
    later)."""
    registry = queue.started_job_registry
    count = 0
    for job_id, execution_id in registry.get_job_and_execution_ids(cleanup=False):
        try:
            execution = Execution.fetch(execution_id, job_id, queue.connection)
        except Exception:  # expired between the two reads
            continue
        if worker_alive(queue.connection, execution.worker_name):
            continue
        job = queue.fetch_job(job_id)
        registry.connection.zrem(registry.key, execution.composite_key)
        if job is None:
            continue
        queue.enqueue_job(job, at_front=True)
        log.warning("handed back chunk %s of dead worker %s", job.id, execution.worker_name)
        count += 1
    return count


class JobtapWorker(SimpleWorker):
    """SimpleWorker that also hands back chunks of dead local workers."""

    def clean_registries(self) -> None:
        for queue in self.queues:
            requeue_abandoned(queue)
        super().clean_registries()


def tune_gc() -> None:
    """Fewer, cheaper garbage collections: a chunk allocates tens of thousands of
    short-lived dicts, none of them cyclic; everything imported so far is frozen
    out of the collector's scans."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 50)


def run_worker(
    queue_redis: redis.Redis,
    data_redis: redis.Redis,
    site: str,
    *,
    burst: bool = False,
    settings: apply.Settings | None = None,
    maintenance: int = 30,
    max_jobs: int | None = None,
) -> bool:
    """Serve ``jobtap.SITE.state`` before ``jobtap.SITE.update``; return whether
    any chunk was processed."""
    keys = SiteKeys(site)
    tune_gc()
    apply.configure(data_redis, settings)
    queues = [Queue(keys.rq_queue(p), connection=queue_redis) for p in PRIORITIES]
    for q in queues:
        requeue_abandoned(q)
    worker = JobtapWorker(
        queues,
        connection=queue_redis,
        name=worker_name(),
        maintenance_interval=maintenance,
        default_result_ttl=0,
    )
    return worker.work(
        burst=burst,
        logging_level=logging.getLevelName(logging.getLogger().level),
        max_jobs=max_jobs,
    )
