"""Helpers of the ACL tests (tests/acl/): a redis-server whose default user is
off (AclServer), raw connections as a given user, a Writer as the ``writer``
service user, and the test users' passwords."""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import quote

import redis
from click.testing import CliRunner
from redis.backoff import NoBackoff
from redis.retry import Retry

from jobtap.acl import rules as acl
from jobtap.cli.acl import acl as acl_cli
from jobtap.contract.chunk import Chunk
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from jobtap.workers.apply import Applier
from sim.rig.records import job_record

SITE = "hpc1"
K = SiteKeys(SITE)
ADMIN_PW = "admin-secret"
WRITER_PW = "writer-secret"
OPERATOR_PW = "operator-secret"
POKER_PW = "poker-secret"
PASSWORDS = {acl.WRITER: WRITER_PW, acl.OPERATOR: OPERATOR_PW, acl.POKER: POKER_PW}
NO_RETRY = Retry(NoBackoff(), 0)
HOSTILE = [
    "*", "a*", "?", "[x]", "..", "alice:bob", "alice:job", "alice%3Ajob", "alice:*", "\\",
    "~*", "&*", "%R~*", "+@all", "(x)", "élodie", "用户", "x" * 200,
]  # fmt: skip


# -- servers and connections ----------------------------------------------------------------------
class AclServer(RedisServer):
    """A redis-server with an ACL file: the default user is off, ``admin`` has
    every right.  DEBUG and MODULE are enabled in the config so that it is the
    ACL, not the config, that refuses them to users."""

    def __init__(self, workdir: Path, args=()):
        workdir.mkdir(parents=True, exist_ok=True)
        self.aclfile = workdir / "users.acl"
        self.aclfile.write_text(
            "user default off resetkeys resetchannels -@all\n"
            f"user admin on >{ADMIN_PW} ~* &* +@all\n"
        )
        base = [
            "--aclfile",
            str(self.aclfile),
            "--enable-debug-command",
            "yes",
            "--enable-module-command",
            "yes",
        ]
        super().__init__(workdir, args=[*base, *args])

    def client(self, **kw) -> redis.Redis:
        kw.setdefault("username", "admin")
        kw.setdefault("password", ADMIN_PW)
        return super().client(**kw)

    def url_as(self, user: str, password: str) -> str:
        return f"redis://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{self.port}/0"

    @property
    def admin_url(self) -> str:
        return self.url_as("admin", ADMIN_PW)

    def as_user(self, user: str, password: str, **kw) -> redis.Redis:
        """A client logged in as ``user``; a refused login fails at once (no retries)."""
        kw.setdefault("retry", NO_RETRY)
        return redis.Redis(host="127.0.0.1", port=self.port, username=user, password=password, **kw)


def raw(server: RedisServer, user: str, password: str, timeout: float = 5.0) -> redis.Connection:
    """A single RESP2 connection logged in as ``user`` (pub/sub replies come back
    like any other reply)."""
    conn = redis.Connection(
        host="127.0.0.1",
        port=server.port,
        username=user,
        password=password,
        protocol=2,
        socket_timeout=timeout,
    )
    conn.connect()
    return conn


def run(conn: redis.Connection, *args) -> tuple[str, object]:
    """``("ok", reply)``, ``("NOPERM", message)`` or ``("error", message)``."""
    try:
        conn.send_command(*args)
        return "ok", conn.read_response()
    except redis.exceptions.NoPermissionError as exc:
        return "NOPERM", str(exc)
    except redis.ResponseError as exc:
        return "error", str(exc)


def run_once(server: RedisServer, user: str, password: str, *args) -> tuple[str, object]:
    conn = raw(server, user, password)
    try:
        return run(conn, *args)
    finally:
        conn.disconnect()


def refused(outcome: tuple[str, object]) -> bool:
    kind, message = outcome
    return kind == "NOPERM" and "no permissions" in str(message)


def set_up_users(server: RedisServer, users, sites=(SITE,)) -> acl.AclAdmin:
    """writer, operator and ``users`` (each with password ``pw-<user>``)."""
    admin = acl.AclAdmin(server.client(decode_responses=True), sites)
    admin.sync(users, service_passwords=PASSWORDS)
    for user in users:
        admin.grant(user, f"pw-{user}")
    return admin


# -- writing real records as the writer -----------------------------------------------------------
class Writer:
    """The real apply step (workers/apply.py), connected as ``writer``."""

    def __init__(self, r: redis.Redis, site: str = SITE):
        self.applier = Applier(r)
        self.site = site
        self.cycle = 0
        self.lock = threading.Lock()

    def _apply(self, kind: str, record: dict) -> None:
        with self.lock:
            self.cycle += 1
            at = f"2026-11-21T15:{self.cycle // 60 % 60:02d}:{self.cycle % 60:02d}+00:00"
            item = {
                "op": "upsert",
                "id": record["id"],
                "fp": str(self.cycle),
                "state": record["state"],
                "record": record,
            }
            self.applier.apply(Chunk(self.site, self.cycle, at, kind, [item]))

    def job(self, jid: str, user: str, state: str = "queued", **extra) -> None:
        self._apply("job", job_record(jid, user, state, self.site, **extra))

    def node(self, name: str, state: str = "free") -> None:
        self._apply(
            "node",
            {
                "id": name,
                "site": self.site,
                "scheduler": "pbs",
                "state": state,
                "native_state": state,
                "reason": None,
                "jobs": [],
                "resources": {},
                "native": {"state": state},
            },
        )

    def queue(self, name: str, state: str = "enabled") -> None:
        self._apply(
            "queue",
            {
                "id": name,
                "site": self.site,
                "scheduler": "pbs",
                "state": state,
                "native_state": state,
                "counts": {},
                "resources": {},
                "native": {"enabled": "True"},
            },
        )


def cli(*args: str) -> object:
    return CliRunner().invoke(acl_cli, list(args), catch_exceptions=False)


# -- the rules themselves -------------------------------------------------------------------------
