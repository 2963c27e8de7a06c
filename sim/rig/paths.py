"""Where things are: the repository, the scheduler stand-ins (``sim/standins``), and the real
schedulers' captured output (``tests/fixtures/{pbs,slurm,flux}``, each with a
README that says which server and which command produced every file)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "sim" / "standins"
FAKE_BIN = FAKES / "bin"
FIXTURES = ROOT / "tests" / "fixtures"


def fixtures_dir() -> Path:
    """The captures: part of the repository, so a bare clone has them all."""
    return FIXTURES
