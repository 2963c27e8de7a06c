"""The SDK's public surface: the names `jobtap` exports, one exception hierarchy,
the asyncio client's signatures, and the errors a tool author can meet."""

from __future__ import annotations

import asyncio
import inspect
import pkgutil
import threading
from importlib import import_module
from typing import get_type_hints

import pytest

import jobtap
import jobtap.aio
from jobtap import errors, events
from sim.rig.wait import eventually
from tests.support.sdk import SITE, Recorder

SDK_MODULES = [
    import_module(f"jobtap.{m.name}") for m in pkgutil.iter_modules(jobtap.__path__) if not m.ispkg
]


def test_every_exported_name_resolves_and_dir_lists_it():
    assert len(set(jobtap.__all__)) == len(jobtap.__all__)
    for name in jobtap.__all__:
        assert getattr(jobtap, name) is not None, name
    assert set(jobtap.__all__) <= set(dir(jobtap))
    with pytest.raises(AttributeError, match="module 'jobtap' has no attribute 'Nope'"):
        _ = jobtap.Nope  # type: ignore[attr-defined]


def test_every_change_type_is_exported():
    assert set(events.CHANGE_TYPES) == {*events.EVENT_TYPES, "initial", "resync"}
    exported = {getattr(jobtap, n) for n in jobtap.__all__ if isinstance(getattr(jobtap, n), str)}
    assert set(events.CHANGE_TYPES) <= exported
    assert (jobtap.NEW, jobtap.STATE, jobtap.UPDATE, jobtap.FINAL, jobtap.REMOVED) == (
        events.EVENT_TYPES
    )
    assert jobtap.CHANGE_TYPES == events.CHANGE_TYPES


def test_one_exception_hierarchy():
    defined = [
        obj
        for module in SDK_MODULES
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == module.__name__
    ]
    assert {e.__name__ for e in defined} >= {"JobtapError", "BadName", "WaitTimeout"}
    public = [e for e in defined if not e.__name__.startswith("_")]
    assert all(issubclass(e, jobtap.JobtapError) for e in public), public
    in_errors = {
        e for e in vars(errors).values() if inspect.isclass(e) and issubclass(e, Exception)
    }
    assert in_errors == set(public)  # all of them in errors.py
    assert in_errors <= {getattr(jobtap, n) for n in jobtap.__all__}  # and exported
    assert jobtap.keys.BadName is jobtap.BadName and issubclass(jobtap.BadName, ValueError)


def _parameters(fn) -> list[tuple[str, object, object, object]]:
    hints = get_type_hints(fn)
    return [
        (p.name, p.kind, p.default, hints.get(p.name))
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self"
    ]


@pytest.mark.parametrize(
    "name",
    ["__init__", "job", "jobs", "native", "node", "nodes", "queue", "queues", "stream", "wait"],
)
def test_the_asyncio_client_has_the_sync_clients_signatures(name):
    sync, aio = getattr(jobtap.Client, name), getattr(jobtap.aio.Client, name)
    assert _parameters(aio) == _parameters(sync)
    if name not in ("__init__", "stream"):
        assert inspect.iscoroutinefunction(aio)
        assert get_type_hints(aio)["return"] == get_type_hints(sync)["return"]


def test_the_asyncio_subscribe_takes_the_sync_options_and_an_optional_callback():
    sync = _parameters(jobtap.Client.subscribe)
    aio = _parameters(jobtap.aio.Client.subscribe)
    assert aio[1:] == sync[1:]
    assert aio[0][0] == "callback" and aio[0][2] is None
    pass_through = {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    for name, fn in vars(jobtap.aio.Client).items():
        if inspect.isfunction(fn) and (name == "__init__" or not name.startswith("_")):
            kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
            assert not kinds & pass_through, name


def test_done_callbacks_run_when_the_subscription_ends(client, writer):
    writer.job("1.pbs")
    sub = client.subscribe(Recorder(), jobs=["1.pbs"])
    ended = []
    sub.add_done_callback(lambda: ended.append("first"))
    writer.finish("1.pbs")
    assert sub.wait_closed(10)
    assert ended == ["first"]
    sub.add_done_callback(lambda: ended.append("late"))  # already ended: at once
    assert ended == ["first", "late"]
    assert sub.error is None and sub.delivered == 2 and sub.resyncs == 0


def test_a_failed_ack_raises_the_sdks_error_not_redis_pys(client, writer, redis_server):
    writer.job("1.pbs")
    stream = client.stream(group="g", since="0", idle_timeout=1.0)
    assert next(stream).object_id == "1.pbs"
    redis_server.stop()
    with pytest.raises(jobtap.RedisUnavailable):
        stream.ack()
    stream.close()  # logs the failed ack, raises nothing


def test_the_asyncio_client_passes_its_options_through(redis_server, hermetic, writer):
    writer.job("1.pbs", user="bob")
    writer.node("n1")

    async def main() -> None:
        async with jobtap.aio.Client(redis_server.url, site=SITE, timeout=3.0) as client:
            assert client.sync.timeout == 3.0
            assert [j.id for j in await client.jobs("bob", finished=False, site=SITE)] == ["1.pbs"]
            assert (await client.job("1.pbs", user="bob", site=SITE)).user == "bob"
            assert [n.id for n in await client.nodes("free", site=SITE)] == ["n1"]
            sub = await client.subscribe(kinds=("node",), initial=True, site=SITE)
            first = await asyncio.wait_for(sub.__anext__(), 5)
            assert (first.type, first.kind) == (jobtap.INITIAL, "node")
            await sub.close()
            async with client.stream(since="0", idle_timeout=0.3, count=1) as stream:
                assert [c.object_id async for c in stream] == ["1.pbs", "n1"]

    asyncio.run(main())


def test_interrupt_ends_an_iteration_blocked_in_another_thread(client, writer):
    writer.job("1.pbs")
    stream = client.stream(since="0", block=0.1)  # no idle timeout: would block for ever
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.extend(c.object_id for c in stream))
    reader.start()
    eventually(lambda: got == ["1.pbs"], what="the first event")
    stream.interrupt()
    reader.join(10)
    assert not reader.is_alive() and got == ["1.pbs"]
