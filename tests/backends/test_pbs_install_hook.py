"""deploy/pbs/install-hook.sh, as an admin runs it: against a stand-in of qmgr
that keeps the hooks it was given (tests/fakes/qmgr_standin.py) and a real
redis-server for the service users; idempotent, --dry-run changes nothing,
--uninstall undoes it, and the settings it writes make a working hook."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from jobtap.keys import POKES_MAXLEN, SiteKeys
from tests.support.paths import FAKE_BIN, ROOT
from tests.support.pbs_hook import run_hook

SCRIPT = ROOT / "deploy" / "pbs" / "install-hook.sh"
HOOK = ROOT / "deploy" / "pbs" / "jobtap_poke_hook.py"
SITE = "hpc1"


class Admin:
    """Runs the script with a jobtap prefix, a settings folder and qmgr's state
    of its own."""

    def __init__(self, tmp_path: Path, redis_url: str) -> None:
        self.prefix = tmp_path / "opt-jobtap"
        (self.prefix / "bin").mkdir(parents=True)
        (self.prefix / "bin" / "jobtap").symlink_to(Path(sys.executable).with_name("jobtap"))
        self.config_dir = tmp_path / "etc-jobtap"
        self.state = tmp_path / "qmgr.json"
        self.redis_url = redis_url

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "JOBTAP_FAKE_QMGR": str(self.state),
               "JOBTAP_FAKE_PYTHON": sys.executable}  # fmt: skip
        argv = [str(SCRIPT), "--prefix", str(self.prefix), "--config-dir", str(self.config_dir),
                "--qmgr", str(FAKE_BIN / "qmgr"), *args]  # fmt: skip
        res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        if check:
            assert res.returncode == 0, res.stdout + res.stderr
        return res

    def install(self, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("--site", SITE, "--redis", self.redis_url,
                        "--admin-redis", self.redis_url, *extra, check=check)  # fmt: skip

    def qmgr(self) -> dict:
        return (
            json.loads(self.state.read_text()) if self.state.exists() else {"hooks": {}, "log": []}
        )

    def log_since(self, n: int) -> list[str]:
        return self.qmgr()["log"][n:]


@pytest.fixture
def admin(tmp_path, redis_server) -> Admin:
    return Admin(tmp_path, redis_server.url)


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    assert os.access(SCRIPT, os.X_OK)


def test_install_creates_the_server_hook_and_its_settings(admin, r):
    out = admin.install().stdout
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
