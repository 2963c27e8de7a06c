"""cli/passwords.py: a service's Redis password from a file, the environment or
systemd's credential, never a command line; a credential file for admin tools.
Logins are tried against a real redis-server with ACL users."""

from __future__ import annotations

import configparser
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner

from jobtap.cli import passwords
from jobtap.cli.passwords import PasswordError, service_url
from sim.rig.paths import ROOT

PASSWORD = "s3cret/with:odd@chars"


@pytest.fixture
def writer(redis_server, r) -> str:
    """A Redis user ``writer`` with PASSWORD; the URL naming only the user."""
    r.execute_command("ACL", "SETUSER", "writer", "on", f">{PASSWORD}", "~*", "+@all")
    return f"redis://writer@127.0.0.1:{redis_server.port}/0"


def secret(tmp_path: Path, text: str = PASSWORD + "\n", mode: int = 0o600) -> Path:
    path = tmp_path / "writer.password"
    path.write_text(text)
    path.chmod(mode)
    return path


def logs_in(url: str) -> str:
    client = redis.Redis.from_url(url)
    try:
        who = client.acl_whoami()
        return who.decode() if isinstance(who, bytes) else str(who)
    finally:
        client.close()


def test_the_password_file_logs_the_urls_user_in(writer, tmp_path):
    url = service_url(writer, password_file=secret(tmp_path), environ={})
    assert logs_in(url) == "writer"
    assert PASSWORD not in writer


@pytest.mark.parametrize("source", ["env-file", "env", "systemd"])
def test_the_environment_and_systemds_credential_give_it_too(writer, tmp_path, source):
    path = secret(tmp_path)
    environ = {
        "env-file": {passwords.PASSWORD_FILE_ENV: str(path)},
        "env": {passwords.PASSWORD_ENV: PASSWORD},
        "systemd": {"CREDENTIALS_DIRECTORY": str(tmp_path)},
    }[source]
    if source == "systemd":
        path.rename(tmp_path / passwords.SYSTEMD_CREDENTIAL)
    assert logs_in(service_url(writer, environ=environ)) == "writer"


def test_the_first_source_wins(tmp_path):
    path = secret(tmp_path, "from-file\n")
    environ = {passwords.PASSWORD_ENV: "from-env", passwords.PASSWORD_FILE_ENV: "/nonexistent"}
    assert passwords.find_password(path, environ) == ("from-file", str(path))
    assert passwords.find_password(None, {passwords.PASSWORD_ENV: "x"}) == (
        "x",
        "$JOBTAP_REDIS_PASSWORD",
    )
    assert passwords.find_password(None, {}) is None


def test_a_url_with_a_password_is_used_as_it_is(tmp_path):
    url = "redis://writer:inline@h:6379/0"
    assert service_url(url, password_file=secret(tmp_path), environ={}) == url
    assert service_url("redis://writer@h:6379/0", environ={}) == "redis://writer@h:6379/0"


def test_mistakes_are_one_clear_line(tmp_path):
    with pytest.raises(PasswordError, match=r"needs a user name in the URL, e\.g\. "
                       r"redis://writer@h:6379/0.*from \$JOBTAP_REDIS_PASSWORD"):  # fmt: skip
        service_url("redis://h:6379/0", environ={passwords.PASSWORD_ENV: "x"})
    with pytest.raises(PasswordError, match="every user may read it"):
        service_url("redis://writer@h/0", password_file=secret(tmp_path, mode=0o644))
    with pytest.raises(PasswordError, match="is empty"):
        service_url("redis://writer@h/0", password_file=secret(tmp_path, "\n"))
    with pytest.raises(PasswordError, match="cannot read"):
        service_url("redis://writer@h/0", password_file=tmp_path / "missing")


@click.command()
@click.option("--redis", "redis_url", envvar="JOBTAP_REDIS", default="redis://127.0.0.1:1/0",
              callback=passwords.with_password)  # fmt: skip
@click.option("--site", default="default")
@passwords.password_file_option
@passwords.credentials_option
def probe(redis_url: str, site: str) -> None:
    """A command wired as cli/options.py wires --redis: it prints who it logs in as."""
    site = passwords.credentials_site(click.get_current_context(), site)
    click.echo(f"{logs_in(redis_url)} {site}")


def test_a_command_takes_the_password_file_option_or_its_environment(writer, tmp_path):
    path = secret(tmp_path)
    runner = CliRunner()
    res = runner.invoke(probe, ["--redis", writer, "--password-file", str(path)], env={})
    assert res.exit_code == 0 and res.output == "writer default\n", res.output
    res = runner.invoke(probe, [], env={"JOBTAP_REDIS": writer,
                                        passwords.PASSWORD_FILE_ENV: str(path)})  # fmt: skip
    assert res.exit_code == 0 and res.output == "writer default\n", res.output
    res = runner.invoke(probe, ["--redis", writer.replace("writer@", "")],
                        env={passwords.PASSWORD_ENV: PASSWORD})  # fmt: skip
    assert res.exit_code == 1 and "needs a user name" in res.output


def test_credentials_give_the_url_login_and_site(writer, tmp_path):
    creds = tmp_path / "credentials"
    creds.write_text(f'url = "{writer.replace("writer@", "")}"\nusername = writer\n'
                     f'password = "{PASSWORD}"\nsite = hpc1\n')  # fmt: skip
    creds.chmod(0o600)
    runner = CliRunner()
    res = runner.invoke(probe, ["--credentials", str(creds)], env={})
    assert res.exit_code == 0 and res.output == "writer hpc1\n", res.output
    res = runner.invoke(probe, ["--credentials", str(creds), "--site", "hpc2"], env={})
    assert res.output == "writer hpc2\n", res.output
    creds.chmod(0o644)
    res = runner.invoke(probe, ["--credentials", str(creds)], env={})
    assert res.exit_code == 1 and "chmod 600" in res.output


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read(ROOT / "deploy" / "systemd" / name)
    return parser


@pytest.mark.parametrize("name", ["jobtap-collector.service", "jobtap-worker@.service"])
def test_the_systemd_units_hand_the_writers_password_over_as_a_credential(name):
    service = unit(name)["Service"]
    name_, _, source = service["LoadCredential"].partition(":")
    assert name_ == passwords.SYSTEMD_CREDENTIAL and source == "/etc/jobtap/writer.password"
    assert "--redis" not in service["ExecStart"] and service["User"] == "jobtap"
    assert service["EnvironmentFile"] == "/etc/jobtap/jobtap.env"
    text = (ROOT / "deploy" / "systemd" / name).read_text()
    assert "writer:" not in text  # no URL with a password, not even as an example


def test_no_readme_example_puts_a_password_in_a_command_line():
    readme = (ROOT / "deploy" / "pbs" / "README.md").read_text()
    assert "$(cat" not in readme and "writer:…@" not in readme
    assert "--password-file" in readme and "JOBTAP_REDIS_PASSWORD_FILE" in readme


def test_the_services_commands_take_the_password_file(writer, r, tmp_path, monkeypatch):
    """`jobtap collector --once` logs in as the writer with --password-file, and
    JOBTAP_REDIS_PASSWORD_FILE does for `jobtap status`: the URL on the command
    line (what `ps` shows) names only the user."""
    from jobtap.cli.app import main

    monkeypatch.delenv(passwords.PASSWORD_ENV, raising=False)
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    r.execute_command("ACL", "SETUSER", "writer", "allchannels")  # the collector publishes
    path = secret(tmp_path)
    runner = CliRunner()
    res = runner.invoke(main, ["collector", "--backend", "sim", "--site", "pw1", "--once",
                               "--redis", writer, "--password-file", str(path),
                               "--state-dir", str(tmp_path / "state")])  # fmt: skip
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["status", "--redis", writer, "--site", "pw1"],
                        env={passwords.PASSWORD_FILE_ENV: str(path)})  # fmt: skip
    assert res.exit_code == 0 and "pw1" in res.output, res.output
    res = runner.invoke(main, ["status", "--redis", writer, "--site", "pw1"], env={})
    assert res.exit_code != 0 and "writer" in res.output, res.output


def test_every_command_takes_the_password_the_same_ways(writer, r, tmp_path, monkeypatch):
    """The README's site block: JOBTAP_REDIS names only the user and
    JOBTAP_REDIS_PASSWORD_FILE (or JOBTAP_REDIS_PASSWORD, or --password-file) gives
    the password to `show`, `watch`, `wait` and `export` as to `status`; a refused
    login says where the password came from, or where it was looked for."""
    from jobtap.cli.app import main
    from tests.support.sdk import Writer

    for name in (passwords.PASSWORD_ENV, passwords.PASSWORD_FILE_ENV, "CREDENTIALS_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    r.execute_command("ACL", "SETUSER", "writer", "allchannels")  # watch subscribes
    Writer(r, site="pw2").job("1.pbs", state="running")
    path = secret(tmp_path)
    runner = CliRunner()
    commands = [["show", "1.pbs"], ["watch", "1.pbs", "--timeout", "0.2"],
                ["wait", "1.pbs", "--state", "running", "--timeout", "10"],
                ["export", "--since", "0", "--count", "1"]]  # fmt: skip
    ways = [({passwords.PASSWORD_FILE_ENV: str(path)}, []),
            ({passwords.PASSWORD_ENV: PASSWORD}, []),
            ({}, ["--password-file", str(path)])]  # fmt: skip
    site = {"JOBTAP_REDIS": writer, "JOBTAP_SITE": "pw2"}
    for environ, options in ways:
        for command in commands:
            res = runner.invoke(main, [*command, *options], env={**site, **environ})
            assert res.exit_code == 0 and "1.pbs" in res.output, (command, environ, res.output)
    wrong = secret(tmp_path, "not-it\n")
    for command in (commands[0], ["status"]):
        res = runner.invoke(main, [*command, "--password-file", str(wrong)], env=site)
        assert res.exit_code == 1, res.output
        (line,) = res.output.splitlines()
        assert "refused the credentials" in line and f"the password is from {wrong}" in line, line
        res = runner.invoke(main, command, env=site)
        (line,) = res.output.splitlines()
        assert "no password found; looked at --password-file, $JOBTAP_REDIS_PASSWORD_FILE" in line
