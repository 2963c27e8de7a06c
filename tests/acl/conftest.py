"""Fixtures of the ACL tests: a redis-server whose default user is off, its
admin, a writer as the ``writer`` service user, and a hermetic environment."""

from __future__ import annotations

import pytest

from jobtap.acl import rules as acl
from tests.support.acl import WRITER_PW, AclServer, Writer, set_up_users


@pytest.fixture
def acl_server(tmp_path):
    server = AclServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def admin(acl_server):
    client = acl_server.client(decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def writer(acl_server):
    """Writes as the ``writer`` user (created here with ``operator``)."""
    set_up_users(acl_server, [])
    client = acl_server.as_user(acl.WRITER, WRITER_PW)
    yield Writer(client)
    client.close()


@pytest.fixture
def hermetic(monkeypatch, tmp_path):
    """No JOBTAP_* settings from the environment; HOME is a fresh directory."""
    for var in ("JOBTAP_REDIS", "JOBTAP_SITE", "JOBTAP_CREDENTIALS", "JOBTAP_ADMIN_REDIS"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home
