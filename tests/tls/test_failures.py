"""What goes wrong with TLS ends in one line, within seconds, never a hang nor
a silent retry loop: a wrong CA, an expired server certificate, plain text to
a TLS port, TLS to a plain port, a missing client certificate, a client
certificate of another CA.  Each against a real redis-server, through the CLI
(`jobtap status`: the line and a non-zero exit), the SDK (``TLSFailed``, or
``RedisUnavailable`` with the hint for plain text to a TLS port) and `jobtap
poke` (its stderr line, exit 1 with --strict)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

import jobtap
from jobtap.cli import poke
from jobtap.cli.status import status as status_cli
from jobtap.errors import RedisUnavailable, TLSFailed
from jobtap.sim.localredis import RedisServer
from sim.rig.paths import ROOT
from sim.rig.tls import tls_url

BOUND = 8.0  # seconds: the CLI's connect timeout is 5 s, the SDK's here 2 s


@pytest.fixture(scope="module")
def servers(tmp_path_factory, pki):
    d = tmp_path_factory.mktemp("servers")
    started = {
        "tls": RedisServer(d / "tls", tls=pki.server_files("yes")),
        "expired": RedisServer(d / "expired", tls=pki.server_files("no", expired=True)),
        "plain": RedisServer(d / "plain"),
    }
    for s in started.values():
        s.start()
    yield started
    for s in started.values():
        s.stop()


# case: (URL from the servers and certificates, words of the line, TLS in the SDK?)
CASES = {
    "wrong CA": (lambda s, p: tls_url(s["tls"].port, p.other_ca.cert, cert=p.service),
                 "certificate is not trusted", True),
    "expired certificate": (lambda s, p: tls_url(s["expired"].port, p.ca.cert),
                            "certificate has expired", True),
    "plain text to a TLS port": (lambda s, p: f"redis://127.0.0.1:{s['tls'].port}/0",
                                 "use rediss://", False),
    "TLS to a plain port": (lambda s, p: tls_url(s["plain"].port, p.ca.cert),
                            "use redis://", True),
    "no client certificate": (lambda s, p: tls_url(s["tls"].port, p.ca.cert),
                              "client certificate", True),
    "client certificate of another CA": (
        lambda s, p: tls_url(s["tls"].port, p.ca.cert, cert=p.stranger),
        "client certificate", True),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_within_seconds(case, servers, pki, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "none"))
    make, words, tls = CASES[case]
    url = make(servers, pki)

    started = time.monotonic()
    done = CliRunner().invoke(status_cli, ["--redis", url, "--site", "hpc1"])
    took = time.monotonic() - started
    assert done.exit_code == 1 and took < BOUND, (done.output, took)
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines

    started = time.monotonic()
    with pytest.raises(RedisUnavailable) as caught:
        with jobtap.Client(url, site="hpc1", timeout=2) as client:
            client.job("1.pbs")
    took = time.monotonic() - started
    assert took < BOUND and isinstance(caught.value, TLSFailed) == tls, (caught.value, took)
    message = str(caught.value)
    assert "\n" not in message and words in message, message

    started = time.monotonic()
    assert poke.main(["--redis", url, "--site", "hpc1", "--strict", "--timeout", "1", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert time.monotonic() - started < BOUND
    assert len(err) == 1 and "not delivered" in err[0], err
    assert ("TLS: " in err[0]) if tls else ("use rediss://" in err[0]), err


def test_a_service_says_it_once_and_exits(servers, pki):
    """`jobtap worker` against a server whose certificate it does not trust:
    one line on stderr and exit status 1, in seconds (no silent retry loop)."""
    url = tls_url(servers["tls"].port, pki.other_ca.cert, cert=pki.service)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "jobtap.cli", "worker", "--redis", url, "--burst"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 1 and time.monotonic() - started < 15
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "certificate is not trusted" in lines[0], lines


def test_a_missing_ca_file_is_a_config_error(servers, tmp_path):
    url = f"rediss://127.0.0.1:{servers['tls'].port}/0?ssl_ca_certs={tmp_path}/nope.crt"
    with pytest.raises(jobtap.ConfigError, match="no such file"):
        jobtap.Client(url, site="hpc1").job("1.pbs")
    done = CliRunner().invoke(status_cli, ["--redis", url, "--site", "hpc1"])
    assert done.exit_code == 1 and "nope.crt: no such file" in done.output
