"""What a new user trips over in their first hour (the issue "A newcomer's first
hour"): each mistake is a clear one-line error, not a tight loop, a traceback or
a silent success."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from jobtap.cli.app import main


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
