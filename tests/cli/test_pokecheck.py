"""cli/pokecheck.py and cli/redissetup.py against real redis-servers: a poker
whose ACL names the old site has every poke of the new one refused, the real
PBS hook swallows the refusal, and the doctor's checks say so (from ACL LOG as
the admin, from the hook's own settings without one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from jobtap.acl.rules import poker_rules
from jobtap.cli import pokecheck
from jobtap.cli.redissetup import setup_warnings
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from sim.rig.pbs_hook import run_hook

OLD, NEW = "hpc1", "hpc2"
PASSWORD = "poker-password"


@pytest.fixture
def poker(redis_server, r) -> str:
    """``poker`` as ``jobtap acl sync --site hpc1`` made it; its URL."""
    r.execute_command("ACL", "SETUSER", "poker", "reset", "on", f">{PASSWORD}",
                      *poker_rules([OLD]))  # fmt: skip
    return f"redis://poker:{PASSWORD}@127.0.0.1:{redis_server.port}/0"


def hook_settings(tmp_path: Path, url: str, site: str) -> Path:
    path = tmp_path / "pbs-hook.json"
    path.write_text(json.dumps({"jobtap": "/opt/jobtap/bin/jobtap", "site": site, "redis": url,
                                "stream": SiteKeys(site).pokes, "maxlen": 1000,
                                "timeout": 0.25}))  # fmt: skip
    return path


def test_pokes_the_hook_swallowed_are_found_in_acl_log(poker, r, tmp_path):
    settings = hook_settings(tmp_path, poker, NEW)
    run = run_hook(json.loads(settings.read_text()), tmp_path / "imported.json",
                   "EXECJOB_EPILOGUE", "7.server")  # fmt: skip
    assert run.accepted == [True]  # PBS is never held up...
    assert not r.exists(SiteKeys(NEW).pokes)  # ...and the poke is lost
    name, level, message = pokecheck.check_acl_log(r, NEW, admin=True)
    assert (name, level) == ("refused", "FAIL"), message
    assert "user poker may not append to jobtap:{hpc2}:pokes" in message
    assert "install-hook.sh --site hpc2" in message
    assert pokecheck.check_acl_log(r, OLD, admin=True)[1] == "ok"


def test_pokes_arriving_again_after_the_fix_leave_a_warning(poker, r):
    with redis.Redis.from_url(poker) as p, pytest.raises(redis.exceptions.NoPermissionError):
        p.xadd(SiteKeys(NEW).pokes, {"ids": "1.server"})
    r.execute_command("ACL", "SETUSER", "poker", *poker_rules([OLD, NEW]))
    with redis.Redis.from_url(poker) as p:
        p.xadd(SiteKeys(NEW).pokes, {"ids": "2.server"})
    _name, level, message = pokecheck.check_acl_log(r, NEW, admin=True)
    assert level == "warn" and "1 pokes refused" in message, message


def test_a_wrong_password_counts_too(poker, r):
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(poker.replace(PASSWORD, "old-password")).ping()
    _name, level, message = pokecheck.check_acl_log(r, NEW, admin=True)
    assert level == "FAIL" and "poker's password was refused" in message, message


def test_without_acl_rights_it_says_what_it_cannot_see(redis_server, r):
    r.execute_command("ACL", "SETUSER", "writer", "on", ">w", "~*", "&*", "+@all", "-acl")
    writer = redis.Redis.from_url(f"redis://writer:w@127.0.0.1:{redis_server.port}/0")
    _name, level, message = pokecheck.check_acl_log(writer, NEW)
    assert level == "warn" and "--admin-redis" in message  # no pokes lately: may be refused
    writer.xadd(SiteKeys(NEW).pokes, {"ids": "1.server"})
    assert pokecheck.check_acl_log(writer, NEW) is None  # pokes arrive: nothing to say
    writer.close()


def test_the_hooks_own_settings_are_tried_without_an_admin(poker, r, tmp_path):
    fail = pokecheck.check_hook_settings(hook_settings(tmp_path, poker, NEW), NEW)
    assert fail is not None and fail[:2] == ("pbs hook", "FAIL") and "refuses" in fail[2], fail
    assert PASSWORD not in fail[2]
    ok = pokecheck.check_hook_settings(hook_settings(tmp_path, poker, OLD), OLD)
    assert ok is not None and ok[1] == "ok", ok
    assert not r.exists(SiteKeys(OLD).pokes)  # the try wrote nothing
    other = pokecheck.check_hook_settings(hook_settings(tmp_path, poker, OLD), NEW)
    assert other is not None and other[1] == "FAIL" and "pokes site 'hpc1'" in other[2]
    assert pokecheck.check_hook_settings(tmp_path / "absent.json", NEW) is None


def test_poke_checks_put_both_together(poker, redis_server, r, tmp_path):
    settings = hook_settings(tmp_path, poker, NEW)
    checks = pokecheck.poke_checks(r, NEW, admin_url=redis_server.url, hook_settings=settings)
    assert [(name, level) for name, level, _ in checks] == [
        ("pbs hook", "FAIL"),  # the try itself is refused, and logged:
        ("refused", "FAIL"),
    ]


def test_redis_set_up_first_or_a_warning_that_says_how(redis_server, r, tmp_path):
    warnings = setup_warnings(r)
    assert len(warnings) == 2 and all("deploy/redis/setup.sh" in w for w in warnings)
    assert "no ACL file" in warnings[0] and "default user is on" in warnings[1]
    acl = tmp_path / "set-up" / "users.acl"
    acl.parent.mkdir()
    acl.write_text("user default on nopass ~* &* +@all\nuser admin on >pw ~* &* +@all\n")
    server = RedisServer(tmp_path / "set-up", args=["--aclfile", str(acl)]).start()
    try:
        admin = server.client(username="admin", password="pw")
        admin.execute_command("ACL", "SETUSER", "default", "off")  # as users.acl has it
        assert setup_warnings(admin) == []
        admin.close()
    finally:
        server.stop()
