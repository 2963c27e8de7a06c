"""The PBS hook on the execution host (execjob_epilogue): the first moment PBS
knows a job ended.  It writes the poke itself, marked ``ended``, with poker's
rights, against a real redis-server; whatever goes wrong, the event is
accepted (the hook is run with a stand-in of PBS's ``pbs`` module:
sim/rig/pbs_hook.py)."""

from __future__ import annotations

import pytest

from jobtap.acl.rules import poker_rules, setuser_args
from jobtap.collector.follow.pokes import PokeReader
from jobtap.keys import POKES_MAXLEN, SiteKeys
from jobtap.sim.localredis import free_port
from sim.rig.pbs_hook import run_hook

SITE = "hpc1"
K = SiteKeys(SITE)


@pytest.fixture
def poker_url(redis_server, r):
    r.execute_command("ACL", "SETUSER", "poker", *setuser_args(poker_rules([SITE]), enabled=True),
                      ">pokerpw")  # fmt: skip
    return f"redis://poker:pokerpw@127.0.0.1:{redis_server.port}/0"


def config(url: str, **extra) -> dict:
    return {"site": SITE, "redis": url, "stream": K.pokes, "maxlen": POKES_MAXLEN, **extra}


def test_the_epilogue_pokes_ended_with_pokers_rights(tmp_path, r, poker_url):
    reader = PokeReader(r, K)
    run = run_hook(config(poker_url), tmp_path / "hook.json", "EXECJOB_EPILOGUE", "42.server")
    assert run.accepted == [True] and run.logged == []
    (_id, fields), = r.xrange(K.pokes)  # fmt: skip
    assert fields[b"ids"] == b"42.server" and fields[b"ended"] == b"1"
    assert fields[b"source"]  # the execution host's name
    reader.read(block_ms=100)
    assert reader.take(10) == ["42.server"] and reader.ended == {"42.server"}


def test_a_database_number_is_selected(tmp_path, redis_server):
    url = f"redis://127.0.0.1:{redis_server.port}/2"
    run = run_hook(config(url), tmp_path / "hook.json", "EXECJOB_EPILOGUE", "43.server")
    assert run.accepted == [True] and run.logged == []
    assert redis_server.client(db=2).xlen(K.pokes) == 1


@pytest.mark.parametrize(
    ("url", "extra", "message"),
    [
        ("redis://127.0.0.1:{free}/0", {}, "refused"),  # Redis away
        ("redis://poker:wrong@127.0.0.1:{port}/0", {}, "WRONGPASS"),
        ("rediss://127.0.0.1:{port}/0", {}, "no TLS handshake"),  # TLS to a plain port
        ("redis://127.0.0.1:{port}/0", {"stream": ""}, "no poke stream"),
        ("redis://poker:pokerpw@127.0.0.1:{port}/0", {"stream": "jobtap:{other}:pokes"},
         "NOPERM"),
    ],
)  # fmt: skip
def test_failures_are_logged_and_the_event_accepted(tmp_path, redis_server, poker_url, r,
                                                     url, extra, message):  # fmt: skip
    conf = config(url.format(port=redis_server.port, free=free_port()), **extra)
    run = run_hook(conf, tmp_path / "hook.json", "EXECJOB_EPILOGUE", "44.server")
    assert run.accepted == [True]
    assert len(run.logged) == 1 and message in run.logged[0], run.logged
    assert r.xlen(K.pokes) == 0


@pytest.mark.parametrize("event", ["RUNJOB", "MODIFYJOB"])
def test_server_events_write_the_poke_themselves(tmp_path, r, poker_url, event):
    """runjob and modifyjob on the server: the poke is written by the hook, no
    process started (a burst of job starts once queued 300 `jobtap poke`s)."""
    conf = config(poker_url, jobtap=str(tmp_path / "no-such-jobtap"))
    run = run_hook(conf, tmp_path / "hook.json", event, "46.server")
    assert run.accepted == [True] and run.logged == []
    (_id, fields), = r.xrange(K.pokes)  # fmt: skip
    assert fields[b"ids"] == b"46.server" and b"ended" not in fields and b"record" not in fields


def test_a_configuration_without_the_stream_pokes_in_the_background(tmp_path, redis_server, r):
    """A configuration from before the hook wrote pokes itself (no "stream"):
    `jobtap poke` as a detached process (the real one) finds the stream."""
    import shutil
    import sys

    from sim.rig.wait import eventually

    jobtap = shutil.which("jobtap", path=str(__import__("pathlib").Path(sys.executable).parent))
    conf = config(f"redis://127.0.0.1:{redis_server.port}/0", jobtap=jobtap, stream="")
    run = run_hook(conf, tmp_path / "hook.json", "JOBOBIT", "45.server")
    assert run.accepted == [True] and run.logged == []
    entries = eventually(lambda: r.xrange(K.pokes), what="the background poke")
    assert entries[0][1][b"ids"] == b"45.server" and b"ended" not in entries[0][1]
