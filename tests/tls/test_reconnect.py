"""A subscriber whose Redis comes back with a certificate it cannot trust (here:
an expired one) says so at every attempt, backing off, instead of retrying in
silence, and carries on once a good certificate is served again.  A server
certificate rotated live (CONFIG SET tls-cert-file) serves new connections
while the established ones go on."""

from __future__ import annotations

import logging

import pytest

import jobtap
from jobtap.errors import TLSFailed
from jobtap.sim.localredis import RedisServer
from sim.rig.tls import make_pki
from sim.rig.wait import eventually
from tests.support.sdk import SITE, Recorder, Writer


def test_subscriber_says_why_at_each_attempt_and_recovers(tmp_path, pki, caplog, monkeypatch):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "none"))
    srv = RedisServer(tmp_path / "redis", tls=pki.server_files("no")).start()
    writer_client = srv.client()
    try:
        writer = Writer(writer_client)
        got = Recorder()
        with jobtap.Client(srv.url, site=SITE) as client:
            client.subscribe(got, user="alice")
            writer.job("1.pbs", user="alice")
            got.wait_for(lambda cs: any(c.object_id == "1.pbs" for c in cs))
            caplog.set_level(logging.WARNING, logger="jobtap.sdk")
            srv.stop()
            srv.tls = pki.server_files("no", expired=True)
            srv.start()

            def said() -> list[str]:
                return [r.getMessage() for r in caplog.records if "has expired" in r.getMessage()]

            lines = eventually(lambda: len(said()) >= 2 and said(), timeout=10, what="warnings")
            assert all("trying again in" in line and "\n" not in line for line in lines), lines
            srv.stop()
            srv.tls = pki.server_files("no")
            srv.start()
            writer.job("2.pbs", user="alice")
            got.wait_for(lambda cs: any(c.object_id == "2.pbs" for c in cs), timeout=15)
    finally:
        writer_client.close()
        srv.stop()


def test_server_certificate_rotated_live(tmp_path, pki):
    srv = RedisServer(tmp_path / "redis", tls=pki.server_files("no")).start()
    try:
        old = srv.client()
        old.set("k", "v")
        # a new key and certificate from a new CA: clients trust both CAs meanwhile
        new = make_pki(tmp_path / "new-pki")
        both = tmp_path / "both-cas.crt"
        both.write_text(pki.ca.cert.read_text() + new.ca.cert.read_text())
        admin = srv.client(ssl_ca_certs=str(both))
        # one CONFIG SET for all three (Redis 7): a certificate and key that do not
        # match, even for an instant, are refused
        admin.execute_command("CONFIG", "SET", "tls-cert-file", str(new.server.cert),
                              "tls-key-file", str(new.server.key),
                              "tls-ca-cert-file", str(both))  # fmt: skip
        with jobtap.Client(srv.url.replace(str(pki.ca.cert), str(new.ca.cert)), site=SITE) as c:
            assert c.job("1.pbs") is None  # a new connection: the new certificate
        assert old.get("k") == b"v"  # the established connection goes on
        with jobtap.Client(srv.url, site=SITE) as c, pytest.raises(TLSFailed):
            c.job("1.pbs")  # the old CA alone no longer does
    finally:
        srv.stop()
