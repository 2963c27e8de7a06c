"""The other ways in over TLS: ``jobtap.aio`` (its subscription and reads), a
``unix://`` socket beside a TLS port, and the credential file `jobtap acl
grant` writes from an admin URL with a client certificate (the CA is kept, the
admin's certificate is not)."""

from __future__ import annotations

import asyncio

import jobtap
import jobtap.aio
from jobtap.cli.acl import public_url
from jobtap.sim.localredis import RedisServer
from tests.support.sdk import SITE, Writer


def test_aio_client_over_tls(tls_redis, tmp_path, monkeypatch):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "none"))
    writer_client = tls_redis.client()
    writer = Writer(writer_client)
    writer.job("1.pbs", user="alice")

    async def main() -> list[str]:
        async with jobtap.aio.Client(tls_redis.url, site=SITE) as client:
            job = await client.job("1.pbs")
            assert job is not None and job.user == "alice"
            seen: list[str] = []
            async with await client.subscribe(user="alice") as sub:
                await asyncio.to_thread(writer.job, "2.pbs", user="alice")
                async for change in sub:
                    seen.append(change.object_id)
                    if change.object_id == "2.pbs":
                        return seen
        return seen

    try:
        assert "2.pbs" in asyncio.run(asyncio.wait_for(main(), 20))
    finally:
        writer_client.close()


def test_unix_socket_beside_tls(tmp_path, pki, monkeypatch):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "none"))
    sock = tmp_path / "redis.sock"
    unix = ["--unixsocket", str(sock), "--unixsocketperm", "700"]
    srv = RedisServer(tmp_path / "redis", tls=pki.server_files("yes"), args=unix).start()
    try:
        with jobtap.Client(f"unix://{sock}", site=SITE) as client:
            assert client.job("1.pbs") is None
    finally:
        srv.stop()


def test_users_credentials_keep_the_ca_not_the_admins_certificate():
    tls = "/etc/jobtap/tls"
    admin = (f"rediss://admin:pw@redis1:6379/0?ssl_ca_certs={tls}/ca.crt"
             f"&ssl_certfile={tls}/admin.crt&ssl_keyfile={tls}/admin.key")  # fmt: skip
    assert public_url(admin) == f"rediss://redis1:6379/0?ssl_ca_certs={tls}/ca.crt"
