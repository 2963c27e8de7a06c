"""A local redis-server on a free loopback port: for ``jobtap demo``, the tests
and the benchmarks.

Each server can be stopped, killed, restarted on the same port or started with
extra configuration, so a test can take Redis away under a running component.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    def __init__(self, workdir: Path | None = None, *, port: int | None = None, args=()):
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
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def start(self, timeout: float = 10.0) -> RedisServer:
        cmd = [
            self.binary,
            "--port",
            str(self.port),
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
                if self.client(socket_timeout=0.5).ping():
                    return self
            except redis.RedisError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not answer in {timeout}s")

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
