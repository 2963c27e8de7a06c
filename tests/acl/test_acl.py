"""Redis ACLs (jobtap.acl, ``jobtap acl``) against real redis-servers whose
default user is off: exact rules, hostile user names, sync/grant/revoke, the SDK
as a user with only her credential file, and the deploy/redis files."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import time

import click
import orjson
import pytest
import redis
from click.testing import CliRunner

import jobtap
from jobtap import credentials
from jobtap.acl import files as acl_files
from jobtap.acl import rules as acl
from jobtap.cli import acl as cli_acl
from jobtap.keys import escape_user
from jobtap.sim.localredis import RedisServer, free_port
from sim.rig.paths import ROOT
from sim.rig.wait import eventually
from tests.support.acl import (
    ADMIN_PW,
    HOSTILE,
    NO_RETRY,
    OPERATOR_PW,
    SITE,
    K,
    cli,
    raw,
    refused,
    run,
    set_up_users,
)
from tests.support.prereq import missing
from tests.support.sdk import CountingClient, once_subscribed


def test_rules_of_a_user_are_exactly_these():
    assert acl.user_rules("alice", [SITE]) == [
        "-@all", "+ping", "+select", "+exists", "+hget", "+hmget", "+hgetall", "+smembers",
        "+xrange", "+xrevrange", "+xread", "+xinfo|stream", "+zrange", "+subscribe", "+unsubscribe",
        "+ssubscribe", "+sunsubscribe", "+info|cluster", "+cluster|slots", "+readonly",
        "+asking",
        "%R~jobtap:{hpc1}:u:alice:*", "%R~jobtap:{hpc1}:node:*", "%R~jobtap:{hpc1}:queue:*",
        "%R~jobtap:{hpc1}:nodes", "%R~jobtap:{hpc1}:queues",
        "&jobtap:{hpc1}:u:alice", "&jobtap:{hpc1}:nodes",
        "(~jobtap:{hpc1}:u:alice:events +xgroup|create +xreadgroup +xack +xautoclaim"
        " +xinfo|groups)",
    ]  # fmt: skip
    no_groups = acl.user_rules("alice", [SITE, "hpc2"], groups=False)
    assert not any(r.startswith("(") for r in no_groups)
    assert "&jobtap:{hpc2}:u:alice" in no_groups and "%R~jobtap:{hpc2}:u:alice:*" in no_groups
    assert "+client|setinfo" in acl.user_rules("alice", [SITE], setinfo=True)
    assert acl.poker_rules([SITE, "hpc2"]) == [
        "-@all", "+ping", "+select", "+xadd", "+info|cluster", "+cluster|slots", "+readonly",
        "+asking", "~jobtap:{hpc1}:pokes", "~jobtap:{hpc2}:pokes",
    ]  # fmt: skip
    args = acl.setuser_args(["-@all"], password_hashes=["ab"], enabled=True)
    assert args == ["reset", "resetkeys", "resetchannels", "-@all", "#ab", "on"]
    assert acl.hash_password("x") == (
        "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"
    )


@pytest.mark.parametrize("name", ["alice", *HOSTILE])
def test_patterns_of_any_name_hold_no_glob_character_but_the_final_star(name):
    for rule in acl.user_rules(name, [SITE]):
        if rule.startswith("%R~"):
            body = rule[3:]
            body = body[:-1] if body.endswith(":*") else body
        elif rule.startswith("&"):
            body = rule[1:]
        elif rule.startswith("("):
            body = " ".join(t for t in rule[1:-1].split() if t.startswith("~"))
        else:
            continue
        assert not set(body) & set("*?[]\\"), rule
        assert " " not in body.strip()
    esc = escape_user(name)
    assert ":" not in esc and f"&{K.user_channel(name)}" in acl.user_rules(name, [SITE])


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "a b",
        "a\tb",
        "a\nb",
        "a\x00b",
        "a\u200bb",
        "é" * 300,
        "writer",
        "operator",
        "poker",
        "default",
        "admin",
    ],
)
def test_names_that_cannot_be_users_are_refused(bad):
    with pytest.raises(acl.BadUser):
        acl.check_user(bad)


# -- hostile names against a real server ----------------------------------------------------------
def test_hostile_user_names_cannot_widen_anyones_access(acl_server, writer):
    users = ["alice", "bob", *HOSTILE]
    set_up_users(acl_server, users)
    for i, user in enumerate(users):
        writer.job(f"{i}.pbs", user)
    # A job id that holds another user's key suffix: per-site patterns anchored at
    # jobtap:{hpc1}:u:<escaped>: keep it bob's (jobtap:*:u:alice:* would match it).
    writer.job("x:u:alice:y", "bob")
    assert acl_server.client().exists(K.job("bob", "x:u:alice:y"))
    conns = {u: raw(acl_server, u, f"pw-{u}") for u in users}
    try:
        for i, u in enumerate(users):
            c = conns[u]
            assert run(c, "HGETALL", K.job(u, f"{i}.pbs"))[0] == "ok"
            kind, members = run(c, "SMEMBERS", K.user_jobs(u))
            assert kind == "ok" and f"{i}.pbs".encode() in members
            for j, v in enumerate(users):
                if v == u:
                    continue
                assert refused(run(c, "HGETALL", K.job(v, f"{j}.pbs"))), (u, v)
                assert refused(run(c, "EXISTS", K.job(v, f"{j}.pbs"))), (u, v)
                assert refused(run(c, "XRANGE", K.user_events(v), "-", "+")), (u, v)
                assert refused(run(c, "SMEMBERS", K.user_jobs(v))), (u, v)
            if u != "bob":
                assert refused(run(c, "HGETALL", K.job("bob", "x:u:alice:y"))), u
        # channels: a subscription that is refused leaves the connection usable
        for u in users:
            c = conns[u]
            for v in users:
                if v != u:
                    assert refused(run(c, "SUBSCRIBE", K.user_channel(v))), (u, v)
            assert run(c, "SUBSCRIBE", K.user_channel(u))[0] == "ok"
    finally:
        for c in conns.values():
            c.disconnect()


# -- sync -----------------------------------------------------------------------------------------
def test_sync_from_the_jobs_is_idempotent_and_keeps_passwords_and_subscribers(
    acl_server, admin, writer
):
    set_up_users(acl_server, [])  # writer and operator only
    writer.job("1.pbs", "alice")
    writer.job("2.pbs", "bob")
    writer.job("3.pbs", "a b")  # not a possible Redis user: skipped, not fatal
    res = cli("sync", "--redis", acl_server.admin_url, "--site", SITE)
    assert res.exit_code == 0, res.output
    assert "skipped 'a b'" in res.output and "2 created" in res.output
    # new users exist, off and without a password, until granted
    alice = admin.execute_command("ACL", "GETUSER", "alice")
    assert "off" in alice["flags"] and alice["passwords"] == []
    with pytest.raises(redis.AuthenticationError):
        acl_server.as_user("alice", "").ping()
    res = cli(
        "grant",
        "alice",
        "--redis",
        acl_server.admin_url,
        "--site",
        SITE,
        "-o",
        str(acl_server.dir / "alice.cred"),
    )
    assert res.exit_code == 0, res.output
    password = credentials.load(acl_server.dir / "alice.cred").password
    before = {u: admin.execute_command("ACL", "GETUSER", u) for u in ("alice", "bob", "writer")}
    sub = raw(acl_server, "alice", password, timeout=2)
    assert run(sub, "SUBSCRIBE", K.user_channel("alice"))[0] == "ok"
    res = cli("sync", "--redis", acl_server.admin_url, "--site", SITE)
    assert res.exit_code == 0, res.output
    assert "0 created, 0 updated, 5 unchanged" in res.output
    after = {u: admin.execute_command("ACL", "GETUSER", u) for u in ("alice", "bob", "writer")}
    assert after == before
    # the live subscriber was left alone and the password still works
    writer.job("1.pbs", "alice", state="running")
    message = sub.read_response()
    assert message[0] == b"message" and orjson.loads(message[2])["object_id"] == "1.pbs"
    assert acl_server.as_user("alice", password).ping()
    sub.disconnect()
    # the ACL file holds the result (ACL SAVE)
    saved = acl_server.aclfile.read_text()
    assert "user alice on" in saved and "%R~jobtap:{hpc1}:u:alice:*" in saved


def rights(getuser: dict) -> tuple:
    """What ACL GETUSER says a user may do, in a comparable form (Redis lists the
    commands in no particular order)."""

    def part(d: dict) -> tuple:
        return tuple(frozenset(d[k].split()) for k in ("commands", "keys", "channels"))

    return part(getuser), frozenset(part(s) for s in getuser["selectors"])


def test_sync_users_file_and_dry_run_lines_are_a_valid_acl_file(acl_server, admin, tmp_path):
    users_file = tmp_path / "users"
    users_file.write_text("# cluster users\nalice\n\n  bob  \nalice:bob\n")
    before = admin.execute_command("ACL", "LIST")
    res = cli(
        "sync",
        "--redis",
        acl_server.admin_url,
        "--site",
        SITE,
        "--users-file",
        str(users_file),
        "--dry-run",
    )
    assert res.exit_code == 0, res.output
    assert admin.execute_command("ACL", "LIST") == before  # nothing changed
    lines = [ln for ln in res.output.splitlines() if ln.startswith("user ")]
    names = [ln.split(" ")[1] for ln in lines]
    assert names == ["writer", "operator", "poker", "alice", "alice:bob", "bob"]
    # the printed lines, as an ACL file, give exactly what sync then sets
    aclfile = tmp_path / "printed.acl"
    aclfile.write_text(f"user admin on >{ADMIN_PW} ~* &* +@all\n" + "\n".join(lines) + "\n")
    other = RedisServer(tmp_path / "other", args=["--aclfile", str(aclfile)])
    other.dir.mkdir(exist_ok=True)
    other.start()
    try:
        loaded = other.client(username="admin", password=ADMIN_PW, decode_responses=True)
        res = cli(
            "sync",
            "--redis",
            acl_server.admin_url,
            "--site",
            SITE,
            "--users-file",
            str(users_file),
            "--no-services",
        )
        assert res.exit_code == 0, res.output
        for name in ("alice", "alice:bob", "bob"):
            mine = admin.execute_command("ACL", "GETUSER", name)
            theirs = loaded.execute_command("ACL", "GETUSER", name)
            assert rights(theirs) == rights(mine)
    finally:
        other.stop()


def test_sync_service_users_with_a_secrets_dir(acl_server, admin, tmp_path):
    secrets_dir = tmp_path / "secrets"
    res = cli(
        "sync",
        "--redis",
        acl_server.admin_url,
        "--users-file",
        os.devnull,
        "--secrets-dir",
        str(secrets_dir),
    )
    assert res.exit_code == 0, res.output
    for name in acl.SERVICE_USERS:
        f = secrets_dir / f"{name}.password"
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert acl_server.as_user(name, f.read_text().strip()).ping()
    # kept on the next sync; a new password in the file is taken
    writer_pw = (secrets_dir / "writer.password").read_text().strip()
    (secrets_dir / "operator.password").write_text("rotated\n")
    res = cli(
        "sync",
        "--redis",
        acl_server.admin_url,
        "--users-file",
        os.devnull,
        "--secrets-dir",
        str(secrets_dir),
    )
    assert res.exit_code == 0, res.output
    assert acl_server.as_user("writer", writer_pw).ping()
    assert acl_server.as_user("operator", "rotated").ping()
    # without a secrets dir, a new service user's password is printed once
    admin.execute_command("ACL", "DELUSER", "writer")
    res = cli("sync", "--redis", acl_server.admin_url, "--users-file", os.devnull)
    line = next(ln for ln in res.output.splitlines() if ln.startswith("writer: redis://"))
    url = line.split()[1]
    assert redis.Redis.from_url(url).ping()
    assert ADMIN_PW not in res.output


# -- grant and revoke -----------------------------------------------------------------------------
def test_grant_writes_a_0600_credential_file_and_rotates_the_password(acl_server, tmp_path):
    path = tmp_path / "home" / "cfg" / "credentials"
    res = cli("grant", "alice", "--redis", acl_server.admin_url, "--site", SITE, "-o", str(path))
    assert res.exit_code == 0, res.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    cred = credentials.load(path)
    assert (cred.username, cred.site) == ("alice", SITE)
    assert cred.url == f"redis://127.0.0.1:{acl_server.port}/0"  # no admin credentials in it
    assert len(cred.password) >= 40 and ADMIN_PW not in path.read_text()
    assert acl_server.as_user("alice", cred.password).ping()
    assert [p.name for p in path.parent.iterdir()] == ["credentials"]  # no temp file left
    res = cli("grant", "alice", "--redis", acl_server.admin_url, "--site", SITE, "-o", str(path))
    assert res.exit_code == 0, res.output
    new = credentials.load(path).password
    assert new != cred.password and acl_server.as_user("alice", new).ping()
    with pytest.raises(redis.AuthenticationError):
        acl_server.as_user("alice", cred.password).ping()


@pytest.mark.parametrize("name", ["writer", "operator", "poker", "default", "admin", "a b"])
def test_grant_refuses_service_users_and_impossible_names(acl_server, admin, tmp_path, name):
    before = admin.execute_command("ACL", "LIST")
    res = cli("grant", name, "--redis", acl_server.admin_url, "-o", str(tmp_path / "c"))
    assert res.exit_code == 1 and "Error:" in res.output
    assert not (tmp_path / "c").exists()
    assert admin.execute_command("ACL", "LIST") == before


def test_grant_names_with_quotes_and_unicode_round_trip_through_the_file(acl_server, tmp_path):
    for name in ["'q'", '"dq"', "élodie", "a=b", "#x", "x" * 200]:
        path = tmp_path / f"c{len(name)}{ord(name[0])}"
        assert cli("grant", name, "--redis", acl_server.admin_url, "-o", str(path)).exit_code == 0
        cred = credentials.load(path)
        assert cred.username == name
        assert acl_server.as_user(name, cred.password).ping()


def test_grant_as_root_gives_the_file_to_the_user(acl_server, tmp_path):
    if os.geteuid() != 0:
        missing("root (jobtap acl grant gives the file to the user with chown)")
    account = pwd.getpwnam("nobody")
    path = tmp_path / "nobody.cred"
    res = cli("grant", "nobody", "--redis", acl_server.admin_url, "-o", str(path))
    assert res.exit_code == 0, res.output
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (
        account.pw_uid,
        account.pw_gid,
        0o600,
    )


def test_credential_dirs_in_a_home_are_walked_without_following_symlinks(tmp_path):
    home = tmp_path / "home"
    (home / "elsewhere").mkdir(parents=True)
    (home / ".config").symlink_to(home / "elsewhere")
    with pytest.raises(OSError, match="not a plain directory"):
        acl_files._walk(home, [".config", "jobtap"], create=True, owner=None)
    assert list((home / "elsewhere").iterdir()) == []
    (home / ".config").unlink()
    fd = acl_files._walk(home, [".config", "jobtap"], create=True, owner=None)
    os.close(fd)
    assert stat.S_IMODE((home / ".config" / "jobtap").stat().st_mode) == 0o700


def test_revoke_cuts_off_a_live_subscriber_within_a_second(
    acl_server, admin, writer, tmp_path, hermetic
):
    set_up_users(acl_server, [])
    path = tmp_path / "alice.cred"
    assert (
        cli(
            "grant", "alice", "--redis", acl_server.admin_url, "--site", SITE, "-o", str(path)
        ).exit_code
        == 0
    )
    password = credentials.load(path).password
    writer.job("1.pbs", "alice")
    client = jobtap.Client(credentials=path)
    got: list[jobtap.Change] = []
    sub = client.subscribe(got.append)
    assert [c.object_id for c in got] == ["1.pbs"]
    plain = raw(acl_server, "alice", password, timeout=1.0)
    assert run(plain, "SUBSCRIBE", K.user_channel("alice"))[0] == "ok"
    watcher = raw(acl_server, "admin", ADMIN_PW)  # an operator's view of her channel
    assert run(watcher, "SUBSCRIBE", K.user_channel("alice"))[0] == "ok"
    try:
        started = time.monotonic()
        res = cli(
            "revoke", "alice", "--redis", acl_server.admin_url, "--remove-file", "-o", str(path)
        )
        assert res.exit_code == 0 and "connections closed" in res.output, res.output
        with pytest.raises(redis.ConnectionError):
            plain.read_response()  # the server closed it (a timeout would say otherwise)
        assert time.monotonic() - started < 1.0
        assert not [c for c in admin.client_list() if c.get("user") == "alice"]
        assert not path.exists()
        with pytest.raises(redis.AuthenticationError):
            acl_server.as_user("alice", password).ping()
        assert admin.execute_command("ACL", "GETUSER", "alice") is None
        # What happens next never reaches her.  It is published (the watcher gets
        # it); her client does not retry a refused login forever: the subscription
        # ends, loudly, and nothing is delivered after its end, so what she got
        # by then is all she ever gets.
        writer.job("1.pbs", "alice", state="running")
        message = watcher.read_response()
        assert message[0] == b"message" and orjson.loads(message[2])["record"]["state"] == "running"
        assert sub.wait_closed(timeout=10), [c.type for c in got]
        assert isinstance(sub.error, jobtap.AuthenticationFailed)
        assert [c.type for c in got] == ["initial"]
    finally:
        sub.close()
        client.close()
        plain.disconnect()
        watcher.disconnect()
    res = cli("revoke", "alice", "--redis", acl_server.admin_url)
    assert res.exit_code == 0 and "no Redis user" in res.output


def test_show_masks_password_hashes(acl_server):
    set_up_users(acl_server, ["alice"])
    res = cli("show", "--redis", acl_server.admin_url, "alice", "writer")
    assert res.exit_code == 0, res.output
    assert "user alice on" in res.output and "#<hash>" in res.output
    assert acl.hash_password("pw-alice") not in res.output
    assert cli("show", "--redis", acl_server.admin_url, "nobody-here").exit_code == 1


def test_acl_commands_need_acl_rights(acl_server):
    set_up_users(acl_server, [])
    res = cli("sync", "--redis", acl_server.url_as("operator", OPERATOR_PW), "--dry-run")
    assert res.exit_code == 1 and "may not manage ACLs" in res.output
    assert OPERATOR_PW not in res.output


# -- the SDK as alice -----------------------------------------------------------------------------
def test_sdk_as_alice_with_only_her_credential_file(acl_server, writer, hermetic):
    home = hermetic
    set_up_users(acl_server, ["bob"])
    default = home / ".config" / "jobtap" / "credentials"
    res = cli("grant", "alice", "--redis", acl_server.admin_url, "--site", SITE, "-o", str(default))
    assert res.exit_code == 0, res.output
    writer.job("1.pbs", "alice")
    writer.job("2.pbs", "bob")
    writer.node("n1")
    writer.queue("workq")
    with CountingClient() as client:  # the credential file is all it has
        assert (client.user, client.site) == ("alice", SITE)
        assert client.job("1.pbs").state == "queued"
        assert [j.id for j in client.jobs(user="alice")] == ["1.pbs"]
        assert [n.id for n in client.nodes()] == ["n1"]
        assert [q.id for q in client.queues()] == ["workq"]
        # her own jobs, present and future, and waiting for one
        got: list[jobtap.Change] = []
        with client.subscribe(got.append):
            assert [(c.type, c.object_id) for c in got] == [("initial", "1.pbs")]

            def meanwhile() -> None:
                writer.job("1.pbs", "alice", state="running")
                writer.job("3.pbs", "alice")
                writer.job("1.pbs", "alice", state="completed", exit_status=0)

            t = once_subscribed(client, 2, meanwhile)  # the wait below is the second
            done = client.wait("1.pbs", timeout=10)
            t.join()
            assert (done.state, done.exit_status) == ("completed", 0)
            eventually(lambda: len(got) >= 4, timeout=5, what="her four changes")
        assert [(c.type, c.object_id) for c in got] == [
            ("initial", "1.pbs"),
            ("state", "1.pbs"),
            ("new", "3.pbs"),
            ("final", "1.pbs"),
        ]
        # her stream, plain and with a consumer group on it
        with client.stream(user="alice", since="0", idle_timeout=0.3) as stream:
            assert [c.object_id for c in stream] == ["1.pbs", "1.pbs", "3.pbs", "1.pbs"]
        with client.stream(group="mine", user="alice", since="0", idle_timeout=0.3) as stream:
            assert len(list(stream)) == 4
        # bob's job stays out of reach, and who owns it is not revealed
        assert client.job("2.pbs") is None
        with pytest.raises(jobtap.PermissionDenied):
            client.job("2.pbs", user="bob")
        with pytest.raises(jobtap.PermissionDenied):
            client.subscribe(got.append, user="bob")
        with pytest.raises(jobtap.PermissionDenied):
            list(client.stream(since="0", idle_timeout=0.3))  # the site stream


# -- deploy/redis ---------------------------------------------------------------------------------
def test_deploy_files_give_a_redis_with_the_default_user_off(tmp_path):
    conf_dir, secrets_dir = tmp_path / "etc-redis", tmp_path / "etc-jobtap"
    port = free_port()
    env = dict(os.environ, JOBTAP_REDIS_PORT=str(port))
    subprocess.run(
        ["sh", str(ROOT / "deploy/redis/setup.sh"), "127.0.0.1", str(conf_dir), str(secrets_dir)],
        env=env,
        check=True,
        capture_output=True,
    )
    admin_env = secrets_dir / "admin.env"
    assert stat.S_IMODE(admin_env.stat().st_mode) == 0o600
    admin_url = admin_env.read_text().strip().split("=", 1)[1]
    assert admin_url.startswith("redis://admin:") and admin_url.endswith(f"@127.0.0.1:{port}/0")

    class Server(RedisServer):
        def client(self, **kw):
            return redis.Redis.from_url(admin_url, **kw)

    (tmp_path / "data").mkdir(exist_ok=True)
    server = Server(tmp_path / "data", port=port, args=["--include", str(conf_dir / "jobtap.conf")])
    server.start()
    try:
        r = server.client(decode_responses=True)
        config = r.config_get("*")
        assert config["acl-pubsub-default"] == "resetchannels"
        assert config["protected-mode"] == "yes" and config["bind"] == "127.0.0.1"
        assert config["aclfile"] == str(conf_dir / "users.acl")
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, retry=NO_RETRY).ping()  # the default user is off
        res = cli(
            "sync",
            "--redis",
            admin_url,
            "--site",
            SITE,
            "--users-file",
            os.devnull,
            "--secrets-dir",
            str(secrets_dir),
        )
        assert res.exit_code == 0, res.output
        assert "warning" not in res.output
        server.restart()  # the users were saved to the ACL file
        writer_pw = (secrets_dir / "writer.password").read_text().strip()
        assert redis.Redis(port=port, username="writer", password=writer_pw, retry=NO_RETRY).ping()
        setup_again = subprocess.run(
            [
                "sh",
                str(ROOT / "deploy/redis/setup.sh"),
                "127.0.0.1",
                str(conf_dir),
                str(secrets_dir),
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        assert (
            "keeping" in setup_again.stderr
            and "user writer" in (conf_dir / "users.acl").read_text()
        )
    finally:
        server.stop()


def test_sync_grant_new_writes_credentials_in_the_users_homes(acl_server, tmp_path, monkeypatch):
    homes = tmp_path / "homes"
    (homes / "alice").mkdir(parents=True)

    def account(name):  # alice has a system account, ghost has none
        if name != "alice":
            return None
        return pwd.struct_passwd(
            (name, "x", os.getuid(), os.getgid(), "", str(homes / name), "/bin/sh")
        )

    monkeypatch.setattr(acl_files, "system_account", account)
    users_file = tmp_path / "users"
    users_file.write_text("alice\nghost\n")
    args = [
        "sync",
        "--redis",
        acl_server.admin_url,
        "--site",
        SITE,
        "--users-file",
        str(users_file),
        "--grant-new",
    ]
    res = cli(*args)
    assert res.exit_code == 0, res.output
    assert "not granted 'ghost': no system account" in res.output
    assert "1 without a password yet" in res.output
    path = homes / "alice" / ".config" / "jobtap" / "credentials"
    assert f"granted alice: {path}" in res.output
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    cred = credentials.load(path)
    assert acl_server.as_user("alice", cred.password).ping()
    # granted users are left alone by the next run
    res = cli(*args)
    assert res.exit_code == 0 and "granted alice" not in res.output
    assert credentials.load(path).password == cred.password


def test_sync_warns_when_a_user_would_lose_a_site(acl_server, tmp_path):
    users_file = tmp_path / "users"
    users_file.write_text("alice\n")
    both = ["--site", SITE, "--site", "hpc2", "--users-file", str(users_file)]
    assert cli("sync", "--redis", acl_server.admin_url, *both).exit_code == 0
    admin = acl_server.client(decode_responses=True)
    assert "jobtap:{hpc2}:u:alice" in admin.execute_command("ACL", "GETUSER", "alice")["channels"]
    res = cli(
        "sync", "--redis", acl_server.admin_url, "--site", SITE, "--users-file", str(users_file)
    )
    assert res.exit_code == 0
    assert "warning: alice loses site(s) hpc2" in res.output


def test_register_adds_the_acl_group_to_a_cli():
    @click.group()
    def main() -> None:
        pass

    cli_acl.register(main)
    res = CliRunner().invoke(main, ["acl", "--help"])
    assert res.exit_code == 0
    assert all(f"  {c} " in res.output for c in ("sync", "grant", "revoke", "show"))


def test_redis_users_of_other_applications_are_left_alone(acl_server, admin, tmp_path):
    admin.execute_command("ACL", "SETUSER", "backup", "on", ">pw", "~backup:*", "+@all")
    before = admin.execute_command("ACL", "GETUSER", "backup")
    users_file = tmp_path / "users"
    users_file.write_text("backup\nalice\n")
    res = cli("sync", "--redis", acl_server.admin_url, "--users-file", str(users_file))
    assert res.exit_code == 0 and "skipped 'backup'" in res.output, res.output
    for command in (["grant", "backup", "-o", str(tmp_path / "c")], ["revoke", "backup"]):
        res = cli(*command, "--redis", acl_server.admin_url)
        assert res.exit_code == 1 and "not made by jobtap acl" in res.output
    assert admin.execute_command("ACL", "GETUSER", "backup") == before
    assert not (tmp_path / "c").exists()


def test_a_directory_in_the_credential_files_place_stops_grant_before_redis(
    acl_server, admin, tmp_path, monkeypatch
):
    home = tmp_path / "home"
    (home / ".config" / "jobtap" / "credentials").mkdir(parents=True)
    account = pwd.struct_passwd(("alice", "x", os.getuid(), os.getgid(), "", str(home), "/bin/sh"))
    monkeypatch.setattr(
        acl_files, "system_account", lambda name: account if name == "alice" else None
    )
    res = cli("grant", "alice", "--redis", acl_server.admin_url)
    assert res.exit_code == 1 and "is a directory" in res.output
    assert admin.execute_command("ACL", "GETUSER", "alice") is None
    assert sorted(p.name for p in (home / ".config" / "jobtap").iterdir()) == ["credentials"]
