"""Fixtures every part of the suite uses: a real redis-server on a free loopback
port, started fresh for each test (so a test may kill, restart or wipe it), and
clients of it."""

from __future__ import annotations

import pytest

from jobtap.sim.localredis import RedisServer

# The suite never skips (tests/support/noskip.py).
pytest_plugins = ["tests.support.noskip"]


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def durable_redis(tmp_path):
    """A redis-server that keeps its data across a clean restart (AOF)."""
    server = RedisServer(tmp_path / "redis", args=["--appendonly", "yes"]).start()
    yield server
    server.stop()


@pytest.fixture
def reloadable_redis(tmp_path):
    """A redis-server whose data a test may send back to an older snapshot
    without restarting it (sim.rig.redisloss.reload_from)."""
    server = RedisServer(tmp_path / "redis", args=["--enable-debug-command", "local"]).start()
    yield server
    server.stop()


@pytest.fixture
def r(redis_server):
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture
def rd(redis_server):
    """A client that decodes replies to str."""
    client = redis_server.client(decode_responses=True)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def collector_state_home(tmp_path, monkeypatch):
    """A collector a test starts (in-process or as `jobtap collector`) keeps its
    host state (the site's epoch and last cycle) under the test's own directory,
    never in /var/lib/jobtap or ~/.local/state, and starts with none."""
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def pytest_itemcollected(item):
    """Tests of each real Slurm on this machine (22.05, 24.11) run on one xdist
    worker, one after another (make test: --dist loadgroup); the others spread out.  Marked
    as each is collected, before xdist reads the groups."""
    if "slurm" in item.fixturenames or "tests/live/" in item.nodeid:
        callspec = getattr(item, "callspec", None)
        release = callspec.params.get("slurm", "22.05") if callspec else "22.05"
        item.add_marker(pytest.mark.xdist_group(f"slurm-{release}"))
