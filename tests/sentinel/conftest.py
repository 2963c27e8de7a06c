"""Fixtures of the Sentinel tests: a real queue Redis under Sentinel (a
primary, two replicas, three Sentinels; sim/rig/sentinel.py) for each
test, since a test kills or pauses its nodes.

Two replicas, as docs/operations.md advises: shipments wait for one replica's
acknowledgement, so after the primary's loss the promoted replica needs another
replica to go on shipping without waiting for the lost node's return."""

from __future__ import annotations

import pytest

from jobtap.connection import redis_from_url
from sim.rig.sentinel import LocalSentinel


@pytest.fixture
def sentinel(tmp_path):
    s = LocalSentinel(tmp_path / "sentinel", replicas=2).start()
    yield s
    s.stop()


@pytest.fixture
def queues(sentinel):
    """A client of the queue primary, made from the redis+sentinel:// URL as
    the collector and the workers make theirs."""
    client = redis_from_url(sentinel.url, socket_timeout=5)
    yield client
    client.close()
