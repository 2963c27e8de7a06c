"""Shipping changes to the workers: compact chunks enqueued as rq jobs.

A chunk is one orjson document holding the site, the cycle number, the time of
observation and a list of items of one kind (job, node or queue).  Items are:

- ``{"op": "upsert", "id", "fp", "state", "record"}``: the object's normalised record;
- ``{"op": "vanished", "id", "fp"}``: a job left the live list and history has
  nothing on it: the worker finalises it with ``reason: "vanished"``;
- ``{"op": "remove", "id"}``: a node or queue is gone.

State changes (new objects, state transitions, finals) and attribute-only changes
go to two rq queues so that a flood of usage updates never delays "your job
started".  Every chunk carries the cycle number: the workers use it to apply
chunks in any order and to make a retried chunk a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import orjson
import redis
from rq import Queue, Retry

from jobtap.keys import SiteKeys

APPLY_FUNC = "jobtap.workers.apply.apply_chunk"
STATE = "state"
UPDATE = "update"
PRIORITIES = (STATE, UPDATE)


def chunked(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def encode_chunk(
    site: str, cycle: int, observed_at: str, kind: str, items: Iterable[dict]
) -> bytes:
    return orjson.dumps(
        {
            "site": site,
            "cycle": cycle,
            "observed_at": observed_at,
            "kind": kind,
            "items": list(items),
        }
    )


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
        batches: dict[tuple[str, str], list[dict]],
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
                    payload = encode_chunk(self.keys.site, cycle, observed_at, kind, part)
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
