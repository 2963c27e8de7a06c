"""wait(): returns at once or when the state is reached, raises clear errors."""

from __future__ import annotations

import threading
import time

import pytest

import jobtap
from sim.rig.wait import eventually
from tests.support.sdk import SITE, once_subscribed


def later(delay: float, fn, *args, **kw) -> threading.Thread:
    """``fn`` runs ``delay`` seconds from now: the scenario of a job that moves on
    while someone waits, at a time the test measures.  (To act as soon as the
    wait is in place, use ``once_subscribed``.)"""

    def run():
        time.sleep(delay)
        fn(*args, **kw)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_returns_at_once_when_already_terminal(client, writer):
    writer.job("1.pbs")
    writer.finish("1.pbs", exit_status=4)
    started = time.monotonic()
    job = client.wait("1.pbs", timeout=5)
    assert time.monotonic() - started < 1
    assert isinstance(job, jobtap.Job) and job.state == "completed" and job.exit_status == 4


def test_blocks_until_terminal(client, writer):
    writer.job("1.pbs")
    t = later(0.3, writer.job, "1.pbs", state="running")
    t2 = later(0.6, writer.finish, "1.pbs", "failed", 1)
    started = time.monotonic()
    job = client.wait("1.pbs", timeout=10)
    assert time.monotonic() - started >= 0.5
    assert job.state == "failed" and job.final
    t.join()
    t2.join()


def test_other_states(client, writer):
    writer.job("1.pbs")
    t = once_subscribed(client, 1, writer.job, "1.pbs", state="running")
    job = client.wait("1.pbs", "running", timeout=10)
    assert job.state == "running" and not job.final
    t.join()


def test_timeout_is_a_clear_timeout_error(client, writer):
    writer.job("1.pbs")
    started = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        client.wait("1.pbs", timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert isinstance(info.value, jobtap.WaitTimeout)
    assert "1.pbs did not reach cancelled/completed/failed within 0.3 s" in str(info.value)
    assert "last state: queued" in str(info.value) and info.value.job.state == "queued"


def test_finished_in_another_state_raises_state_not_reached(client, writer):
    writer.job("1.pbs")
    t = once_subscribed(client, 1, writer.finish, "1.pbs", "completed", 0)
    with pytest.raises(jobtap.StateNotReached, match="finished as completed, not running"):
        client.wait("1.pbs", "running", timeout=10)
    t.join()


def test_vanished_job_ends_the_wait(client, writer):
    writer.job("1.pbs", state="running")
    t = once_subscribed(client, 1, writer.vanish, "1.pbs")
    with pytest.raises(
        jobtap.StateNotReached, match="finished as unknown, reason: vanished"
    ) as info:
        client.wait("1.pbs", timeout=10)
    assert info.value.job.reason == "vanished"
    t.join()


def test_unknown_job(client, writer):
    with pytest.raises(jobtap.JobNotFound, match="not in the cache"):
        client.wait("404.pbs", timeout=1)


def test_job_not_collected_yet_with_its_user(client, writer):
    t = once_subscribed(
        client, 1, writer.job, "5.pbs", user="bob", state="completed", exit_status=0
    )
    job = client.wait("5.pbs", timeout=10, user="bob")
    assert job.state == "completed" and job.user == "bob"
    t.join()


def test_many_waits_share_the_client(client, writer):
    for i in range(20):
        writer.job(f"{i}.pbs")
    results: dict[str, str] = {}

    def waiter(jid):
        results[jid] = client.wait(jid, timeout=10).state

    threads = [threading.Thread(target=waiter, args=(f"{i}.pbs",)) for i in range(20)]
    for t in threads:
        t.start()
    eventually(lambda: client.subscribed == 20, what="the 20 waits in place")
    writer.jobs_at_once(
        [dict(writer.jobs[f"{i}.pbs"], state="completed", exit_status=0) for i in range(20)]
    )
    for t in threads:
        t.join(15)
    assert results == {f"{i}.pbs": "completed" for i in range(20)}


def test_closing_the_client_ends_a_wait(client, writer):
    writer.job("1.pbs")
    t = once_subscribed(client, 1, client.close)
    with pytest.raises(jobtap.JobtapError, match="client was closed"):
        client.wait("1.pbs", timeout=10)
    t.join()


def test_an_unknown_state_is_an_error_naming_the_states(client, writer, redis_server):
    """A mistyped state matches no job: `jobs()` would say [] and `wait()` would
    last until its timeout.  Both refuse it at once, sync and asyncio alike."""
    import asyncio

    from jobtap import aio

    writer.job("1.pbs", state="running")
    assert [j.id for j in client.jobs(state="running")] == ["1.pbs"]
    calls = [
        lambda: client.jobs(state="runing"),
        lambda: client.jobs(user="alice", state=["queued", "runing"]),
        lambda: client.wait("1.pbs", "runing", timeout=30),
        lambda: client.wait("1.pbs", [], timeout=30),
    ]
    for call in calls:
        with pytest.raises(jobtap.ConfigError, match="the job states are cancelled, completed"):
            call()

    async def from_asyncio() -> None:
        async with aio.Client(redis_server.url, site=SITE) as c:
            with pytest.raises(ValueError, match="unknown job state 'runing'"):
                await c.jobs(state="runing")
            with pytest.raises(jobtap.ConfigError, match="unknown job state 'runing'"):
                await c.wait("1.pbs", "runing", timeout=30)

    asyncio.run(from_asyncio())
