"""deploy/redis/ over TLS as an admin would use it: make-certs.sh makes the CA,
the server's certificate and the client certificates, setup.sh renders
jobtap.conf and tls.conf (client certificates required) and an admin.env with
a rediss:// URL; a real redis-server started with only those files serves TLS
and no plain text, and `jobtap acl sync` and `jobtap status` work with the
URLs it gives."""

from __future__ import annotations

import os
import subprocess

import redis
from click.testing import CliRunner

from jobtap.cli.acl import acl as acl_cli
from jobtap.cli.localredis import RedisServer, TLSFiles, free_port
from jobtap.cli.status import status as status_cli
from jobtap.connection import redis_from_url
from tests.support.acl import NO_RETRY
from tests.support.paths import ROOT
from tests.support.tls import Pair, tls_url

MAKE = ROOT / "deploy/redis/make-certs.sh"


class Rendered(RedisServer):
    """A redis-server from the rendered files only (the test's own dir and log)."""

    def __init__(self, workdir, conf, port: int, tls: TLSFiles, admin_url: str):
        self.admin_url = admin_url
        super().__init__(workdir, port=port, tls=tls,
                         args=["--include", str(conf / "jobtap.conf"),
                               "--include", str(conf / "tls.conf")])  # fmt: skip

    def client(self, **kw):
        kw.pop("ssl_cert_reqs", None), kw.pop("ssl_check_hostname", None)
        return redis_from_url(self.admin_url, **kw)


def test_tls_from_the_deploy_files(tmp_path):
    certs = tmp_path / "tls"
    for args in (["ca"], ["server", "redis", "127.0.0.1", "localhost"],
                 ["client", "admin"], ["client", "writer"]):  # fmt: skip
        subprocess.run(["sh", str(MAKE), str(certs), *args], check=True, capture_output=True)
    port = free_port()
    conf, secrets = tmp_path / "conf", tmp_path / "secrets"
    env = {**os.environ, "JOBTAP_REDIS_PORT": str(port), "JOBTAP_TLS_DIR": str(certs),
           "JOBTAP_TLS_AUTH_CLIENTS": "yes"}  # fmt: skip
    subprocess.run(["sh", str(ROOT / "deploy/redis/setup.sh"), "127.0.0.1", str(conf),
                    str(secrets)], check=True, capture_output=True, env=env)  # fmt: skip
    admin_url = (secrets / "admin.env").read_text().strip().split("=", 1)[1]
    assert admin_url.startswith("rediss://admin:") and "ssl_certfile=" in admin_url
    tls = TLSFiles(certs / "redis.crt", certs / "redis.key", certs / "ca.crt", "yes",
                   certs / "admin.crt", certs / "admin.key")  # fmt: skip
    server = Rendered(tmp_path / "data", conf, port, tls, admin_url).start()
    try:
        runner = CliRunner()
        done = runner.invoke(acl_cli, ["sync", "--redis", admin_url, "--site", "hpc1",
                                       "--users-file", os.devnull,
                                       "--secrets-dir", str(secrets)])  # fmt: skip
        assert done.exit_code == 0, done.output
        password = (secrets / "writer.password").read_text().strip()
        cert = Pair(certs / "writer.crt", certs / "writer.key")
        writer = tls_url(port, certs / "ca.crt", cert=cert, user="writer", password=password)
        done = runner.invoke(status_cli, ["--redis", writer, "--site", "hpc1"])
        # over TLS, with the writer's certificate and password, to the site's meta
        assert "no collector has written site 'hpc1'" in done.output, done.output
        # no plain-text port: the same port refuses plain text
        try:
            redis.Redis(port=port, socket_timeout=2, retry=NO_RETRY).ping()
            raise AssertionError("plain text answered")
        except redis.ConnectionError:
            pass
    finally:
        server.stop()
