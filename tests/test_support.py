"""The test helpers themselves: eventually() waits the way the tests rely on,
the reaper really waits for a command's detached descendants, and free_port()
never gives one port twice."""

from __future__ import annotations

import itertools
import time

import pytest

from jobtap.sim.localredis import LOWEST_PORT, free_port
from sim.rig.wait import eventually
from tests.support.reaper import run_reaped


def test_eventually_returns_the_first_true_value():
    calls = itertools.count(1)
    assert eventually(lambda: next(calls) >= 3 and "third", interval=0) == "third"
    assert next(calls) == 4  # not called again once true


def test_eventually_raises_the_last_assertion_error_after_the_timeout():
    seen = []

    def check() -> bool:
        seen.append(len(seen))
        raise AssertionError(f"attempt {seen[-1]}")

    started = time.monotonic()
    with pytest.raises(AssertionError) as info:
        eventually(check, timeout=0.2, interval=0.01)
    assert time.monotonic() - started >= 0.2
    assert len(seen) >= 2 and str(info.value) == f"attempt {seen[-1]}"


def test_eventually_names_what_stayed_false():
    with pytest.raises(AssertionError, match=r"^the flag: not true within 0\.05s \(last: 0\)$"):
        eventually(lambda: 0, timeout=0.05, interval=0.01, what="the flag")


def test_eventually_propagates_other_exceptions_at_once():
    calls = []

    def check() -> bool:
        calls.append(1)
        raise KeyError("broken")

    with pytest.raises(KeyError, match="broken"):
        eventually(check, timeout=10)
    assert calls == [1]


def test_run_reaped_returns_after_the_detached_descendants(tmp_path):
    """A shell that backgrounds a child and exits at once: run_reaped returns
    only once that child has written its file, and with the shell's status."""
    out = tmp_path / "late"
    script = f"(sleep 0.3; echo done > {out}) >/dev/null 2>&1 & exit 3"
    done = run_reaped(["/bin/sh", "-c", script], timeout=30)
    assert done.returncode == 3
    assert out.read_text() == "done\n"


def test_run_reaped_reports_a_missing_command():
    done = run_reaped(["/nonexistent/command"], capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "nonexistent" in done.stderr


def test_free_port_gives_no_port_twice_and_keeps_to_its_xdist_workers_slice(monkeypatch):
    """A cluster picks all its ports before it binds any: a port given twice
    once made a node's bus fail with "Address already in use"."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    ports = [free_port() for _ in range(1000)]  # none bound: each only checked free
    assert len(set(ports)) == len(ports)
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        high = int(f.read().split()[0])
    span = (high - LOWEST_PORT) // 4
    assert all(LOWEST_PORT + span <= p < LOWEST_PORT + 2 * span for p in ports)
