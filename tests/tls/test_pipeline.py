"""The whole pipeline over TLS, on a real redis-server that serves TLS only and
requires client certificates (``tls-auth-clients yes``) and ACL users: `jobtap
acl` makes the users, the simulated collector and a real worker run as
``writer`` with the service certificate, `jobtap poke` as ``poker``, `jobtap
status` as ``operator``, and alice, with her credential file and her own
certificate, receives her jobs' events by subscription and reads her stream."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

from click.testing import CliRunner

import jobtap
from jobtap.acl import rules as acl
from jobtap.cli.acl import acl as acl_cli
from jobtap.cli.status import status as status_cli
from sim.rig.paths import ROOT
from sim.rig.tls import tls_url
from sim.rig.wait import eventually
from tests.support.acl import ADMIN_PW, SITE, K

SIM = ["--backend", "sim", "--interval", "0.05", "--sim-jobs", "60", "--sim-nodes", "6",
       "--sim-tick", "900", "--nodes-every", "1"]  # fmt: skip


def jobtap_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobtap.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_pipeline_acl_users_and_client_certificates(tls_acl_server, pki, tmp_path):
    srv = tls_acl_server
    ca = pki.ca.cert
    admin_url = tls_url(srv.port, ca, cert=pki.service, user="admin", password=ADMIN_PW)
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    users = tmp_path / "users"
    users.write_text("alice\n")
    runner = CliRunner()
    done = runner.invoke(acl_cli, ["sync", "--redis", admin_url, "--site", SITE, "--users-file",
                                   str(users), "--secrets-dir", str(secrets)])  # fmt: skip
    assert done.exit_code == 0, done.output
    creds = tmp_path / "alice.credentials"
    alice_url = tls_url(srv.port, ca, cert=pki.user)  # her own certificate
    done = runner.invoke(acl_cli, ["grant", "alice", "--redis", admin_url, "--site", SITE,
                                   "--output", str(creds), "--url", alice_url])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "ssl_ca_certs=" in creds.read_text() and "alice.crt" in creds.read_text()

    def service(name: str) -> str:
        password = (secrets / f"{name}.password").read_text().strip()
        return tls_url(srv.port, ca, cert=pki.service, user=name, password=password)

    writer = service(acl.WRITER)
    common = ["--redis", writer, "--site", SITE, "--log-level", "WARNING"]

    with jobtap.Client(credentials=creds) as alice:
        got: list[jobtap.Change] = []
        lock = threading.Lock()

        def collect(change: jobtap.Change) -> None:
            with lock:
                got.append(change)

        sub = alice.subscribe(collect, user="alice")
        done = jobtap_cli("collector", *common, *SIM, "--cycles", "2")
        assert done.returncode == 0, done.stderr
        done = jobtap_cli("worker", *common, "--burst")
        assert done.returncode == 0, done.stderr
        admin = srv.client(decode_responses=True)
        stream_ids = [i for i, _ in admin.xrange(K.user_events("alice"))]
        assert stream_ids, "no event for alice"

        def delivered() -> list[str]:
            with lock:
                return [c.id for c in got if c.type != "initial"]

        eventually(lambda: sorted(delivered()) == sorted(_event_ids(admin, "alice")),
                   timeout=20, what="alice's events by subscription")  # fmt: skip
        read = []
        for change in alice.stream(user="alice", since="0", block=0.2):
            read.append(change.id)
            if len(read) == len(stream_ids):
                break
        assert read == _event_ids(admin, "alice")
        sub.close()

    # follow mode: the collector reads the poke stream over TLS and takes the poke
    follow = subprocess.Popen([sys.executable, "-m", "jobtap.cli", "collector", *common, *SIM,
                               "--interval", "0.3", "--follow"],
                              cwd=ROOT, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        eventually(lambda: any(c.get("user") == acl.WRITER and c.get("cmd") == "xread"
                               for c in admin.client_list()),
                   timeout=20, what="the collector reading pokes")  # fmt: skip
        done = jobtap_cli(
            "poke", "--redis", service(acl.POKER), "--site", SITE, "--strict", "7.pbs"
        )
        assert done.returncode == 0, done.stderr
        ((poke_id, _),) = admin.xrange(K.pokes)
        eventually(lambda: admin.hget(K.meta, "pokes_read") == poke_id, timeout=20,
                   what="the poke read by the collector")  # fmt: skip
        follow.send_signal(signal.SIGTERM)  # stops after the cycle in hand
        _, err = follow.communicate(timeout=30)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert follow.returncode == 0, err
    done = runner.invoke(status_cli, ["--redis", service(acl.OPERATOR), "--site", SITE])
    assert done.exit_code == 0, done.output
    # nothing refused to a service, nor to alice but the INFO server her
    # subscription tries (and does without) on a plain Redis too
    refused = [(e["username"], e["object"]) for e in admin.acl_log()]
    assert set(refused) <= {("alice", "info")}, refused


def _event_ids(admin, user: str) -> list[str]:
    import orjson

    return [orjson.loads(f["event"])["id"] for _, f in admin.xrange(K.user_events(user))]
