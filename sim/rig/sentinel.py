"""A real Redis under Sentinel for the tests and the benchmarks: a primary and a
replica (``redis-server --replicaof``) and three Sentinels (Debian's
``redis-sentinel``, else ``redis-server --sentinel``) on free loopback ports,
with fast failover settings (``down-after-milliseconds`` 1000,
``failover-timeout`` 5000).

Nothing here imitates Redis: the primary can be killed (SIGKILL) and the
Sentinels promote the replica themselves; a replica can be paused (SIGSTOP) so
that it acknowledges nothing, and resumed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import redis

from jobtap.sim.localredis import RedisServer, free_port
from sim.rig.wait import eventually

SERVICE = "queues"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


class SentinelProcess:
    """One Sentinel: its own config file (Sentinel rewrites it as it learns)."""

    def __init__(self, workdir: Path, primary_port: int, quorum: int = 2):
        self.port = free_port()
        self.dir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.conf = workdir / "sentinel.conf"
        self.conf.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {workdir}\n"
            f"logfile {workdir / 'sentinel.log'}\n"
            "daemonize no\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {quorum}\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self.proc: subprocess.Popen | None = None

    def command(self) -> list[str]:
        binary = shutil.which("redis-sentinel")
        if binary is not None:
            return [binary, str(self.conf)]
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("neither redis-sentinel nor redis-server found")
        return [server, str(self.conf), "--sentinel"]

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **kw)

    def start(self) -> SentinelProcess:
        self.proc = subprocess.Popen(
            self.command(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return self

    def ready(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            log = self.dir / "sentinel.log"
            text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"redis-sentinel exited at start: {text}")
        try:
            with self.client(socket_timeout=0.5) as c:
                return bool(c.ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


class LocalSentinel:
    """A primary, ``replicas`` replicas and three Sentinels watching them as
    the service :data:`SERVICE`."""

    def __init__(self, workdir: Path, *, replicas: int = 1, sentinels: int = 3):
        self.dir = workdir
        fast = ["--repl-diskless-sync-delay", "0"]  # a replica syncs at once
        self.primary = RedisServer(workdir / "node0", args=fast)
        follow = [*fast, "--replicaof", "127.0.0.1", str(self.primary.port)]
        self.replicas = [
            RedisServer(workdir / f"node{i + 1}", args=follow) for i in range(replicas)
        ]
        self.nodes = [self.primary, *self.replicas]
        self.sentinels = [
            SentinelProcess(workdir / f"sentinel{i}", self.primary.port) for i in range(sentinels)
        ]
        self.paused: set[int] = set()

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the service."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self, timeout: float = 30.0) -> LocalSentinel:
        for node in self.nodes:
            node.start()
        for s in self.sentinels:
            s.start()
        for s in self.sentinels:
            eventually(s.ready, timeout=timeout, what=f"sentinel on port {s.port}")
        eventually(self._settled, timeout=timeout, interval=0.1, what="replication and sentinels")
        return self

    def _settled(self) -> bool:
        """Every replica in sync and every Sentinel knowing them all."""
        with self.primary.client(socket_timeout=1) as p:
            info = p.info("replication")
        online = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        if sum(1 for v in online if v.get("state") == "online") < len(self.replicas):
            return False
        for s in self.sentinels:
            with s.client(socket_timeout=1, decode_responses=True) as c:
                state = c.sentinel_master(SERVICE)
                if int(state.get("num-slaves", 0)) < len(self.replicas):
                    return False
                if int(state.get("num-other-sentinels", 0)) < len(self.sentinels) - 1:
                    return False
        return True

    def primary_port(self) -> int | None:
        """The port of the primary the Sentinels name (the first that answers)."""
        for s in self.sentinels:
            try:
                with s.client(socket_timeout=1, decode_responses=True) as c:
                    addr = c.sentinel_get_master_addr_by_name(SERVICE)
            except redis.RedisError:
                continue
            if addr:
                return int(addr[1])
        return None

    def node(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary the Sentinels name now; return it."""
        port = self.primary_port()
        assert port is not None
        doomed = self.node(port)
        doomed.stop(kill=True)
        return doomed

    def wait_failover(self, old: RedisServer, timeout: float = 30.0) -> RedisServer:
        """Until every Sentinel names another primary and it says it is one."""

        def promoted() -> RedisServer | None:
            ports = set()
            for s in self.sentinels:
                with s.client(socket_timeout=1, decode_responses=True) as c:
                    addr = c.sentinel_get_master_addr_by_name(SERVICE)
                ports.add(int(addr[1]) if addr else None)
            if len(ports) != 1 or old.port in ports or None in ports:
                return None
            new = self.node(ports.pop())
            with new.client(socket_timeout=1) as c:
                return new if c.info("replication").get("role") == "master" else None

        return eventually(promoted, timeout=timeout, interval=0.1, what="a replica promoted")

    def pause(self, node: RedisServer) -> None:
        """SIGSTOP ``node``: alive to the kernel, silent to everyone."""
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGSTOP)
        self.paused.add(node.proc.pid)

    def resume(self, node: RedisServer) -> None:
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGCONT)
        self.paused.discard(node.proc.pid)

    def stop(self) -> None:
        for pid in list(self.paused):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.paused.clear()
        for s in self.sentinels:
            s.stop()
        for node in self.nodes:
            node.stop(kill=True)
