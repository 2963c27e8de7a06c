from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from jobtap.cli.localredis import RedisServer

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def fixtures_dir() -> Path:
    return Path(os.environ.get("JOBTAP_FIXTURES", ROOT.parent / "shared" / "fixtures"))


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
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
