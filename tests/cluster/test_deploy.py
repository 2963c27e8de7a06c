"""deploy/cluster/ as an admin would use it: setup.sh renders six nodes, each
started by a real redis-server with only those files; create-cluster.sh joins
them; every replica logs in to its primary as ``replica``; the default user is
off everywhere; ``jobtap acl sync`` with admin.env's URL reaches every node."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest
import redis

from jobtap.sim.localredis import RedisServer, free_port
from sim.rig.paths import ROOT
from sim.rig.wait import eventually
from tests.support.acl import NO_RETRY, cli


class Node(RedisServer):
    """A redis-server started with the rendered files only (plus the test's own
    port, logfile and no persistence)."""

    def __init__(self, workdir, port: int, admin_url: str):
        self.admin_url = admin_url
        super().__init__(
            workdir,
            port=port,
            args=["--include", str(workdir / "jobtap.conf"), "--include",
                  str(workdir / "cluster.conf"), "--cluster-port", str(free_port())],
        )  # fmt: skip

    def client(self, **kw):
        url = self.admin_url.rsplit("@", 1)[0] + f"@127.0.0.1:{self.port}/0"
        return redis.Redis.from_url(url, **kw)


@pytest.mark.timeout(120)
def test_six_nodes_from_the_deploy_files(tmp_path):
    ports = [free_port() for _ in range(6)]
    out = tmp_path / "cluster"
    subprocess.run(
        ["sh", str(ROOT / "deploy/cluster/setup.sh"), str(out), *[f"127.0.0.1:{p}" for p in ports]],
        check=True, capture_output=True,
    )  # fmt: skip
    secrets = out / "secrets"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o700
    admin_url = (secrets / "admin.env").read_text().strip().split("=", 1)[1]
    nodes = [Node(out / f"127.0.0.1-{p}", p, admin_url) for p in ports]
    try:
        for node in nodes:
            node.start()
        made = subprocess.run([str(secrets / "create-cluster.sh")], capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert made.returncode == 0, made.stdout[-1500:]

        def replicas_in_sync() -> bool:
            links = []
            for node in nodes:
                with node.client(decode_responses=True) as c:
                    if "cluster_state:ok" not in c.execute_command("CLUSTER", "INFO"):
                        return False
                    repl = c.info("replication")
                if repl["role"] == "slave":
                    links.append(repl["master_link_status"])
            return links == ["up"] * 3  # logged in to their primaries as `replica`

        eventually(replicas_in_sync, timeout=60, interval=0.2, what="three replicas in sync")
        for node in nodes:
            with pytest.raises(redis.AuthenticationError):
                redis.Redis(port=node.port, retry=NO_RETRY).ping()  # the default user is off
        result = cli("sync", "--redis", admin_url, "--site", "a", "--site", "b",
                     "--users-file", os.devnull, "--secrets-dir", str(secrets))  # fmt: skip
        assert result.exit_code == 0, result.output
        writer_pw = (secrets / "writer.password").read_text().strip()
        for node in nodes:
            assert redis.Redis(port=node.port, username="writer", password=writer_pw,
                               retry=NO_RETRY).ping()  # fmt: skip
            assert "user writer " in (node.dir / "users.acl").read_text()  # saved on each node
        # the replication user is nobody's to grant
        result = cli("grant", "replica", "--redis", admin_url, "--site", "a", "-o",
                     str(tmp_path / "cred"))  # fmt: skip
        assert result.exit_code == 1 and "not made by jobtap acl" in result.output
    finally:
        for node in nodes:
            node.stop(kill=True)
