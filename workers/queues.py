"""The rq queue of a site's chunks, taken so that a worker killed at any moment
loses none.

rq takes a job from a single queue with ``LMOVE`` into that queue's intermediate
list, where it stays until the worker has recorded it as started; but from
several queues (a worker serves a site's ``state`` and ``update`` queues, and
maybe several sites) it pops with ``BLPOP``, and a chunk popped by a worker killed
before it recorded the chunk as started is lost: the collector has moved on, and a
job's final may never be written.  :class:`ChunkQueue` takes every chunk with
``LMOVE``, from the first non-empty queue in the worker's order, so a chunk is
always in a queue, in an intermediate list, or started
(:func:`jobtap.workers.service.requeue_taken_unstarted` hands back the second).

``LMOVE`` does not block on several lists, so a worker with nothing to do waits
on the queues' *bells*: every push of a chunk id also pushes a token on its
queue's bell list (at most :data:`BELL_TOKENS` kept), and the worker blocks on
those with ``BLPOP``, then takes from the queues again.  A token is only a
wake-up: one taken by another worker, or trimmed, costs nothing but a sweep or
one wait of at most :data:`BELL_WAIT` seconds.  Needs Redis 6.2 (``LMOVE``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Any

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.exceptions import DequeueTimeout
from rq.job import Job
from rq.utils import as_text

from jobtap.keys import bell_key

BELL_TOKENS = 64  # tokens kept on a bell: more workers than this wake by their timeout
BELL_WAIT = 5  # seconds at most between two looks at the queues: a chunk pushed without
#                ringing (by an older collector) waits no longer than this


class ChunkQueue(Queue):
    """rq's Queue, pushing a bell token with every chunk id and taking chunks
    from several queues with ``LMOVE`` (see the module)."""

    @property
    def bell_key(self) -> str:
        return bell_key(self.key)

    def push_job_id(
        self, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False
    ) -> None:
        pipe = pipeline if pipeline is not None else self.connection.pipeline()
        super().push_job_id(job_id, pipeline=pipe, at_front=at_front)
        pipe.lpush(self.bell_key, 1)
        pipe.ltrim(self.bell_key, 0, BELL_TOKENS - 1)
        if pipeline is None:
            pipe.execute()

    @classmethod
    def dequeue_any(  # type: ignore[override]
        cls,
        queues: Iterable[Queue],
        timeout: int | None,
        connection: Redis,
        job_class: type[Job] | None = None,
        serializer: Any = None,
        death_penalty_class: Any = None,
    ) -> tuple[Job, Queue] | None:
        """The first chunk of the first non-empty queue, moved to that queue's
        intermediate list as it is taken; None at once (``timeout`` None) or
        :class:`~rq.exceptions.DequeueTimeout` after ``timeout`` seconds if
        there is none."""
        queues = list(queues)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for queue in queues:
                taken = cls.lmove(connection, queue.key, None)
                if taken is None:
                    continue
                queue_key, job_id = map(as_text, taken)
                found = cls._fetch_dequeued_job(
                    connection,
                    queue_key,
                    job_id,
                    job_class=job_class,
                    serializer=serializer,
                    death_penalty_class=death_penalty_class,
                )
                if found is not None:
                    return found
            if deadline is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise DequeueTimeout(timeout, [q.key for q in queues])
            bells = [bell_key(q.key) for q in queues]
            connection.blpop(bells, min(BELL_WAIT, max(1, math.ceil(left))))
