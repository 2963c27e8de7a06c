"""A real local Redis Cluster for the tests and the benchmarks: primaries and
replicas of ``redis-server --cluster-enabled yes`` on free loopback ports, joined
by ``redis-cli --cluster create ... --cluster-replicas N --cluster-yes``.

Nothing here imitates Redis: a node can be killed (its replica is promoted by
the cluster itself after ``cluster-node-timeout``), put to sleep with ``DEBUG
SLEEP``, or have a slot migrated away with the real ``CLUSTER SETSLOT`` /
``MIGRATE`` steps that ``redis-cli --cluster reshard`` runs.

With ``tls`` (``jobtap.sim.localredis.TLSFiles``) every node serves TLS only,
clients, replication (``tls-replication yes``) and the cluster bus
(``tls-cluster yes``) alike, and the URLs are ``rediss://`` ones.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import redis
from redis.cluster import RedisCluster, key_slot

from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer, TLSFiles, free_port
from sim.rig.wait import eventually

NODE_TIMEOUT_MS = 1000  # how long a primary may be silent before its replica takes over


def site_slot(site: str) -> int:
    """The hash slot of every key of ``site`` (they all share ``{site}``)."""
    return key_slot(SiteKeys(site).events.encode())


class ClusterNode(RedisServer):
    """One redis-server of the cluster, with its cluster bus on a port of its own
    (``cluster-port``, so that the bus never lands on a port someone else holds).

    With ``auth`` (user, password) the node has an ACL file of its own, as each
    node of a real cluster does: the default user off, ``user`` with every right.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        auth: tuple[str, str] | None = None,
        args=(),
        tls: TLSFiles | None = None,
    ):
        self.bus_port = free_port()
        self.auth = auth
        workdir.mkdir(parents=True, exist_ok=True)
        base = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(workdir / "nodes.conf"),
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            "--cluster-port", str(self.bus_port),
            "--cluster-require-full-coverage", "no",
            "--cluster-allow-reads-when-down", "no",
            "--enable-debug-command", "yes",
        ]  # fmt: skip
        if auth is not None:  # replicas log in to their primary as this user
            self.aclfile = workdir / "users.acl"
            self.aclfile.write_text(
                "user default off resetkeys resetchannels -@all\n"
                f"user {auth[0]} on >{auth[1]} ~* &* +@all\n"
            )
            base += ["--aclfile", str(self.aclfile), "--enable-module-command", "yes"]
            base += ["--masteruser", auth[0], "--masterauth", auth[1]]
        if tls is not None:
            base += ["--tls-cluster", "yes", "--tls-replication", "yes"]
        super().__init__(workdir, args=[*base, *args], tls=tls)

    def client(self, **kw) -> redis.Redis:
        if self.auth is not None:
            kw.setdefault("username", self.auth[0])
            kw.setdefault("password", self.auth[1])
        return super().client(**kw)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def info(self, section: str) -> dict:
        with self.client(decode_responses=True, socket_timeout=5) as c:
            return c.info(section)

    def node_id(self) -> str:
        with self.client(decode_responses=True, socket_timeout=5) as c:
            return c.execute_command("CLUSTER", "MYID")

    def is_primary(self) -> bool:
        return self.info("replication")["role"] == "master"


class LocalCluster:
    """``primaries`` primaries with ``replicas`` replicas each, in ``workdir``.

    ``auth`` (user, password) is a user every node knows (from an ACL file given
    in ``args``): redis-cli and the replicas log in as it.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        primaries: int = 3,
        replicas: int = 1,
        auth: tuple[str, str] | None = None,
        node_args: Iterable[str] = (),
        node_class: type[ClusterNode] = ClusterNode,
        tls: TLSFiles | None = None,
    ):
        self.cli = shutil.which("redis-cli")
        if self.cli is None:
            raise RuntimeError("redis-cli not found: install redis-tools (apt-get install redis)")
        self.auth = auth
        self.tls = tls
        self.dir = Path(workdir)
        total = primaries * (1 + replicas)
        self.replicas = replicas
        self.nodes = [
            node_class(self.dir / f"node{i}", auth=auth, args=list(node_args), tls=tls)
            for i in range(total)
        ]

    # -- lifetime ------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> LocalCluster:
        try:
            for node in self.nodes:
                node.start()
            cmd = [self.cli, *self._cli_auth(), "--cluster", "create"]
            cmd += [n.address for n in self.nodes]
            cmd += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {proc.stdout[-2000:]}")
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop(kill=True)

    def _cli_auth(self) -> list[str]:
        out = []
        if self.tls is not None:
            out += ["--tls", "--cacert", str(self.tls.ca)]
            if self.tls.client_cert is not None:
                out += ["--cert", str(self.tls.client_cert), "--key", str(self.tls.client_key)]
        if self.auth is None:
            return out
        return [*out, "--user", self.auth[0], "--pass", self.auth[1], "--no-auth-warning"]

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every live node says the cluster is ok, agrees on who serves
        every slot, and every replica is in sync with its primary."""

        def healthy() -> bool:
            live = [n for n in self.nodes if n.proc is not None]
            views = set()
            for n in live:
                if n.info("cluster").get("cluster_enabled") != 1:
                    return False
                with n.client(decode_responses=True, socket_timeout=5) as c:
                    info = c.execute_command("CLUSTER", "INFO")
                    if "cluster_state:ok" not in info:
                        return False
                    views.add(_slot_view(c))
                repl = n.info("replication")
                if repl["role"] == "slave" and repl.get("master_link_status") != "up":
                    return False
            if len(views) != 1:
                return False
            if len(live) < len(self.nodes):
                return True  # a node is down: its shard has a replica less
            return all(len(reps) == self.replicas for *_, reps in views.pop())

        eventually(healthy, timeout=timeout, interval=0.1, what="a healthy cluster")

    # -- addressing ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The URL of one node (any node will do: jobtap asks it for the rest)."""
        return self.url_of(self.live()[0])

    def url_of(
        self, node: ClusterNode, user: str | None = None, password: str | None = None
    ) -> str:
        if user is None and self.auth is not None:
            user, password = self.auth
        cred = f"{user}:{password}@" if user is not None else ""
        if self.tls is not None:
            return f"rediss://{cred}127.0.0.1:{node.port}/0?{self.tls.query()}"
        return f"redis://{cred}127.0.0.1:{node.port}/0"

    def live(self) -> list[ClusterNode]:
        return [n for n in self.nodes if n.proc is not None]

    def client(self, **kw) -> RedisCluster:
        node = self.live()[0]
        if self.auth is not None:
            kw.setdefault("username", self.auth[0])
            kw.setdefault("password", self.auth[1])
        if self.tls is not None:
            kw = {**self.tls.client_kwargs(), **kw}
        return RedisCluster(host="127.0.0.1", port=node.port, **kw)

    def by_port(self, port: int) -> ClusterNode:
        return next(n for n in self.nodes if n.port == port)

    def primary_of(self, site: str) -> ClusterNode:
        """The node that serves ``site``'s slot now (asked of a live node)."""
        slot = site_slot(site)
        node = self.live()[0]
        with node.client(decode_responses=True, socket_timeout=5) as c:
            for start, end, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return self.by_port(int(primary[1]))
        raise LookupError(f"no node serves slot {slot}")

    def replicas_of(self, primary: ClusterNode) -> list[ClusterNode]:
        out = []
        for n in self.live():
            repl = n.info("replication")
            if repl["role"] == "slave" and int(repl.get("master_port", 0)) == primary.port:
                out.append(n)
        return out

    def primaries(self) -> list[ClusterNode]:
        return [n for n in self.live() if n.is_primary()]

    def shard_sites(self, per_shard: int, prefix: str = "site") -> list[str]:
        """``per_shard`` site names for each primary, in primary order: the first
        names ``prefix1``, ``prefix2``... that land on each shard."""
        ranges = self._ranges()
        wanted = {port: [] for port in sorted({p for _, _, p in ranges})}
        i = 0
        while any(len(v) < per_shard for v in wanted.values()):
            i += 1
            name = f"{prefix}{i}"
            slot = site_slot(name)
            port = next(p for s, e, p in ranges if s <= slot <= e)
            if len(wanted[port]) < per_shard:
                wanted[port].append(name)
        return [s for port in wanted for s in wanted[port]]

    def spread_sites(self, n: int, prefix: str = "site") -> list[str]:
        """``n`` site names taking the shards in turn (the first three on three
        different shards, and so on)."""
        shards = len(self.primaries())
        per = -(-n // shards)  # rounded up
        by_shard = self.shard_sites(per, prefix)
        return [by_shard[s * per + i] for i in range(per) for s in range(shards)][:n]

    def _ranges(self) -> list[tuple[int, int, int]]:
        with self.live()[0].client(decode_responses=True, socket_timeout=5) as c:
            return [(s, e, int(p[1])) for s, e, p, *_ in c.execute_command("CLUSTER", "SLOTS")]

    # -- faults ----------------------------------------------------------------------------
    def kill(self, node: ClusterNode) -> None:
        """SIGKILL: the node is gone mid-whatever, as on a crash."""
        node.stop(kill=True)

    def wait_failover(self, site: str, old: ClusterNode, timeout: float = 30.0) -> ClusterNode:
        """Until a replica of ``old`` serves ``site``'s slot; return it."""

        def promoted() -> ClusterNode | None:
            node = self.primary_of(site)
            return node if node is not old and node.is_primary() else None

        return eventually(promoted, timeout=timeout, interval=0.1, what=f"failover of {site}")

    def migrate_slot(self, slot: int, target: ClusterNode) -> None:
        """Move ``slot`` and its keys to ``target``, the way ``redis-cli --cluster
        reshard`` does: IMPORTING/MIGRATING, MIGRATE the keys in batches, then
        SETSLOT NODE on both ends and every other primary."""
        source = self.by_port(next(p for s, e, p in self._ranges() if s <= slot <= e))
        if source is target:
            return
        src, dst = source.client(decode_responses=True), target.client(decode_responses=True)
        try:
            src_id, dst_id = source.node_id(), target.node_id()
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                args = ["MIGRATE", "127.0.0.1", target.port, "", 0, 10_000]
                if self.auth is not None:
                    args += ["AUTH2", *self.auth]
                src.execute_command(*args, "KEYS", *keys)
            for node in self.primaries():
                with node.client(decode_responses=True) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        finally:
            src.close()
            dst.close()
        self.wait_healthy()


def _slot_view(c: redis.Redis) -> tuple:
    """Who serves which slots, primary and replicas, as one node sees it."""
    return tuple(
        sorted(
            (s, e, int(p[1]), tuple(sorted(int(r[1]) for r in reps)))
            for s, e, p, *reps in c.execute_command("CLUSTER", "SLOTS")
        )
    )


def flush(cluster: LocalCluster) -> None:
    """Empty every primary (replicas follow)."""
    for node in cluster.primaries():
        with node.client() as c:
            c.flushall()


def wait_replicated(cluster: LocalCluster, timeout: float = 10.0) -> None:
    """Until every replica has everything its primary wrote so far."""
    for node in cluster.primaries():
        n = len(cluster.replicas_of(node))
        if n:
            with node.client() as c:
                got = c.execute_command("WAIT", n, int(timeout * 1000))
            assert got >= n, f"{node.address}: {got} of {n} replicas caught up"
