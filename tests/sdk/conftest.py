"""Fixtures of the SDK tests: a hermetic environment, a Writer driving the real
Applier, a Client on the test's redis-server (one that counts its
subscriptions), and a Barrier on that client."""

from __future__ import annotations

import pytest

from tests.support.sdk import SITE, Barrier, CountingClient, Writer


@pytest.fixture
def hermetic(monkeypatch, tmp_path):
    """No credential file, no JOBTAP_* settings from the environment."""
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    monkeypatch.delenv("JOBTAP_REDIS", raising=False)
    monkeypatch.delenv("JOBTAP_SITE", raising=False)


@pytest.fixture
def writer(r):
    return Writer(r)


@pytest.fixture
def client(redis_server, hermetic):
    c = CountingClient(redis_server.url, site=SITE, backoff=(0.05, 0.5))
    yield c
    c.close()


@pytest.fixture
def barrier(client, writer):
    """Call it after the thing that must not reach ``client``'s subscriptions;
    once it returns, that thing would have arrived (tests.support.sdk.Barrier)."""
    return Barrier(client, writer)
