"""jobtap.aio: the same API for asyncio (async for, awaitable wait)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import jobtap
import jobtap.aio
from tests.support.ids import eid
from tests.support.sdk import SITE, K


def run(coro, timeout: float = 20):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_reads_subscription_iteration_and_wait(redis_server, hermetic, writer):
    writer.job("1.pbs")
    writer.job("2.pbs", user="bob")

    async def main():
        async with jobtap.aio.Client(redis_server.url, site=SITE) as client:
            job = await client.job("1.pbs")
            assert isinstance(job, jobtap.Job) and job.state == "queued"
            assert [j.id for j in await client.jobs(user="alice")] == ["1.pbs"]
            sub = await client.subscribe(jobs=["1.pbs"])
            loop = asyncio.get_running_loop()
            loop.call_later(0.1, lambda: writer.job("1.pbs", state="running"))
            loop.call_later(0.2, writer.finish, "1.pbs")
            seen = [(c.type, c.version) async for c in sub]  # ends after the final
            assert seen == [("initial", 1), ("state", 2), ("final", 3)]
            assert sub.closed
            # an awaitable wait; the loop stays free meanwhile
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            loop.call_later(0.3, writer.finish, "2.pbs", "cancelled", 271)
            done = await client.wait("2.pbs", timeout=10)
            ticker.cancel()
            assert done.state == "cancelled" and ticks >= 10
            with pytest.raises(jobtap.WaitTimeout):
                await client.wait("404.pbs", timeout=0.2, user="alice")

    run(main())


def test_coroutine_callbacks_run_on_the_loop_in_order(redis_server, hermetic, writer):
    writer.job("1.pbs")

    async def main():
        async with jobtap.aio.Client(redis_server.url, site=SITE) as client:
            got = []
            loop_thread = threading.current_thread()
            finished = asyncio.Event()

            async def on_change(change):
                assert threading.current_thread() is loop_thread
                await asyncio.sleep(0.01)  # slow, but order is kept
                got.append(change.version)
                if change.final:
                    finished.set()

            sub = await client.subscribe(on_change, jobs=["1.pbs"])
            for n in range(5):
                await asyncio.to_thread(writer.job, "1.pbs", comment=str(n))
            await asyncio.to_thread(writer.finish, "1.pbs")
            await finished.wait()
            assert got == [1, 2, 3, 4, 5, 6, 7]
            await sub.close()

    run(main())


def test_async_stream_with_a_group(redis_server, hermetic, writer, r):
    for i in range(30):
        writer.job(f"{i}.pbs")

    async def main():
        async with jobtap.aio.Client(redis_server.url, site=SITE) as client:
            stream = client.stream(group="g", since="0", count=8, idle_timeout=0.5, block=0.1)
            ids = []
            async for change in stream:
                ids.append(change.id)
                if len(ids) == 20:
                    break
            await stream.close()
            # handed out: acked; fetched but not handed out: still pending
            assert r.xpending(K.events, "g")["pending"] == 4
            rest = [
                c.id
                async for c in client.stream(group="g", count=8, claim_idle=0.1, idle_timeout=1.0)
            ]
            return ids, rest

    ids, rest = run(main())
    assert sorted(ids + rest) == sorted(eid(r, SITE, f"{i}.pbs", 1) for i in range(30))
