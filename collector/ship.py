"""Shipping changes to the workers: chunks (``jobtap.workers.chunk``, the
contract with the workers) enqueued as rq jobs on the site's two priority
queues, in one round trip."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import redis
from rq import Queue, Retry

from jobtap.keys import SiteKeys
from jobtap.workers.chunk import APPLY_FUNC, PRIORITIES, Chunk, Item

Batches = dict[tuple[str, str], list[Item]]  # (priority, kind) -> items


def chunked(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Shipper:
    """Enqueues chunks on the site's two rq queues (``jobtap.S.state`` and
    ``jobtap.S.update``) of the queue Redis."""

    def __init__(
        self,
        queue_redis: redis.Redis,
        keys: SiteKeys,
        *,
        chunk_size: int = 1000,
        job_timeout: int = 300,
        failure_ttl: int = 7 * 86400,
        retries: int = 3,
    ):
        self.keys = keys
        self.chunk_size = chunk_size
        self.job_timeout = job_timeout
        self.failure_ttl = failure_ttl
        self.retries = retries
        self.redis = queue_redis
        self.queues = {p: Queue(keys.rq_queue(p), connection=queue_redis) for p in PRIORITIES}

    def ship(
        self,
        cycle: int,
        observed_at: str,
        batches: Batches,
        pipeline: redis.client.Pipeline | None = None,
    ) -> int:
        """Enqueue ``batches[(priority, kind)]`` as chunks; return how many.

        Everything goes out in one pipeline (one round trip), state changes first.
        """
        pipe = pipeline if pipeline is not None else self.redis.pipeline(transaction=False)
        count = 0
        for priority in PRIORITIES:
            datas = []
            for (prio, kind), items in batches.items():
                if prio != priority:
                    continue
                for part in chunked(items, self.chunk_size):
                    payload = Chunk(self.keys.site, cycle, observed_at, kind, list(part)).encode()
                    datas.append(
                        Queue.prepare_data(
                            APPLY_FUNC,
                            args=(payload,),
                            timeout=self.job_timeout,
                            result_ttl=0,
                            failure_ttl=self.failure_ttl,
                            retry=Retry(max=self.retries) if self.retries else None,
                            description=f"apply {kind} chunk of cycle {cycle} ({len(part)})",
                        )
                    )
            if datas:
                self.queues[priority].enqueue_many(datas, pipeline=pipe)
                count += len(datas)
        if pipeline is None:
            pipe.execute()
        return count
