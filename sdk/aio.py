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
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from .client import Client as SyncClient
from .client import not_reached, wait_timeout
from .errors import JobtapError
from .events import REMOVED
from .records import Change, Job, Node, Queue
from .schema import TERMINAL
from .stream import EventStream as SyncEventStream
from .subscribe import Subscription as SyncSubscription

log = logging.getLogger("jobtap.sdk")

_END = object()


class Subscription:
    """An asyncio subscription: ``async for change in sub`` (without a callback),
    or a callback run on the loop.  Iteration ends when the subscription does."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[Change], Any] | None):
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._callback = callback
        self._sub: SyncSubscription | None = None
        self._task: asyncio.Task | None = None

    # called on the client's thread
    def _put(self, item: object) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            pass

    def _start(self, sub: SyncSubscription) -> None:
        self._sub = sub
        if self._callback is not None:
            self._task = self._loop.create_task(self._run_callbacks())

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
        self._stream._stop.set()  # a fetch in flight ends after its current read
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
    """The asyncio client; arguments as :class:`jobtap.Client`."""

    def __init__(self, *args: Any, **kwargs: Any):
        self._client = SyncClient(*args, **kwargs)

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

    async def job(self, job_id: str, **kw: Any) -> Job | None:
        return await asyncio.to_thread(self._client.job, job_id, **kw)

    async def jobs(self, user: str | None = None, state: Any = None, **kw: Any) -> list[Job]:
        return await asyncio.to_thread(self._client.jobs, user, state, **kw)

    async def nodes(self, state: Any = None, **kw: Any) -> list[Node]:
        return await asyncio.to_thread(self._client.nodes, state, **kw)

    async def node(self, name: str, **kw: Any) -> Node | None:
        return await asyncio.to_thread(self._client.node, name, **kw)

    async def queues(self, **kw: Any) -> list[Queue]:
        return await asyncio.to_thread(self._client.queues, **kw)

    async def queue(self, name: str, **kw: Any) -> Queue | None:
        return await asyncio.to_thread(self._client.queue, name, **kw)

    async def subscribe(
        self, callback: Callable[[Change], Any] | None = None, **kw: Any
    ) -> Subscription:
        """As :meth:`jobtap.Client.subscribe`; ``callback`` is optional (iterate the
        subscription instead) and may be a coroutine function."""
        sub = Subscription(asyncio.get_running_loop(), callback)

        def make() -> SyncSubscription:
            s = self._client.subscribe(sub._put, **kw)
            return s

        inner = await asyncio.to_thread(self._subscribe_with_end, make, sub)
        sub._start(inner)
        return sub

    def _subscribe_with_end(self, make: Callable[[], SyncSubscription], sub: Subscription):
        inner = make()
        inner._on_end = lambda: sub._put(_END)
        if inner.closed:  # ended during its initial delivery (the job had finished)
            sub._put(_END)
        return inner

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
        wanted = frozenset([states] if isinstance(states, str) else states)
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        last: dict[str, Job] = {}

        def on_change(change: Change) -> None:
            job = change.record
            last["job"] = job
            if done.done():
                return
            if job.state in wanted:
                done.set_result(job)
            elif change.final or change.type == REMOVED:
                done.set_exception(not_reached(job_id, change, wanted))

        sub = await self.subscribe(on_change, jobs=[job_id], user=user, attrs=("state",), site=site)
        try:
            return await asyncio.wait_for(asyncio.shield(done), timeout)
        except TimeoutError:
            raise wait_timeout(job_id, wanted, timeout, last.get("job")) from None
        finally:
            await sub.close()

    def stream(self, *args: Any, **kw: Any) -> EventStream:
        """As :meth:`jobtap.Client.stream`, for ``async for``."""
        return EventStream(self._client.stream(*args, **kw))

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["Client", "EventStream", "JobtapError", "Subscription"]
