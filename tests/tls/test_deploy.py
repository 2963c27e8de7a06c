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
from jobtap.cli.status import status as status_cli
from jobtap.connection import redis_from_url
from jobtap.sim.localredis import RedisServer, TLSFiles, free_port
from sim.rig.paths import ROOT
from sim.rig.tls import Pair, tls_url
from tests.support.acl import NO_RETRY

MAKE = ROOT / "deploy/redis/make-certs.sh"


class Rendered(RedisServer):
    """A redis-server from rendered files only (plus the test's own data dir and
    log), answering its admin's URL."""

    def __init__(self, workdir, includes, port: int, tls: TLSFiles, admin_url: str, args=()):
        self.admin_url = admin_url
        conf = [a for f in includes for a in ("--include", str(f))]
        super().__init__(workdir, port=port, tls=tls, args=[*conf, *args])

    def client(self, **kw):
        kw = {k: v for k, v in kw.items() if not k.startswith("ssl_")}
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
    includes = [conf / "jobtap.conf", conf / "tls.conf"]
    server = Rendered(tmp_path / "data", includes, port, tls, admin_url).start()
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


def test_cluster_deploy_files_over_tls(tmp_path):
    """deploy/cluster/setup.sh with JOBTAP_TLS_DIR: each node's tls.conf (TLS
    replication and cluster bus too), a rediss:// admin.env and a
    create-cluster.sh speaking TLS; a node started from its files answers the
    admin over TLS only (the whole cluster over TLS runs in test_cluster.py)."""
    certs = tmp_path / "tls"
    ports = [free_port() for _ in range(6)]
    for args in (["ca"], ["server", "redis", "127.0.0.1"], ["client", "admin"]):
        subprocess.run(["sh", str(MAKE), str(certs), *args], check=True, capture_output=True)
    out = tmp_path / "cluster"
    env = {**os.environ, "JOBTAP_TLS_DIR": str(certs), "JOBTAP_TLS_AUTH_CLIENTS": "yes"}
    nodes = [f"127.0.0.1:{p}" for p in ports]
    subprocess.run(["sh", str(ROOT / "deploy/cluster/setup.sh"), str(out), *nodes],
                   check=True, capture_output=True, env=env)  # fmt: skip
    admin_url = (out / "secrets/admin.env").read_text().strip().split("=", 1)[1]
    assert admin_url.startswith("rediss://admin:") and "ssl_certfile=" in admin_url
    create = (out / "secrets/create-cluster.sh").read_text()
    assert f"--tls --cacert '{certs}/ca.crt' --cert '{certs}/admin.crt'" in create
    node = out / f"127.0.0.1-{ports[0]}"
    conf = (node / "tls.conf").read_text()
    assert "tls-replication yes" in conf and "tls-cluster yes" in conf and "port 0" in conf
    tls = TLSFiles(certs / "redis.crt", certs / "redis.key", certs / "ca.crt", "yes",
                   certs / "admin.crt", certs / "admin.key")  # fmt: skip
    includes = [node / "jobtap.conf", node / "tls.conf", node / "cluster.conf"]
    args = ["--cluster-port", str(free_port()), "--dir", str(node)]
    server = Rendered(node / "data", includes, ports[0], tls, admin_url, args)
    server.start()
    try:
        with redis_from_url(admin_url, decode_responses=True) as c:
            assert c.info("cluster")["cluster_enabled"] == 1
    finally:
        server.stop()
