"""PSI/J's executor tests from a psij-python checkout (its repository head, say),
run with that checkout's PSI/J: ``jobtap-slurm`` beside PSI/J's stock ``slurm``
executor on the real Slurm, as :mod:`bench.psij_suite` runs the released version's.
The ``psij`` extra pins the releases jobtap is tested with; this says early whether
the next one keeps working.

    git clone https://github.com/ExaWorks/psij-python /tmp/psij-python
    sudo .venv/bin/python -m bench.psij_head /tmp/psij-python [TESTS...]

Makes (once; ``--venv``, default /tmp/jobtap-psij-head) a virtualenv with jobtap
from this checkout, PSI/J from the given one (whatever version it calls itself) and
pytest, then runs ``bench.psij_suite --tests CHECKOUT/tests`` in it: the
checkout's own test files and test helpers, every file whose tests take
``execparams``, and our ``conftest.py`` for the side-by-side table.  Exits as
:mod:`bench.psij_suite` does.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from sim.rig.paths import ROOT


def venv_with(venv: Path, checkout: Path) -> Path:
    """The virtualenv's python, with jobtap (editable) and the checkout's PSI/J."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "-e", f"{ROOT}[psij]", "pytest<9", "pytest-timeout"], check=True)
    # After jobtap: the checkout's PSI/J replaces the release its extra brought.
    subprocess.run([*pip, "--force-reinstall", "--no-deps", str(checkout)], check=True)
    subprocess.run([*pip, "-r", str(checkout / "requirements.txt")], check=True)
    return python


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.psij_head")
    parser.add_argument("checkout", type=Path, help="a psij-python checkout")
    parser.add_argument("selection", nargs="*", help="test files or node ids (default: all)")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/jobtap-psij-head"))
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    if not (checkout / "tests" / "test_executor.py").exists():
        parser.error(f"{checkout} is not a psij-python checkout (no tests/test_executor.py)")
    python = venv_with(args.venv, checkout)
    described = subprocess.run(
        ["git", "-C", str(checkout), "log", "-1", "--format=%h %ad %s", "--date=short"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    print(f"psij-python checkout {checkout}: {described or 'not a git checkout'}", flush=True)
    suite = [str(python), "-m", "bench.psij_suite", "--tests", str(checkout / "tests")]
    return subprocess.run([*suite, *args.selection], cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
