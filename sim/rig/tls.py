"""Certificates for the TLS tests, made by the test with ``openssl`` (the
``cryptography`` package is not among jobtap's dependencies): a test CA, a
server certificate for 127.0.0.1 and localhost signed by it, client
certificates for services and users, an expired server certificate, and a
second CA that signed none of them (the "wrong CA").

EC P-256 keys: quick to make, so a whole set costs well under a second.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from jobtap.sim.localredis import TLSFiles

SERVER_SANS = "subjectAltName=IP:127.0.0.1,DNS:localhost"


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class PKI:
    """Everything one test session's TLS servers and clients need."""

    dir: Path
    ca: Pair
    server: Pair
    expired: Pair  # a server certificate whose notAfter has passed
    service: Pair  # a client certificate for jobtap's services
    user: Pair  # a client certificate for a cluster user (CN alice)
    other_ca: Pair  # a CA that signed nothing here
    stranger: Pair  # a client certificate signed by other_ca

    def server_files(self, auth_clients: str = "no", *, expired: bool = False) -> TLSFiles:
        pair = self.expired if expired else self.server
        # the server's own clients (start-up ping, redis-cli, replicas, the
        # cluster bus) present the service certificate
        return TLSFiles(pair.cert, pair.key, self.ca.cert, auth_clients,
                        self.service.cert, self.service.key)  # fmt: skip


def _openssl(*args: str | Path, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise RuntimeError("openssl not found: install it (apt-get install openssl)")
    proc = subprocess.run([binary, *map(str, args)], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {proc.stderr[-1000:]}")


def _key_and_csr(d: Path, name: str, subject: str) -> tuple[Path, Path]:
    key, csr = d / f"{name}.key", d / f"{name}.csr"
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", key, "-out", csr, "-subj", subject, cwd=d)  # fmt: skip
    return key, csr


def _ca(d: Path, name: str, subject: str) -> Pair:
    key, crt = d / f"{name}.key", d / f"{name}.crt"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", key, "-out", crt, "-days", "2",
             "-subj", subject, cwd=d)  # fmt: skip
    return Pair(crt, key)


def _signed(d: Path, ca: Pair, name: str, subject: str, ext: str, days: int = 2) -> Pair:
    """A certificate signed by ``ca``; ``days=-1``: it expired a day ago."""
    key, csr = _key_and_csr(d, name, subject)
    extfile = d / f"{name}.ext"
    extfile.write_text(ext + "\n")
    crt = d / f"{name}.crt"
    _openssl("x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
             "-out", crt, "-days", str(days), "-extfile", extfile, cwd=d)  # fmt: skip
    for path in (key, crt):
        path.chmod(0o600)
    return Pair(crt, key)


def make_pki(d: Path) -> PKI:
    d.mkdir(parents=True, exist_ok=True)
    ca = _ca(d, "ca", "/CN=jobtap test CA")
    both = "extendedKeyUsage=serverAuth,clientAuth"
    return PKI(
        dir=d,
        ca=ca,
        server=_signed(d, ca, "server", "/CN=localhost", f"{SERVER_SANS}\n{both}"),
        expired=_signed(d, ca, "expired", "/CN=localhost", f"{SERVER_SANS}\n{both}", days=-1),
        service=_signed(d, ca, "writer", "/CN=writer", both),
        user=_signed(d, ca, "alice", "/CN=alice", "extendedKeyUsage=clientAuth"),
        other_ca=(other := _ca(d, "other-ca", "/CN=another CA")),
        stranger=_signed(d, other, "stranger", "/CN=stranger", "extendedKeyUsage=clientAuth"),
    )


def tls_url(
    port: int,
    ca: Path,
    *,
    cert: Pair | None = None,
    user: str | None = None,
    password: str | None = None,
    host: str = "127.0.0.1",
) -> str:
    """A ``rediss://`` URL the way a site writes one: the CA (and a client
    certificate) as redis-py's query parameters."""
    login = ""
    if password is not None:
        login = f"{quote(user or '', safe='')}:{quote(password, safe='')}@"
    query = f"ssl_ca_certs={ca}"
    if cert is not None:
        query += f"&ssl_certfile={cert.cert}&ssl_keyfile={cert.key}"
    return f"rediss://{login}{host}:{port}/0?{query}"
