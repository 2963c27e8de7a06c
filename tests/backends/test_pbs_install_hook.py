"""deploy/pbs/install-hook.sh, as an admin runs it: against a stand-in of qmgr
that keeps the hooks it was given (sim/standins/qmgr_standin.py) and real
redis-servers for the service users; idempotent, --dry-run changes nothing and
shows every change, --uninstall undoes it, the settings it writes make a working
hook, a re-run with another site converges, and the jobtap it installs runs as an
unprivileged user (runuser -u nobody).

One real install (a virtual environment made with the system Python, jobtap
pip-installed from a copy of this checkout) is shared by the module's tests; they
run on one xdist worker, one after another."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from jobtap.keys import POKES_MAXLEN, SiteKeys
from jobtap.sim.localredis import RedisServer
from sim.rig.paths import FAKE_BIN, ROOT
from sim.rig.pbs_hook import run_hook
from tests.support.release import source_copy

SCRIPT = ROOT / "deploy" / "pbs" / "install-hook.sh"
HOOK = ROOT / "deploy" / "pbs" / "jobtap_poke_hook.py"
SITE = "hpc1"
ADMIN_PASSWORD = "admin-password"

pytestmark = pytest.mark.xdist_group("pbs_install_hook")


def script_env(qmgr_state: Path, **extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("JOBTAP_") or k.startswith("JOBTAP_FAKE_")}  # fmt: skip
    return {**clean, "JOBTAP_FAKE_QMGR": str(qmgr_state), "JOBTAP_FAKE_PYTHON": sys.executable,
            **extra}  # fmt: skip


def as_nobody(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True,
                          text=True, cwd="/", timeout=60)  # fmt: skip


@dataclass
class Installed:
    top: Path  # world-readable (0755), as /opt is
    prefix: Path
    source: Path
    private_python: Path  # a Python only root may run, as a pyenv under /root
    result: subprocess.CompletedProcess
    redis_server: RedisServer
    config_dir: Path


def set_up_redis(workdir: Path) -> RedisServer:
    """A Redis set up as deploy/redis/setup.sh leaves it: an ACL file, an admin,
    the default user off."""
    workdir.mkdir(parents=True)
    acl = workdir / "users.acl"
    acl.write_text(
        f"user default on nopass ~* &* +@all\nuser admin on >{ADMIN_PASSWORD} ~* &* +@all\n"
    )
    server = RedisServer(workdir, args=["--aclfile", str(acl)]).start()
    with server.client(username="admin", password=ADMIN_PASSWORD) as admin:
        admin.execute_command("ACL", "SETUSER", "default", "off")
        admin.execute_command("ACL", "SAVE")
    return server


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    """The install as the issue found it, then run again: /opt/jobtap made by a
    Python only root may run, that Python first on PATH.  The script remakes the
    environment with the system Python."""
    top = Path(tempfile.mkdtemp(prefix="jobtap-install-"))
    top.chmod(0o755)
    private = top / "root-only"
    private.mkdir(mode=0o700)
    (private / "python3").symlink_to("/usr/bin/python3")
    prefix = top / "opt-jobtap"
    subprocess.run([str(private / "python3"), "-m", "venv", "--without-pip", str(prefix)],
                   check=True, timeout=120)  # fmt: skip
    (prefix / "bin" / "jobtap").write_text(f"#!{prefix}/bin/python\nprint('jobtap old')\n")
    (prefix / "bin" / "jobtap").chmod(0o755)
    assert "Permission denied" in as_nobody(str(prefix / "bin" / "jobtap")).stderr
    source = source_copy(top / "src")
    server = set_up_redis(top / "redis")
    config_dir = top / "etc-jobtap"
    config_dir.mkdir(mode=0o700)
    (config_dir / "admin.env").write_text(
        f"JOBTAP_ADMIN_REDIS=redis://admin:{ADMIN_PASSWORD}@127.0.0.1:{server.port}/0\n"
    )
    env = script_env(top / "qmgr.json", PATH=f"{private}:{os.environ['PATH']}")
    argv = [str(SCRIPT), "--site", SITE, "--redis", f"redis://127.0.0.1:{server.port}/0",
            "--prefix", str(prefix), "--source", str(source), "--config-dir", str(config_dir),
            "--qmgr", str(FAKE_BIN / "qmgr"), "--service-user", "nobody"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    try:
        yield Installed(top, prefix, source, private / "python3", result, server, config_dir)
    finally:
        server.stop()
        shutil.rmtree(top, ignore_errors=True)


class Admin:
    """Runs the script with the shared jobtap, and a settings folder and qmgr's
    state of its own."""

    def __init__(self, tmp_path: Path, redis_url: str, prefix: Path) -> None:
        self.prefix = prefix
        self.config_dir = tmp_path / "etc-jobtap"
        self.state = tmp_path / "qmgr.json"
        self.redis_url = redis_url

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        argv = [str(SCRIPT), "--prefix", str(self.prefix), "--config-dir", str(self.config_dir),
                "--qmgr", str(FAKE_BIN / "qmgr"), "--service-user", "nobody", *args]  # fmt: skip
        res = subprocess.run(argv, capture_output=True, text=True, env=script_env(self.state),
                             timeout=300)  # fmt: skip
        if check:
            assert res.returncode == 0, res.stdout + res.stderr
        return res

    def install(self, *extra: str, site: str = SITE, check: bool = True,
                admin: bool = True) -> subprocess.CompletedProcess:  # fmt: skip
        who = ["--admin-redis", self.redis_url] if admin else []
        return self.run("--site", site, "--redis", self.redis_url, *who, *extra, check=check)

    def qmgr(self) -> dict:
        return (
            json.loads(self.state.read_text()) if self.state.exists() else {"hooks": {}, "log": []}
        )

    def log_since(self, n: int) -> list[str]:
        return self.qmgr()["log"][n:]

    def settings(self) -> dict:
        return json.loads((self.config_dir / "pbs-hook.json").read_text())


@pytest.fixture
def admin(tmp_path, redis_server, installed) -> Admin:
    assert installed.result.returncode == 0, installed.result.stdout + installed.result.stderr
    return Admin(tmp_path, redis_server.url, installed.prefix)


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    assert os.access(SCRIPT, os.X_OK)


def test_install_creates_the_server_hook_and_its_settings(admin, r):
    res = admin.install()
    out = res.stdout
    # 5. a Redis nobody set up (this one: no ACL file, the default user open) is warned of
    assert "this Redis has no ACL file" in res.stderr and "Before you start" in res.stderr
    assert "default user is on without a password" in res.stderr
    # 6. query_other_jobs is checked, not assumed: True, as the real 23.06 server has it
    assert "query_other_jobs: True" in out
    hooks = admin.qmgr()["hooks"]
    assert set(hooks) == {"jobtap_poke"}
    hook = hooks["jobtap_poke"]
    assert hook["attributes"]["event"] == "runjob,modifyjob,jobobit"
    assert (hook["attributes"]["fail_action"], hook["attributes"]["alarm"]) == ("none", "5")
    installed = admin.prefix / "share" / "jobtap" / "pbs" / "jobtap_poke_hook.py"
    assert hook["imported"]["python"] == HOOK.read_text() == installed.read_text()
    config_file = admin.config_dir / "pbs-hook.json"
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    config = json.loads(config_file.read_text())
    assert json.loads(hook["imported"]["config"]) == config
    password = (admin.config_dir / "poker.password").read_text().strip()
    assert config["redis"].startswith(f"redis://poker:{password}@127.0.0.1:")
    assert (config["site"], config["stream"], config["maxlen"]) == (
        SITE, SiteKeys(SITE).pokes, POKES_MAXLEN)  # fmt: skip
    assert config["jobtap"] == str(admin.prefix / "bin" / "jobtap")
    assert r.execute_command("ACL", "GETUSER", "poker")  # acl sync made the service users
    for needed in ("--site hpc1", "--follow", "PATH=", "worker --site hpc1", "doctor"):
        assert needed in out, needed


def test_the_settings_written_make_a_working_mom_hook(admin, r, tmp_path):
    admin.install("--mom")
    config = json.loads((admin.config_dir / "pbs-hook.json").read_text())
    run = run_hook(config, tmp_path / "imported.json", "EXECJOB_EPILOGUE", "7.server")
    assert run.accepted == [True] and run.logged == []
    (_id, fields), = r.xrange(SiteKeys(SITE).pokes)  # fmt: skip
    assert (fields[b"ids"], fields[b"ended"]) == (b"7.server", b"1")


def test_install_again_changes_nothing_but_reimports(admin):
    admin.install()
    before = json.loads(json.dumps(admin.qmgr()["hooks"]))
    n = len(admin.qmgr()["log"])
    out = admin.install().stdout
    again = admin.log_since(n)
    assert not any(c.startswith("create") or c.startswith("delete") for c in again), again
    assert sum(c.startswith("import hook jobtap_poke") for c in again) == 2
    assert admin.qmgr()["hooks"] == before
    assert "pbs-hook.json: unchanged" in out and "exists, updating" in out


def test_mom_hook_comes_and_goes_with_the_option(admin):
    admin.install("--mom")
    hooks = admin.qmgr()["hooks"]
    assert hooks["jobtap_mom_poke"]["attributes"]["event"] == "execjob_epilogue"
    assert hooks["jobtap_mom_poke"]["imported"]["config"] == (
        admin.config_dir / "pbs-hook.json").read_text()  # fmt: skip
    admin.install()
    assert set(admin.qmgr()["hooks"]) == {"jobtap_poke"}


def test_a_changed_setting_is_imported_again(admin, redis_server):
    admin.install()
    admin.redis_url = f"redis://localhost:{redis_server.port}/0"
    admin.install()
    imported = json.loads(admin.qmgr()["hooks"]["jobtap_poke"]["imported"]["config"])
    assert f"@localhost:{redis_server.port}/0" in imported["redis"]


def test_dry_run_changes_nothing(admin):
    out = admin.install("--dry-run", "--mom").stdout
    assert {c.split()[0] for c in admin.qmgr()["log"]} == {"list"}
    assert admin.qmgr()["hooks"] == {}
    assert not admin.config_dir.exists()
    assert "would run:" in out and "create hook jobtap_poke" in out


def test_uninstall_removes_hooks_and_settings_and_is_idempotent(admin):
    admin.install("--mom")
    out = admin.run("--uninstall").stdout
    assert admin.qmgr()["hooks"] == {}
    assert not (admin.config_dir / "pbs-hook.json").exists()
    assert (admin.config_dir / "poker.password").exists()  # passwords stay
    assert "jobtap_mom_poke: deleted" in out
    again = admin.run("--uninstall").stdout
    assert "jobtap_poke: not installed" in again


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--redis", "redis://127.0.0.1:1/0"], "--site is required"),
        (["--site", "hpc1"], "--redis is required"),
        (["--site", "bad site", "--redis", "redis://127.0.0.1:1/0"], "bad site name"),
        (["--site", "hpc1", "--redis", "redis://127.0.0.1:1/0"], "give --admin-redis"),
        (["--bogus"], "unknown argument"),
    ],
)
def test_mistakes_are_one_clear_line(admin, args, message):
    res = admin.run(*args, check=False)
    assert res.returncode != 0 and message in res.stderr, res.stderr


def test_qmgr_refuses_non_root(admin, monkeypatch):
    monkeypatch.setenv("JOBTAP_FAKE_QMGR_UID", "1000")
    res = admin.install(check=False)
    assert res.returncode != 0 and "Unauthorized" in res.stderr


# -- 1. a jobtap every user may run -----------------------------------------------------------
def test_jobtap_is_remade_with_the_system_python_and_runs_as_nobody(installed):
    res = installed.result
    assert res.returncode == 0, res.stdout + res.stderr
    assert "cannot be run by nobody" in res.stdout and "remaking" in res.stdout
    assert "Permission denied" in res.stdout  # what was wrong, said
    ran = as_nobody(str(installed.prefix / "bin" / "jobtap"), "--version")
    assert ran.returncode == 0 and ran.stdout.startswith("jobtap "), ran.stderr
    cfg = (installed.prefix / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in cfg and str(installed.private_python.parent) not in cfg
    assert f"runs as nobody ({ran.stdout.strip()})" in res.stdout


def test_a_python_other_users_cannot_run_is_refused(installed, redis_server, tmp_path):
    prefix = installed.top / "opt-jobtap-private"
    res = subprocess.run(
        [str(SCRIPT), "--site", SITE, "--redis", redis_server.url, "--admin-redis",
         redis_server.url, "--prefix", str(prefix), "--python", str(installed.private_python),
         "--config-dir", str(tmp_path / "etc"), "--qmgr", str(FAKE_BIN / "qmgr"),
         "--service-user", "nobody"],
        capture_output=True, text=True, env=script_env(tmp_path / "qmgr.json"), timeout=120,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"{installed.private_python} cannot be run by nobody" in res.stderr
    assert "--python" in res.stderr and not prefix.exists()


@pytest.mark.parametrize("dry_run", [False, True], ids=["install", "dry-run"])
def test_a_host_without_the_package_index_is_told_the_way_round(installed, redis_server,
                                                                tmp_path, dry_run):  # fmt: skip
    """A PBS server that cannot reach the package index (the OpenPBS lab's, in a
    network namespace of its own): after pip's error, the script says how to install
    from a wheelhouse instead (deploy/pbs/README.md, "Without the package index")."""
    prefix = installed.top / f"opt-jobtap-no-index-{int(dry_run)}"
    empty = tmp_path / "wheelhouse"
    empty.mkdir()
    res = subprocess.run(
        [str(SCRIPT), "--site", SITE, "--redis", redis_server.url, "--admin-redis",
         redis_server.url, "--prefix", str(prefix), "--source", str(installed.source),
         "--config-dir", str(tmp_path / "etc"), "--qmgr", str(FAKE_BIN / "qmgr"),
         "--service-user", "nobody", *(["--dry-run"] if dry_run else [])],
        capture_output=True, text=True, timeout=300,
        env=script_env(tmp_path / "qmgr.json", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(empty)),
    )  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    where = "a temporary environment" if dry_run else str(prefix)
    assert f"pip could not install {installed.source} into {where} (pip's error above)" in (
        res.stderr)  # fmt: skip
    assert "PIP_NO_INDEX=1 PIP_FIND_LINKS=DIR --source DIR/jobtap-*.whl" in res.stderr
    assert '(deploy/pbs/README.md, "Without the package index")' in res.stderr
    assert not (prefix / "bin" / "jobtap").exists() and not (tmp_path / "etc").exists()
    assert not (tmp_path / "qmgr.json").exists()  # no hook was touched


# -- 2. a re-run with another site converges ---------------------------------------------------
def test_a_rerun_with_another_site_gives_poker_the_new_stream(admin, r, tmp_path):
    admin.install()
    out = admin.install(site="hpc2").stdout
    config = admin.settings()
    assert (config["site"], config["stream"]) == ("hpc2", SiteKeys("hpc2").pokes)
    assert "poker may append to jobtap:{hpc2}:pokes" in out
    run = run_hook(config, tmp_path / "imported.json", "EXECJOB_EPILOGUE", "7.server")
    assert run.accepted == [True] and run.logged == []
    assert r.xlen(SiteKeys("hpc2").pokes) == 1  # the poke arrived, not refused
    with redis.Redis.from_url(config["redis"]) as poker:  # the old site keeps its pokes
        poker.xadd(SiteKeys(SITE).pokes, {"ids": "1.server"})
    again = admin.install(site="hpc2").stdout  # and a third run changes nothing
    assert "pbs-hook.json: unchanged" in again


def test_a_rerun_that_cannot_give_poker_the_site_fails_loudly(admin, r):
    admin.install()
    res = admin.install(site="hpc2", admin=False, check=False)  # poker.password exists
    assert res.returncode == 1, res.stdout + res.stderr
    assert "Redis refuses poker's pokes to jobtap:{hpc2}:pokes" in res.stderr
    assert "--admin-redis" in res.stderr
    (entry,) = r.acl_log()
    assert (entry["reason"], entry["object"], entry["username"]) == (
        "key", SiteKeys("hpc2").pokes, "poker")  # fmt: skip


# -- 4. --dry-run shows every change -----------------------------------------------------------
def test_dry_run_on_a_fresh_prefix_shows_every_change(installed, redis_server, r, tmp_path):
    prefix, config_dir = installed.top / "opt-jobtap-fresh", tmp_path / "etc-jobtap"
    res = subprocess.run(
        [str(SCRIPT), "--site", SITE, "--redis", redis_server.url, "--admin-redis",
         redis_server.url, "--prefix", str(prefix), "--source", str(installed.source),
         "--config-dir", str(config_dir), "--qmgr", str(FAKE_BIN / "qmgr"),
         "--service-user", "jobtap-test-absent", "--mom", "--dry-run"],
        capture_output=True, text=True, env=script_env(tmp_path / "qmgr.json"), timeout=600,
    )  # fmt: skip
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    for change in (
        "would run: /usr/bin/python3 -m venv " + str(prefix),
        f"would run: {prefix}/bin/pip install",
        "would run: useradd --system",  # 6. the units' user
        "jobtap-test-absent",
        f"would run: install -d -m 0700 {config_dir}",
        "would run: jobtap acl sync --site hpc1",
        "user poker reset",
        "~jobtap:{hpc1}:pokes",
        f"would write {config_dir}/pbs-hook.json (mode 0600",
        '"stream": "jobtap:{hpc1}:pokes"',
        "would run: install -m 0644",
        "create hook jobtap_poke'",
        "import hook jobtap_mom_poke application/x-config default",
    ):
        assert change in out, change
    assert f'"redis": "redis://poker:…@127.0.0.1:{redis_server.port}/0"' in out
    assert not prefix.exists() and not config_dir.exists()
    assert r.execute_command("ACL", "GETUSER", "poker") is None
    assert {c.split()[0] for c in json.loads((tmp_path / "qmgr.json").read_text())["log"]} == {
        "list"}  # fmt: skip


# -- 5. Redis set up first ---------------------------------------------------------------------
def test_the_admin_of_a_set_up_redis_comes_from_admin_env(installed):
    out, err = installed.result.stdout, installed.result.stderr
    assert f"the Redis admin: from {installed.config_dir}/admin.env" in out
    assert "no ACL file" not in err and "default user is on" not in err
    assert "poker may append to jobtap:{hpc1}:pokes" in out
    with installed.redis_server.client(username="admin", password=ADMIN_PASSWORD) as r:
        assert r.acl_getuser("poker")["keys"] == ["~jobtap:{hpc1}:pokes"]
    acl = (installed.top / "redis" / "users.acl").read_text()
    assert "user poker" in acl  # saved: it outlives a restart


# -- 6. the units' user sees every job ---------------------------------------------------------
def test_query_other_jobs_false_is_said_with_what_to_do(admin):
    subprocess.run([str(FAKE_BIN / "qmgr"), "-c", "set server query_other_jobs = false"],
                   check=True, env=script_env(admin.state))  # fmt: skip
    err = admin.install().stderr
    assert "query_other_jobs is false" in err and "set server query_other_jobs = true" in err
    assert "operators +=" in err
