"""What a new user trips over in their first hour (the issue "A newcomer's first
hour"): each mistake is a clear one-line error, not a tight loop, a traceback or
a silent success."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from jobtap.cli.app import main
from sim.rig.wait import eventually
from tests.cli.test_top import terminal_env
from tests.support.terminal import Tmux


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


@pytest.mark.parametrize(
    ("backend", "interval"),
    [("sim", "0"), ("sim", "-1"), ("sim", "nan"), ("pbs", "0.5"), ("slurm", "0"), ("flux", "-1")],
)
def test_an_interval_below_the_floor_is_a_usage_error(backend, interval):
    """A collector that stat'ed in a tight loop would be qstat in a loop on a real
    site: refused before it connects (no Redis here)."""
    res = invoke("collector", "--backend", backend, "--interval", interval,
                 "--redis", "redis://127.0.0.1:1/0")  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--interval'" in res.output and "below the floor" in res.output
    assert "Traceback" not in res.output


def test_the_demo_refuses_it_too():
    res = invoke("demo", "--interval", "0")
    assert res.exit_code == 2 and "below the floor" in res.output, res.output


@pytest.mark.parametrize("command", ["collector", "worker"])
def test_an_unknown_log_level_is_a_usage_error(command):
    res = invoke(command, "--log-level", "bogus", "--redis", "redis://127.0.0.1:1/0")
    assert res.exit_code == 2, res.output
    assert "Invalid value for '--log-level'" in res.output and "debug" in res.output
    assert "Traceback" not in res.output


SITE_WRITTEN = "hpc1"


def unwritten(url: str) -> str:
    return f"Error: no collector has written site 'nosuchsite' at {url}\n"


@pytest.fixture
def one_site(r, redis_server, monkeypatch, tmp_path):
    """A site with one job, as a collector and worker leave it; no credential file
    and no JOBTAP_* settings of the machine's."""
    from tests.support.sdk import Writer

    for name in [k for k in os.environ if k.startswith("JOBTAP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    Writer(r, site=SITE_WRITTEN).job("1.pbs", state="running")
    return redis_server.url


# each command, and what makes it end by itself on the right site
SDK_COMMANDS = {
    "watch --all": ["--timeout", "0.2"],
    "watch --user alice": ["--timeout", "0.2"],
    "watch 1.pbs --user alice": ["--timeout", "0.2"],
    "export": ["--idle", "0.2"],
    "show 1.pbs": [],
    "wait 1.pbs --user alice": ["--state", "running", "--timeout", "30"],
}


@pytest.mark.parametrize("command", list(SDK_COMMANDS))
def test_a_mistyped_site_is_said_not_a_silent_success(one_site, command):
    """`status` already said it: the SDK commands say the same at once, where
    they would have exited 0 silently, waited forever or blamed the job."""
    args = [*command.split(), "--redis", one_site]
    res = invoke(*args, "--site", "nosuchsite", *SDK_COMMANDS[command])
    assert res.exit_code == 1, (command, res.output)
    assert res.output == unwritten(one_site)
    ok = invoke(*args, "--site", SITE_WRITTEN, *SDK_COMMANDS[command])
    assert ok.exit_code == 0, (command, ok.output)


def test_top_on_a_mistyped_site_exits_with_the_same_line(one_site, tmp_path):
    """In a real terminal (tmux); its stderr and exit status kept in files (tmux
    may show a dead pane's status as 0 for a moment before the real one)."""
    err, status = tmp_path / "top.err", tmp_path / "top.status"
    top = [sys.executable, "-m", "jobtap.cli", "top", "--redis", one_site, "--site", "nosuchsite"]
    shell = f"{shlex.join(top)} 2>{shlex.quote(str(err))}; echo $? >{shlex.quote(str(status))}"
    term = Tmux(tmp_path)
    try:
        term.start(["sh", "-c", shell],
                   terminal_env(JOBTAP_CREDENTIALS=str(tmp_path / "none")))  # fmt: skip
        eventually(lambda: status.exists() and status.read_text().endswith("\n"),
                   what="top exiting")  # fmt: skip
        assert status.read_text() == "1\n"
        assert (
            err.read_text() == f"Error: no collector has written site 'nosuchsite' at {one_site}\n"
        )
    finally:
        term.close()


def commands(group: click.Group = main, path: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_every_option_of_every_command_says_what_it_does():
    """A walk of every command: an option without help text fails it."""
    silent = [(" ".join(path), p.opts[0]) for path, command in commands()
              for p in command.params
              if isinstance(p, click.Option) and not p.hidden and not p.help]  # fmt: skip
    assert silent == []


def test_poke_help_is_laid_out_as_every_other_commands():
    """poke parses with argparse (it starts per job, from a hook, without click),
    yet its help reads as the click commands' does, every option explained."""
    res = subprocess.run([sys.executable, "-m", "jobtap.cli", "poke", "--help"],
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("Usage: jobtap poke [OPTIONS] JOBID...\n\n  Tell a collector")
    options = out.split("\nOptions:\n", 1)[1].splitlines()
    named = [line.split()[0] for line in options if line.startswith("  -")]
    assert named == ["--redis", "--site", "--strict", "--timeout", "--ended", "-h,"], out
    for line in options:
        if line.startswith("  -") and not line.startswith("  -h"):
            assert len(line.split()) > 2, line  # the option, then its text
    assert "--timeout FLOAT  Seconds" in out and "Show this message and exit." in out


def test_status_wording_of_normal_events():
    from jobtap.cli.status import fenced_line, tier_lines

    assert "deposed" not in fenced_line(3) and "normal after a restart" in fenced_line(3)
    (line,) = tier_lines({"cycles_reconcile": "1", "interval": "5", "reconcile_every": "60"})
    assert line.endswith("(1 cycle)"), line
