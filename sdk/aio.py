"""The same API for asyncio.

    import jobtap.aio

    async with jobtap.aio.Client() as client:
        job = await client.job("12.pbs")
        async with await client.subscribe(jobs=["12.pbs"]) as sub:
            async for change in sub:               # ends after the job's final change
                print(change.type, change.record.state)
        job = await client.wait("13.pbs", timeout=600)
        async for change in client.stream(group="kafka"):
            await producer.send(change.json)

Built on the threaded client (:class:`jobtap.Client`): its background thread does the
pub/sub work and hands each change to the event loop, so callbacks (plain
functions or coroutine functions) run on the loop, one at a time and in order;
cache reads and stream batches run in worker threads.  Guarantees and arguments
are those of :class:`jobtap.Client`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from enum import Enum
from typing import Any

from .client import Client as SyncClient
from .client import job_of, not_reached, stopped_waiting, wait_timeout
from .errors import JobtapError
from .events import REMOVED
from .records import Change, Job, Node, Queue
from .schema import TERMINAL, job_states
from .stream import EventStream as SyncEventStream
from .subscribe import Subscription as SyncSubscription

log = logging.getLogger("jobtap.sdk")

AsyncCallback = Callable[[Change], Awaitable[object] | object]
"""A callback run on the event loop: a plain function or a coroutine function."""


class _End(Enum):
    """Put in a subscription's queue when it ends."""

    END = "end"


_END = _End.END


class Subscription:
    """An asyncio subscription: ``async for change in sub`` (without a callback),
    or a callback run on the loop.  Iteration ends when the subscription does."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: AsyncCallback | None):
        self._loop = loop
        self._queue: asyncio.Queue[Change | _End] = asyncio.Queue()
        self._callback = callback
        self._sub: SyncSubscription | None = None
        self._task: asyncio.Task[None] | None = None

    # called on the client's thread
    def _put(self, item: Change | _End) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def _start(self, sub: SyncSubscription) -> None:
        self._sub = sub
        if self._callback is not None:
            self._task = self._loop.create_task(self._run_callbacks())

    def _callbacks_done(self) -> asyncio.Future[None]:
        """Done once the callback was given every change and the subscription
        ended (a subscription with a callback only)."""
        assert self._task is not None
        return self._task

    async def _run_callbacks(self) -> None:
        assert self._callback is not None
        async for change in self:
            try:
                result = self._callback(change)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("jobtap: a subscription callback raised on %s", change.id)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Change:
        item = await self._queue.get()
        if item is _END:
            self._queue.put_nowait(_END)  # later readers end too
            raise StopAsyncIteration
        return item

    async def close(self) -> None:
        """Stop the subscription."""
        if self._sub is not None:
            self._sub.close()
        self._queue.put_nowait(_END)
        if self._task is not None and self._task is not asyncio.current_task():
            await self._task

    async def wait_closed(self, timeout: float | None = None) -> bool:
        """Wait until the subscription ends (after its jobs' final changes); False on timeout."""
        assert self._sub is not None
        return await asyncio.to_thread(self._sub.wait_closed, timeout)

    @property
    def closed(self) -> bool:
        return self._sub is None or self._sub.closed

    @property
    def jobs(self) -> frozenset[str]:
        return self._sub.jobs if self._sub is not None else frozenset()

    @property
    def resyncs(self) -> int:
        return self._sub.resyncs if self._sub is not None else 0

    @property
    def error(self) -> JobtapError | None:
        """Why the subscription ended, if it did not end normally."""
        return self._sub.error if self._sub is not None else None

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class EventStream:
    """``async for change in stream``: the deduplicated stream of :mod:`jobtap.stream`,
    fetched batch by batch in a worker thread."""

    def __init__(self, stream: SyncEventStream):
        self._stream = stream
        self._buffer: deque[Change] = deque()
        self._lock = asyncio.Lock()
        self._last_id: str | None = None

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Change:
        if not self._buffer:
            async with self._lock:
                batch = await asyncio.to_thread(_next_batch, self._stream)
            if batch is None:
                raise StopAsyncIteration
            self._buffer.extend(batch)
        change = self._buffer.popleft()
        self._last_id = change.stream_id
        return change

    @property
    def last_id(self) -> str | None:
        """Stream id of the last event handed out (the position to resume from)."""
        return self._last_id

    @property
    def duplicates(self) -> int:
        return self._stream.duplicates

    @property
    def delivered(self) -> int:
        return self._stream.delivered - len(self._buffer)

    async def close(self) -> None:
        """Ack what was handed out and stop (see :meth:`jobtap.stream.EventStream.close`)."""
        self._stream.interrupt()  # a fetch in flight ends after its current read
        async with self._lock:
            # events fetched but not handed out stay pending for the group
            self._stream._untake(len(self._buffer))
            self._buffer.clear()
            await asyncio.to_thread(self._stream.close)

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _next_batch(stream: SyncEventStream) -> list[Change] | None:
    try:
        return stream.batch()
    except StopIteration:
        return None


class Client:
    """The asyncio client; arguments and guarantees as :class:`jobtap.Client`."""

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
        max_lag: float | None = 2.0,
        queue_limit: int = 10_000,
    ):
        self._client = SyncClient(
            redis_url,
            site=site,
            username=username,
            password=password,
            credentials=credentials,
            sites=sites,
            timeout=timeout,
            backoff=backoff,
            max_lag=max_lag,
            queue_limit=queue_limit,
        )

    @property
    def sync(self) -> SyncClient:
        """The underlying threaded client."""
        return self._client

    @property
    def site(self) -> str:
        return self._client.site

    @property
    def sites(self) -> list[str]:
        return self._client.sites

    @property
    def user(self) -> str | None:
        return self._client.user

    async def job(
        self, job_id: str, *, user: str | None = None, site: str | None = None
    ) -> Job | None:
        """As :meth:`jobtap.Client.job`."""
        return await asyncio.to_thread(self._client.job, job_id, user=user, site=site)

    async def native(
        self, job_id: str, *, user: str | None = None, site: str | None = None
    ) -> dict[str, Any] | None:
        """As :meth:`jobtap.Client.native`."""
        return await asyncio.to_thread(self._client.native, job_id, user=user, site=site)

    async def jobs(
        self,
        user: str | None = None,
        state: str | Iterable[str] | None = None,
        *,
        finished: bool | None = None,
        site: str | None = None,
    ) -> list[Job]:
        """As :meth:`jobtap.Client.jobs`."""
        return await asyncio.to_thread(self._client.jobs, user, state, finished=finished, site=site)

    async def nodes(
        self, state: str | Iterable[str] | None = None, *, site: str | None = None
    ) -> list[Node]:
        """As :meth:`jobtap.Client.nodes`."""
        return await asyncio.to_thread(self._client.nodes, state, site=site)

    async def node(self, name: str, *, site: str | None = None) -> Node | None:
        """As :meth:`jobtap.Client.node`."""
        return await asyncio.to_thread(self._client.node, name, site=site)

    async def queues(self, *, site: str | None = None) -> list[Queue]:
        """As :meth:`jobtap.Client.queues`."""
        return await asyncio.to_thread(self._client.queues, site=site)

    async def queue(self, name: str, *, site: str | None = None) -> Queue | None:
        """As :meth:`jobtap.Client.queue`."""
        return await asyncio.to_thread(self._client.queue, name, site=site)

    async def subscribe(
        self,
        callback: AsyncCallback | None = None,
        *,
        jobs: str | Iterable[str] | None = None,
        user: str | None = None,
        all_jobs: bool = False,
        attrs: Iterable[str] | None = None,
        kinds: Iterable[str] = ("job",),
        initial: bool = True,
        site: str | None = None,
    ) -> Subscription:
        """As :meth:`jobtap.Client.subscribe`; ``callback`` is optional (iterate the
        subscription instead) and may be a coroutine function."""
        sub = Subscription(asyncio.get_running_loop(), callback)

        def make() -> SyncSubscription:
            inner = self._client.subscribe(
                sub._put,
                jobs=jobs,
                user=user,
                all_jobs=all_jobs,
                attrs=attrs,
                kinds=kinds,
                initial=initial,
                site=site,
            )
            # also when it ended during its initial delivery (the job had finished)
            inner.add_done_callback(lambda: sub._put(_END))
            return inner

        sub._start(await asyncio.to_thread(make))
        return sub

    async def wait(
        self,
        job_id: str,
        states: str | Iterable[str] = TERMINAL,
        timeout: float | None = None,
        *,
        user: str | None = None,
        site: str | None = None,
    ) -> Job:
        """As :meth:`jobtap.Client.wait`, without blocking the loop."""
        wanted = job_states(states)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Job] = loop.create_future()
        last: dict[str, Job] = {}

        def on_change(change: Change) -> None:
            job = job_of(change)
            last["job"] = job
            if done.done():
                return
            if job.state in wanted:
                done.set_result(job)
            elif change.final or change.type == REMOVED:
                done.set_exception(not_reached(job_id, change, wanted))

        sub = await self.subscribe(on_change, jobs=[job_id], user=user, attrs=("state",), site=site)
        # over when the job got there, or every change was handed over and the
        # subscription ended
        either: list[asyncio.Future[Any]] = [done, sub._callbacks_done()]
        try:
            await asyncio.wait_for(
                asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED), timeout
            )
        except TimeoutError:
            raise wait_timeout(job_id, wanted, timeout, last.get("job")) from None
        finally:
            await sub.close()
        if done.done():
            return done.result()
        # the client was closed, or the subscription failed, before the job got there
        raise stopped_waiting(job_id, sub.error)

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
        """As :meth:`jobtap.Client.stream`, for ``async for``."""
        return EventStream(
            self._client.stream(
                group,
                consumer,
                since,
                user,
                site=site,
                count=count,
                block=block,
                claim_idle=claim_idle,
                idle_timeout=idle_timeout,
                dedupe=dedupe,
                native=native,
            )
        )

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["Client", "EventStream", "JobtapError", "Subscription"]
