"""How backends plug in: each is one entry point of the group ``jobtap.backends``
in pyproject.toml, read from the installed metadata by
collector/backends/__init__.py, which names none of them (the simulator registers
itself like the schedulers)."""

from __future__ import annotations

import tomllib

import click
import pytest

from jobtap.cli.collector import collector
from jobtap.collector.backends import BACKENDS, GROUP, make_backend
from sim.rig.paths import ROOT


def declared() -> dict[str, str]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["entry-points"][GROUP]


def test_the_installed_backends_are_the_ones_pyproject_declares():
    # a stale install (pyproject.toml edited, `make setup` not run again) shows here
    assert sorted(BACKENDS) == sorted(declared())
    assert {"sim", "pbs", "slurm", "flux"} <= set(BACKENDS)


def test_every_backend_loads_as_a_class():
    from importlib.metadata import entry_points

    for ep in entry_points(group=GROUP):
        assert isinstance(ep.load(), type), ep
        assert ep.value == declared()[ep.name]


def test_the_collector_command_offers_every_backend():
    (option,) = [p for p in collector.params if p.name == "backend"]
    assert isinstance(option.type, click.Choice)
    assert sorted(option.type.choices) == sorted(BACKENDS)


def test_an_unknown_backend_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown backend 'nope'") as err:
        make_backend("nope")
    assert all(name in str(err.value) for name in BACKENDS)


def test_the_simulator_is_built_through_its_entry_point():
    sim = make_backend("sim", jobs=5, nodes=2)
    assert type(sim).__module__ == "jobtap.sim.backend"
