"""A local redis-server on a free loopback port: for ``jobtap demo``, the tests
and the benchmarks.

Each server can be stopped, killed, restarted on the same port or started with
extra configuration, so a test can take Redis away under a running component.
With ``tls`` it serves TLS only (``--port 0 --tls-port PORT``), and its URL is a
``rediss://`` one naming the CA.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

LOWEST_PORT = 10000
_PICK = random.SystemRandom()  # whatever seed a test gives the random module
_HANDED_OUT: set[int] = set()  # ports this process was given: none is given twice


def _ephemeral_start() -> int:
    """The first port the kernel hands out to outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _my_range(low: int, high: int) -> tuple[int, int]:
    """``[low, high)``, or this pytest-xdist worker's slice of it (``gwN`` of
    ``PYTEST_XDIST_WORKER_COUNT``)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return low, high
    n, of = int(worker[2:]), max(1, int(count))
    span = (high - low) // of
    return (low + n * span, low + (n + 1) * span) if n < of and span > 100 else (low, high)


def free_port() -> int:
    """A loopback port nothing listens on, below the kernel's ephemeral range.

    A port from ``bind(("127.0.0.1", 0))`` is an ephemeral one: between this
    answer and the server's own bind, any outgoing connection on the machine
    (tests make thousands) may be given it as its local port, and the server
    then fails with "Address already in use".  Ports below the range are never
    handed out that way; one is picked at random (parallel test workers pick
    apart) and checked free.  Nor is a port given twice in one process: a
    cluster picks every node's port and bus port before it starts any, and a
    port checked free but not yet bound would pass the check again (a node
    once failed so, its bus on another node's port).  Under pytest-xdist each
    worker picks from a slice of the range of its own, so that two workers
    never pick one port between their checks and their servers' binds."""
    low, high = _my_range(LOWEST_PORT, _ephemeral_start())
    for _ in range(100):
        port = _PICK.randrange(low, high) if high > low + 100 else 0
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


@dataclass(frozen=True)
class TLSFiles:
    """A TLS server's certificate, key and CA; whether it asks its clients for
    a certificate (``tls-auth-clients``: yes, no, optional); the client
    certificate its own connections (the start-up ping, replicas, the cluster
    bus) present."""

    cert: Path
    key: Path
    ca: Path
    auth_clients: str = "no"
    client_cert: Path | None = None
    client_key: Path | None = None

    def server_args(self) -> list[str]:
        args = ["--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key),
                "--tls-ca-cert-file", str(self.ca),
                "--tls-auth-clients", self.auth_clients]  # fmt: skip
        if self.client_cert is not None and self.client_key is not None:
            args += ["--tls-client-cert-file", str(self.client_cert),
                     "--tls-client-key-file", str(self.client_key)]  # fmt: skip
        return args

    def client_kwargs(self) -> dict:
        kw: dict = {"ssl": True, "ssl_ca_certs": str(self.ca)}
        if self.client_cert is not None:
            kw.update(ssl_certfile=str(self.client_cert), ssl_keyfile=str(self.client_key))
        return kw

    def query(self) -> str:
        q = f"ssl_ca_certs={self.ca}"
        if self.client_cert is not None:
            q += f"&ssl_certfile={self.client_cert}&ssl_keyfile={self.client_key}"
        return q


class RedisServer:
    def __init__(
        self,
        workdir: Path | None = None,
        *,
        port: int | None = None,
        args=(),
        tls: TLSFiles | None = None,
    ):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            raise RuntimeError(
                "redis-server not found: install it (apt-get install redis-server)"
                " or pass --redis URL"
            )
        self.port = port or free_port()
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="jobtap-redis-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.args = list(args)
        self.tls = tls
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        if self.tls is not None:
            return f"rediss://127.0.0.1:{self.port}/0?{self.tls.query()}"
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kw) -> redis.Redis:
        if self.tls is not None:
            kw = {**self.tls.client_kwargs(), **kw}
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def listen_args(self) -> list[str]:
        if self.tls is None:
            return ["--port", str(self.port)]
        return ["--port", "0", "--tls-port", str(self.port), *self.tls.server_args()]

    def start(self, timeout: float = 10.0) -> RedisServer:
        cmd = [
            self.binary,
            *self.listen_args(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.dir / "redis.log"),
            "--daemonize",
            "no",
            *self.args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                logfile = self.dir / "redis.log"
                log = logfile.read_text(errors="replace")[-2000:] if logfile.exists() else ""
                raise RuntimeError(f"redis-server exited at start: {log}")
            try:
                if self.client(socket_timeout=0.5, **self._ping_kwargs()).ping():
                    return self
            except redis.RedisError:
                time.sleep(0.02)
        self.stop(kill=True)
        raise RuntimeError(f"redis-server on port {self.port} did not answer in {timeout}s")

    def _ping_kwargs(self) -> dict:
        # whether it answers, whatever its certificate (a test may serve an expired one)
        return {"ssl_cert_reqs": "none", "ssl_check_hostname": False} if self.tls else {}

    def stop(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> RedisServer:
        """Stop and start again on the same port (data is gone: no persistence)."""
        self.stop()
        return self.start()
