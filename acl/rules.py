"""Redis ACL users for jobtap: the rules (pure functions) and the operations
behind ``jobtap acl`` (sync, grant, revoke) against an admin connection.

Three kinds of Redis users:

- one per cluster user (named exactly like the cluster user, since the SDK takes
  the Redis user name to be the cluster user it acts for): read-only access to
  their own keys and to the node and queue keys of the given sites, SUBSCRIBE and
  SSUBSCRIBE to their own channel and the nodes channel, the few read commands
  the SDK uses, and consumer groups on their own event stream only;
- ``writer``: the collector and the workers (``jobtap:*`` and rq's ``rq:*`` keys
  and channels, an explicit list of commands);
- ``operator``: reads every key and channel, consumer groups on event streams;
- ``poker``: appends to the sites' poke streams and nothing else (``jobtap poke``
  in PBS hooks and Slurm prolog/epilog scripts, on hosts that need no writer).

Key and channel patterns are per site and start with the literal
``jobtap:{SITE}:u:<escaped user>`` prefix: the escaped name holds no glob
character (``* ? [ ] \\``) and no ``:``, and ``%`` is not special in Redis globs,
so a pattern matches that one user's keys and nothing else, whatever the job ids
or other user names look like.

On a Redis Cluster every change goes to every node, primaries and replicas
(see :mod:`jobtap.acl.nodes`), and the rules also grant what a cluster client
needs: ``INFO cluster`` (jobtap asks whether it talks to a cluster), ``CLUSTER
SLOTS`` (who serves which slot), ``READONLY`` (reading from and subscribing on a
replica) and ``ASKING`` (following a slot that is being moved).

Every update is one ``ACL SETUSER name reset ...`` carrying the whole rule set,
so the result is exact (nothing survives from before but the password hashes,
which are carried over) and idempotent.  Redis keeps live subscribers whose
channels are still allowed, so a re-sync does not disturb them.
"""

from __future__ import annotations

import hashlib
import secrets
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from jobtap.keys import (
    EVERY_KEY,
    EVERY_STREAM,
    SITE_IN_PATTERN,
    SiteKeys,
    check_site,
    is_user_channel,
)

from .nodes import NODE_ERRORS, AclNode, acl_nodes, data_client

WRITER = "writer"
OPERATOR = "operator"
POKER = "poker"
ADMIN = "admin"
SERVICE_USERS = (WRITER, OPERATOR, POKER)
RESERVED = frozenset({"default", ADMIN, *SERVICE_USERS})
MAX_USER_BYTES = 512

# What the SDK runs as a cluster user (sdk/cache.py, subscribe.py, backfill.py,
# stream.py).  HELLO and AUTH need no grant.  SELECT: a URL with a database other
# than 0; key permissions hold in every database.
USER_COMMANDS = (
    "ping",
    "select",
    "exists",
    "hget",
    "hmget",
    "hgetall",
    "smembers",
    "xrange",
    "xrevrange",
    "xread",
    "xinfo|stream",
    "zrange",
    "subscribe",
    "unsubscribe",
    "ssubscribe",
    "sunsubscribe",
)
# What a client of a Redis Cluster needs beyond the commands of its work (see
# the module documentation).  ``info|cluster`` allows ``INFO cluster`` and no
# other section of INFO.  Harmless on a plain Redis, so granted everywhere: the
# same users work on both.
CLUSTER_COMMANDS = ("info|cluster", "cluster|slots", "readonly", "asking")
# Consumer groups (``client.stream(user=..., group=...)``) change the group's
# state on the stream: granted on the user's own event stream only, by a selector.
GROUP_COMMANDS = ("xgroup|create", "xreadgroup", "xack", "xautoclaim", "xinfo|groups")
# redis-py sends CLIENT SETINFO when it connects (and ignores a refusal); the
# subcommand exists from Redis 7.2 on.
SETINFO = "client|setinfo"

# The collector (collector/cycle.py, service.py), the apply script
# (workers/apply.lua) and rq 3 (queues, registries, worker records, its scripts
# and its pub/sub command channel).  Lua scripts run with these permissions too.
WRITER_COMMANDS = (
    # connection
    "ping", "select", "info", "time", "client|setname", "client|getname", "client|id",
    "client|info",
    # transactions and scripts
    "multi", "exec", "discard", "watch", "unwatch", "evalsha", "script|load", "script|exists",
    # strings and keys
    "get", "set", "del", "exists", "expire", "pexpire", "persist", "ttl", "pttl", "rename",
    # hashes
    "hget", "hmget", "hgetall", "hset", "hdel", "hincrby", "hincrbyfloat", "hexists", "hlen",
    "hscan",
    # sets
    "sadd", "srem", "smembers", "scard", "sismember",
    # sorted sets
    "zadd", "zrem", "zrange", "zrangebyscore", "zremrangebyscore", "zremrangebyrank", "zscore",
    "zcard",
    # lists (rq's queues)
    "lpush", "rpush", "lpop", "lrange", "llen", "lrem", "lpos", "lmove", "blmove", "blpop",
    "ltrim",
    # streams
    "xadd", "xtrim", "xrange", "xrevrange", "xread", "xlen",
    # pub/sub (SPUBLISH: sharded channels on a cluster)
    "publish", "spublish", "subscribe", "unsubscribe",
    # a cluster: topology, redirections, and waiting for a replica to have a batch
    "cluster|slots", "readonly", "asking", "wait",
)  # fmt: skip
WRITER_KEYS = (EVERY_KEY, "rq:*")

# Operators read everything; KEYS and SORT_RO (the two @read commands Redis calls
# dangerous) are left out, SCAN is there.
OPERATOR_COMMANDS = (
    "+@read", "-keys", "-sort_ro",
    "+ping", "+select", "+info", "+client|setname", "+client|getname", "+client|id",
    "+client|info",
    "+subscribe", "+unsubscribe", "+psubscribe", "+punsubscribe", "+ssubscribe",
    "+sunsubscribe", "+cluster|slots", "+readonly", "+asking",
)  # fmt: skip
OPERATOR_GROUP_KEYS = (EVERY_STREAM,)
OPERATOR_GROUP_COMMANDS = (*GROUP_COMMANDS, "xgroup|createconsumer", "xclaim")

# ``jobtap poke`` (collector/follow/pokes.py): XADD to the poke stream of a site.
POKER_COMMANDS = ("ping", "select", "xadd", *CLUSTER_COMMANDS)


class BadUser(ValueError):
    """A name that cannot be (or must not be) a jobtap Redis user."""


def check_user(name: str, reserved: Iterable[str] = RESERVED) -> str:
    """Return ``name`` if it can be a cluster user's Redis user name.

    Refused: the empty name, whitespace and control or format characters (Redis
    refuses spaces; a newline would end a line of the ACL file or the credential
    file), names longer than ``MAX_USER_BYTES`` bytes in UTF-8, and the service
    users' names (``reserved``): granting "writer" would hand out the writer.
    """
    if not isinstance(name, str) or not name:
        raise BadUser("empty user name")
    for ch in name:
        if ch.isspace() or unicodedata.category(ch)[0] == "C":
            raise BadUser(f"user name {name!r} contains whitespace or a control character")
    if len(name.encode()) > MAX_USER_BYTES:
        raise BadUser(f"user name {name[:40]!r}... is longer than {MAX_USER_BYTES} bytes")
    if name in set(reserved):
        raise BadUser(f"{name!r} is a service user's name, not a cluster user's")
    return name


def _sites(sites: Sequence[str]) -> list[str]:
    if not sites:
        raise ValueError("at least one site is needed")
    return list(dict.fromkeys(check_site(s) for s in sites))


def user_rules(
    user: str,
    sites: Sequence[str],
    *,
    groups: bool = True,
    setinfo: bool = False,
) -> list[str]:
    """The ACL rules of a cluster user (without password and on/off).

    For user ``alice`` and site ``hpc1``::

        -@all +ping +select +exists +hget ... +sunsubscribe +info|cluster ... +asking
        %R~jobtap:{hpc1}:u:alice:* %R~jobtap:{hpc1}:node:* %R~jobtap:{hpc1}:queue:*
        %R~jobtap:{hpc1}:nodes %R~jobtap:{hpc1}:queues
        &jobtap:{hpc1}:u:alice &jobtap:{hpc1}:nodes
        (~jobtap:{hpc1}:u:alice:events +xgroup|create +xreadgroup +xack +xautoclaim +xinfo|groups)
    """
    check_user(user, reserved=())
    rules = ["-@all", *(f"+{c}" for c in (*USER_COMMANDS, *CLUSTER_COMMANDS))]
    if setinfo:
        rules.append(f"+{SETINFO}")
    keys: list[str] = []
    channels: list[str] = []
    streams: list[str] = []
    for site in _sites(sites):
        k = SiteKeys(site)
        keys += [
            k.user_pattern(user),
            k.node_pattern,
            k.queue_pattern,
            k.node_index,
            k.queue_index,
        ]
        channels += [k.user_channel(user), k.nodes_channel]
        streams.append(k.user_events(user))
    rules += [f"%R~{p}" for p in keys]
    rules += [f"&{c}" for c in channels]
    if groups:
        body = [f"~{s}" for s in streams] + [f"+{c}" for c in GROUP_COMMANDS]
        rules.append("(" + " ".join(body) + ")")
    return rules


def writer_rules(*, setinfo: bool = False) -> list[str]:
    """The ACL rules of the collector and workers' user."""
    rules = ["-@all", *(f"+{c}" for c in WRITER_COMMANDS)]
    if setinfo:
        rules.append(f"+{SETINFO}")
    rules += [f"~{p}" for p in WRITER_KEYS]
    rules += [f"&{p}" for p in WRITER_KEYS]
    return rules


def operator_rules(*, setinfo: bool = False) -> list[str]:
    """The ACL rules of the read-everything user (dashboards, exporters, admins' tools)."""
    rules = ["-@all", *OPERATOR_COMMANDS]
    if setinfo:
        rules.append(f"+{SETINFO}")
    rules += ["%R~*", "&*"]
    body = [f"~{p}" for p in OPERATOR_GROUP_KEYS] + [f"+{c}" for c in OPERATOR_GROUP_COMMANDS]
    rules.append("(" + " ".join(body) + ")")
    return rules


def poker_rules(sites: Sequence[str], *, setinfo: bool = False) -> list[str]:
    """The ACL rules of ``jobtap poke`` (hooks and prolog/epilog scripts): it can
    say "job X changed" and nothing more; the collector looks for itself."""
    rules = ["-@all", *(f"+{c}" for c in POKER_COMMANDS)]
    if setinfo:
        rules.append(f"+{SETINFO}")
    return rules + [f"~{SiteKeys(s).pokes}" for s in _sites(sites)]


def service_rules(name: str, sites: Sequence[str], *, setinfo: bool = False) -> list[str]:
    if name == WRITER:
        return writer_rules(setinfo=setinfo)
    if name == OPERATOR:
        return operator_rules(setinfo=setinfo)
    if name == POKER:
        return poker_rules(sites, setinfo=setinfo)
    raise ValueError(f"no service user {name!r}")


def setuser_args(
    rules: Sequence[str], *, password_hashes: Sequence[str] = (), enabled: bool = False
) -> list[str]:
    """The arguments after ``ACL SETUSER name``: start from nothing (``reset``; the
    explicit resets also cover a server whose ``acl-pubsub-default`` is
    ``allchannels``), then the rules, the password hashes and on/off."""
    args = ["reset", "resetkeys", "resetchannels", *rules]
    args += [f"#{h}" for h in password_hashes]
    args.append("on" if enabled else "off")
    return args


def acl_line(name: str, args: Sequence[str]) -> str:
    """One line of an ACL file (what ``--dry-run`` prints)."""
    return " ".join(["user", name, *args])


def new_password() -> str:
    """256 random bits, URL-safe (it also goes into ``redis://user:PASSWORD@``)."""
    return secrets.token_urlsafe(32)


def hash_password(password: str) -> str:
    """The SHA-256 hex digest Redis keeps (``#HASH``): the clear password never
    reaches Redis, its logs or MONITOR."""
    return hashlib.sha256(password.encode()).hexdigest()


# -- operations against an admin connection -------------------------------------------------------


@dataclass
class Existing:
    """A Redis user as ACL GETUSER shows it."""

    enabled: bool
    password_hashes: list[str]
    raw: dict[str, Any]

    @property
    def sites(self) -> set[str]:
        """The sites named in its key and channel patterns."""
        text = " ".join([str(self.raw.get("keys", "")), str(self.raw.get("channels", ""))])
        return set(SITE_IN_PATTERN.findall(text))

    def made_for(self, user: str) -> bool:
        """Whether this looks like the Redis user ``jobtap acl`` made for cluster
        user ``user`` (it has that user's channel), not another application's."""
        channels = str(self.raw.get("channels", "")).split()
        return any(t.startswith("&") and is_user_channel(t[1:], user) for t in channels)


@dataclass
class SyncReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # name -> why
    lines: list[str] = field(default_factory=list)  # ACL file lines (dry run)
    generated: dict[str, str] = field(default_factory=dict)  # service user -> new password
    no_password: list[str] = field(default_factory=list)  # cluster users nobody granted yet


def _s(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_s(v) for v in value]
    if isinstance(value, dict):
        return {_s(k): _s(v) for k, v in value.items()}
    return value


class AclAdmin:
    """ACL operations through a connection with ACL rights (the ``admin`` user).

    On a Redis Cluster, ``r`` is any one node: every change is made on every node
    (:mod:`jobtap.acl.nodes`), ``r``'s first.  An error on ``r``'s node is raised
    as on a plain Redis; a node that cannot be reached or refuses is noted in
    :attr:`failed` (address -> why) and the others carry on: the caller reports
    it, and a later ``sync`` brings the node up to date (users and password
    hashes are copied from the first node that has them).

    ``sites``: the sites whose keys the cluster users may read; ``groups``: whether
    cluster users get consumer groups on their own event stream.
    """

    def __init__(self, r: redis.Redis, sites: Sequence[str], *, groups: bool = True):
        self.r = r
        self.sites = _sites(sites)
        self.groups = groups
        self.nodes: list[AclNode] = acl_nodes(r)
        self.failed: dict[str, str] = {n.address: n.error for n in self.nodes if n.r is None}
        self.setinfo = all(_version(r) >= (7, 2) for r in self._live())
        me = _s(r.execute_command("ACL", "WHOAMI"))
        self.reserved = RESERVED | {me}
        self.warnings: list[str] = []

    # -- nodes -------------------------------------------------------------------------------
    def _live(self) -> list[redis.Redis]:
        """The nodes to work on: ``r`` first, then those that have not failed."""
        return [n.r for n in self.nodes if n.r is not None and n.address not in self.failed]

    def _on_every_node(self, *command: Any) -> None:
        """Run ``command`` on every node; ``r``'s errors propagate, the others'
        are noted in :attr:`failed`."""
        for node in self.nodes:
            if node.r is None or node.address in self.failed:
                continue
            if node.r is self.r:
                node.r.execute_command(*command)
                continue
            try:
                node.r.execute_command(*command)
            except NODE_ERRORS as exc:
                self.failed[node.address] = f"{command[0]} {command[1]}: {exc}"

    def _get_on(self, r: redis.Redis, name: str) -> Existing | None:
        raw = r.execute_command("ACL", "GETUSER", name)
        if not raw:
            return None
        raw = _s(raw)
        return Existing("on" in raw.get("flags", []), list(raw.get("passwords", [])), raw)

    def _each_view(self, name: str) -> list[Existing | None]:
        """The user as each live node has it (``r``'s first)."""
        out = []
        for r in self._live():
            try:
                out.append(self._get_on(r, name))
            except NODE_ERRORS as exc:
                if r is self.r:
                    raise
                self.failed[next(n.address for n in self.nodes if n.r is r)] = str(exc)
        return out

    # -- reading ---------------------------------------------------------------------------
    def get(self, name: str) -> Existing | None:
        """The user as ``r``'s node has it, else as the first other node that has it."""
        return next((e for e in self._each_view(name) if e is not None), None)

    def users_from_jobs(self) -> set[str]:
        """Every job owner the sites' owner indexes know (live and retained jobs)."""
        users: set[str] = set()
        data = data_client(self.r)
        try:
            for site in self.sites:
                for _, user in data.hscan_iter(SiteKeys(site).owner, count=1000):
                    users.add(_s(user))
        finally:
            if data is not self.r:
                data.close()
        return users

    # -- writing -----------------------------------------------------------------------------
    def rules_for(self, name: str) -> list[str]:
        if name in SERVICE_USERS:
            return service_rules(name, self.sites, setinfo=self.setinfo)
        return user_rules(name, self.sites, groups=self.groups, setinfo=self.setinfo)

    def set(
        self,
        name: str,
        rules: Sequence[str],
        *,
        password_hashes: Sequence[str] | None = None,
        enabled: bool | None = None,
        dry_run: bool = False,
    ) -> tuple[str, list[str]]:
        """Make ``name`` have exactly ``rules``.  Passwords and on/off are kept
        unless given; a new user without a password is created off.  Returns
        ``("created"|"updated"|"unchanged", args)``."""
        views = self._each_view(name)
        before = next((e for e in views if e is not None), None)
        if before is not None and name not in SERVICE_USERS and not before.made_for(name):
            raise BadUser(f"Redis user {name!r} was not made by jobtap acl: left alone")
        lost = sorted(before.sites - set(self.sites)) if before else []
        if lost and name not in SERVICE_USERS:
            self.warnings.append(
                f"{name} loses site(s) {', '.join(lost)}: name every site of this Redis "
                "(--site A --site B)"
            )
        if password_hashes is None:
            password_hashes = before.password_hashes if before else []
        if enabled is None:
            enabled = before.enabled if before else bool(password_hashes)
        args = setuser_args(rules, password_hashes=password_hashes, enabled=enabled)
        if dry_run:
            return ("created" if before is None else "updated"), args
        self._on_every_node("ACL", "SETUSER", name, *args)
        if before is None:
            return "created", args
        after = self._each_view(name)
        same = len(after) == len(views) and all(
            a is not None and b is not None and a.raw == b.raw for a, b in zip(after, views)
        )
        return ("unchanged" if same else "updated"), args

    def sync(
        self,
        users: Iterable[str],
        *,
        services: bool = True,
        service_passwords: dict[str, str] | None = None,
        dry_run: bool = False,
    ) -> SyncReport:
        """Create or update a Redis user per cluster user (and the service users).

        Cluster users keep their passwords and on/off state; new ones are created
        off, without a password, until ``grant``.  A service user gets the password
        in ``service_passwords`` if given, else keeps its own, else a new one is
        generated (returned in ``report.generated``, shown once)."""
        report = SyncReport()
        todo: list[str] = []
        for name in sorted(set(users)):
            try:
                todo.append(check_user(name, self.reserved))
            except BadUser as exc:
                report.skipped[name] = str(exc)
        if services:
            for name in SERVICE_USERS:
                given = (service_passwords or {}).get(name)
                existing = self.get(name)
                hashes: list[str] | None = None
                if given:
                    hashes = [hash_password(given)]
                elif (existing is None or not existing.password_hashes) and not dry_run:
                    report.generated[name] = new_password()
                    hashes = [hash_password(report.generated[name])]
                outcome, args = self.set(
                    name,
                    self.rules_for(name),
                    password_hashes=hashes,
                    enabled=True,
                    dry_run=dry_run,
                )
                getattr(report, outcome).append(name)
                report.lines.append(acl_line(name, args))
        for name in todo:
            try:
                outcome, args = self.set(name, self.rules_for(name), dry_run=dry_run)
            except BadUser as exc:
                report.skipped[name] = str(exc)
                continue
            getattr(report, outcome).append(name)
            report.lines.append(acl_line(name, args))
            if not any(a.startswith("#") for a in args):
                report.no_password.append(name)
        return report

    def grant(self, user: str, password: str) -> str:
        """Give ``user`` exactly the cluster-user rules and ``password`` (replacing
        any other password) and turn it on.  Returns created/updated/unchanged."""
        check_user(user, self.reserved)
        outcome, _ = self.set(
            user, self.rules_for(user), password_hashes=[hash_password(password)], enabled=True
        )
        return outcome

    def revoke(self, user: str) -> bool:
        """Delete the Redis user: Redis closes every connection it has, pub/sub
        subscribers included.  False if there was no such user."""
        check_user(user, self.reserved)
        before = self.get(user)
        if before is None:
            return False
        if not before.made_for(user):
            raise BadUser(f"Redis user {user!r} was not made by jobtap acl: left alone")
        self._on_every_node("ACL", "DELUSER", user)
        return True

    def save(self) -> str | None:
        """Write the users to each server's ACL file (``ACL SAVE``); return the
        path of ``r``'s, or None when it has none (changes last until a restart).
        Another node without an ACL file is a warning."""
        path = None
        for node in self.nodes:
            if node.r is None or node.address in self.failed:
                continue
            try:
                conf = _s(node.r.config_get("aclfile")).get("aclfile") or ""
                if conf:
                    node.r.execute_command("ACL", "SAVE")
            except NODE_ERRORS as exc:
                if node.r is self.r:
                    raise
                self.failed[node.address] = f"ACL SAVE: {exc}"
                continue
            if node.r is self.r:
                path = conf or None
            elif not conf:
                self.warnings.append(
                    f"{node.address} has no aclfile: its users last until it restarts"
                )
        return path

    def listing(self, names: Iterable[str] | None = None) -> list[str]:
        """``ACL LIST`` lines (of ``names`` only, if given), password hashes masked."""
        wanted = set(names) if names is not None else None
        out = []
        for line in _s(self.r.execute_command("ACL", "LIST")):
            name = _acl_list_name(line)
            if wanted is not None and name not in wanted:
                continue
            out.append(" ".join("#<hash>" if t.startswith("#") else t for t in line.split(" ")))
        return out


def _version(r: redis.Redis) -> tuple[int, int]:
    version = str(_s(r.info("server")).get("redis_version", "0.0"))
    major, minor = (int(x) for x in (version.split(".") + ["0"])[:2])
    return major, minor


def _acl_list_name(line: str) -> str:
    return line.split(" ", 2)[1] if line.startswith("user ") else ""
