"""Where a client connects: arguments, environment, the credential file (and its
mode), several sites."""

from __future__ import annotations

import pytest

import jobtap
from jobtap import credentials
from jobtap.urls import resolve, safe_url


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.delenv("JOBTAP_REDIS", raising=False)
    monkeypatch.delenv("JOBTAP_SITE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("JOBTAP_CREDENTIALS", raising=False)
    return monkeypatch


def write(path, text, mode=0o600):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_defaults_without_anything(env):
    configs, site = resolve()
    assert site == "default"
    assert [(c.site, c.url, c.username, c.password) for c in configs] == [
        ("default", "redis://127.0.0.1:6379/0", None, None)
    ]


def test_environment_then_arguments(env):
    env.setenv("JOBTAP_REDIS", "redis://envhost:1/0")
    env.setenv("JOBTAP_SITE", "envsite")
    configs, site = resolve()
    assert (configs[0].url, site) == ("redis://envhost:1/0", "envsite")
    configs, site = resolve("redis://arg:2/0", site="argsite")
    assert (configs[0].url, site) == ("redis://arg:2/0", "argsite")


def test_default_credential_file(env, tmp_path):
    write(
        tmp_path / ".config" / "jobtap" / "credentials",
        "# for alice\n\nurl = redis://cred:3/0\nusername = alice\npassword = 'p w#1'\nsite=hpc1\n",
    )
    configs, site = resolve()
    c = configs[0]
    assert (c.url, c.username, c.password, site) == ("redis://cred:3/0", "alice", "p w#1", "hpc1")
    env.setenv("JOBTAP_REDIS", "redis://envhost:1/0")  # the environment wins over the file
    assert resolve()[0][0].url == "redis://envhost:1/0"
    # explicit user name and password: the file is not read
    assert resolve(username="bob", password="x")[0][0].username == "bob"
    assert jobtap.Client().user == "alice"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_credential_file_readable_by_others_is_refused(env, tmp_path, mode):
    path = write(tmp_path / ".config" / "jobtap" / "credentials", "username = a\n", mode)
    with pytest.raises(jobtap.CredentialsError, match=f"mode {mode:04o}: refused.*chmod 600"):
        jobtap.Client()
    path.chmod(0o400)
    assert jobtap.Client().user == "a"


def test_credential_file_errors(env, tmp_path):
    with pytest.raises(jobtap.CredentialsError, match="does not exist"):
        jobtap.Client(credentials=tmp_path / "missing")
    bad = write(tmp_path / "c1", "usr = alice\n")
    with pytest.raises(jobtap.CredentialsError, match="c1:1: unknown key 'usr'"):
        credentials.load(bad)
    bad = write(tmp_path / "c2", "# ok\njust words\n")
    with pytest.raises(jobtap.CredentialsError, match="c2:2: expected 'key = value'"):
        credentials.load(bad)
    assert "s3cret" not in repr(credentials.parse("password = s3cret"))
    assert isinstance(jobtap.CredentialsError("x"), ValueError)


def test_bad_site_and_url(env):
    with pytest.raises(jobtap.ConfigError, match="site name"):
        jobtap.Client(site="a b")
    with pytest.raises(jobtap.ConfigError, match="not a Redis URL"):
        jobtap.Client("http://x")


def test_several_sites(env):
    configs, site = resolve(
        "redis://main:1/0",
        username="u",
        password="p",
        sites={"a": None, "b": "redis://b:2/0", "c": {"url": "redis://c:3/0", "username": "cu"}},
    )
    assert site == "a"
    assert [(c.site, c.url, c.username, c.password) for c in configs] == [
        ("a", "redis://main:1/0", "u", "p"),
        ("b", "redis://b:2/0", "u", "p"),
        ("c", "redis://c:3/0", "cu", "p"),
    ]
    with pytest.raises(jobtap.ConfigError, match="not one of"):
        resolve(sites={"a": None}, site="z", username="u")
    with pytest.raises(jobtap.ConfigError, match="unknown settings"):
        resolve(sites={"a": {"uri": "x"}}, username="u")


def test_passwords_stay_out_of_messages():
    assert safe_url("redis://alice:s3cret@host:1/0") == "redis://alice:***@host:1/0"
    assert safe_url("redis://host:1/0") == "redis://host:1/0"
