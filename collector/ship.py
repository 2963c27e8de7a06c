"""Shipping changes to the workers: chunks (``jobtap.contract.chunk``, the
contract with the workers) enqueued as rq jobs on the site's two priority
queues, in one round trip.

When the queue Redis has replicas (under Sentinel, or ``--queue-wait-replicas
N``) the same round trip ends with ``WAIT N timeout``: a shipment that too few
replicas acknowledged in time fails (a :class:`NotReplicated`, a Redis error),
so the cycle fails and changes nothing, and its changes are shipped again by
the next one.  A chunk acknowledged by a replica survives the primary's loss
and a replica's promotion; one that was not may or may not have, and is sent
again either way (applying a chunk twice, or an older cycle's after a newer
one, changes nothing)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import redis
from redis.client import CaseInsensitiveDict
from rq import Queue, Retry

from jobtap.contract.chunk import APPLY_FUNC, PRIORITIES, Chunk, Item
from jobtap.keys import SiteKeys
from jobtap.sentinel import wait_replicas
from jobtap.workers.queues import ChunkQueue

Batches = dict[tuple[str, str], list[Item]]  # (priority, kind) -> items


def chunked(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class NotReplicated(redis.ResponseError):
    """Fewer replicas than wanted acknowledged a shipment in time."""


def _check_wait(response: Any, **options: Any) -> Any:
    """The ``WAIT`` reply of a shipment: a :class:`NotReplicated` (which fails the
    pipeline) when fewer replicas than ``replicas_wanted`` acknowledged it."""
    wanted = options.get("replicas_wanted")
    if wanted is not None and int(response) < wanted:
        raise NotReplicated(
            f"chunks acknowledged by {int(response)} of the {wanted} queue replica(s) wanted "
            f"within {options.get('wait_ms', 0) / 1000:g} s: not counted as shipped"
        )
    return response


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
        replicas: int | None = None,
        wait_timeout: float = 2.0,
    ):
        self.keys = keys
        self.chunk_size = chunk_size
        self.job_timeout = job_timeout
        self.failure_ttl = failure_ttl
        self.retries = retries
        self.redis = queue_redis
        # replicas that must acknowledge each shipment (None: as the connection
        # says: 1 under Sentinel, or --queue-wait-replicas)
        self.replicas = replicas
        self.wait_timeout = wait_timeout
        self.lease = 0  # the lease generation every chunk carries (jobtap.contract.lease)
        self.queues = {p: ChunkQueue(keys.rq_queue(p), connection=queue_redis) for p in PRIORITIES}

    def ship(
        self,
        cycle: int,
        observed_at: str,
        batches: Batches,
        pipeline: redis.client.Pipeline | None = None,
    ) -> int:
        """Enqueue ``batches[(priority, kind)]`` as chunks; return how many.

        Everything goes out in one pipeline (one round trip), state changes first,
        and ends with ``WAIT`` when replicas must acknowledge it: the pipeline's
        execution then raises :class:`NotReplicated` if too few did in time.
        """
        pipe = pipeline if pipeline is not None else self.redis.pipeline(transaction=False)
        count = 0
        for priority in PRIORITIES:
            datas = []
            for (prio, kind), items in batches.items():
                if prio != priority:
                    continue
                for part in chunked(items, self.chunk_size):
                    payload = Chunk(
                        self.keys.site, cycle, observed_at, kind, list(part), self.lease
                    ).encode()
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
        wanted = self.wait_replicas()
        if count and wanted > 0:
            self.wait_on(pipe, wanted)
        if pipeline is None:
            pipe.execute()
        return count

    def wait_replicas(self) -> int:
        """How many replicas must acknowledge each shipment."""
        return self.replicas if self.replicas is not None else wait_replicas(self.redis)

    def wait_on(self, pipe: redis.client.Pipeline, wanted: int) -> None:
        """End ``pipe`` with ``WAIT wanted timeout``, its reply checked when the
        pipeline runs (this pipeline's callbacks only: a copy of the client's)."""
        callbacks = CaseInsensitiveDict(pipe.response_callbacks)
        callbacks["WAIT"] = _check_wait
        pipe.response_callbacks = callbacks
        wait_ms = max(1, int(self.wait_timeout * 1000))
        pipe.execute_command("WAIT", wanted, wait_ms, replicas_wanted=wanted, wait_ms=wait_ms)
