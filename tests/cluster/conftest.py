"""Fixtures of the Redis Cluster tests: one real local cluster (3 primaries, 3
replicas) for the whole session, emptied before each test, and clients of it.

A test that kills or sleeps a node starts a cluster of its own (see
test_failover.py), so that this one stays whole for the others."""

from __future__ import annotations

import pytest

from jobtap.connection import open_redis
from sim.rig.cluster import LocalCluster, flush


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = LocalCluster(tmp_path_factory.mktemp("cluster")).start()
    yield c
    c.stop()


@pytest.fixture
def clean_cluster(cluster):
    """The session's cluster, empty."""
    flush(cluster)
    return cluster


@pytest.fixture
def rc(clean_cluster):
    """A cluster client made the way jobtap makes them (from one node's URL)."""
    client = open_redis(clean_cluster.url)
    yield client
    client.close()
