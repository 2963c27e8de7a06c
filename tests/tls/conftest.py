"""Fixtures of the TLS tests: the session's certificates (sim/rig/tls.py)
and real redis-servers serving TLS only, with ACLs (the default user off), that
ask their clients for a certificate (``tls-auth-clients yes``) or not."""

from __future__ import annotations

import pytest

from jobtap.sim.localredis import RedisServer
from sim.rig.tls import PKI, make_pki
from tests.support.acl import AclServer


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


class TlsAclServer(AclServer):
    """An AclServer (admin / ADMIN_PW, the default user off) on a TLS port only."""

    def __init__(self, workdir, pki: PKI, auth_clients: str):
        super().__init__(workdir)
        self.tls = pki.server_files(auth_clients)
        self.pki = pki


@pytest.fixture
def tls_acl_server(tmp_path, pki):
    """Client certificates required, as a site that wants them sets it up."""
    server = TlsAclServer(tmp_path / "redis", pki, "yes").start()
    yield server
    server.stop()


@pytest.fixture
def tls_redis(tmp_path, pki):
    """TLS with no client certificate asked for, and no ACLs."""
    server = RedisServer(tmp_path / "redis", tls=pki.server_files("no")).start()
    yield server
    server.stop()
