"""An editable install used outside the checkout, as the README's "Development"
says to make it: ``snakemake --executor jobtap-slurm`` and PSI/J find jobtap's
executors.  Snakemake scans the folders on ``sys.path`` (``pkgutil.iter_modules``)
and PSI/J looks for ``psij-descriptors/`` there; setuptools' default editable
install imports through a finder neither sees ("invalid choice: 'jobtap-slurm'").

The venv is fresh and the install is the README's command; the dependencies
(Snakemake, PSI/J, the build backend) are this venv's, put on the fresh venv's
path, so that nothing is downloaded and the test takes seconds.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from sim.rig.paths import ROOT
from tests.psij.test_psij_parts import IMPORTS as PSIJ_PROBE
from tests.support.release import Venv, source_copy

# pip install -e '.[snakemake]' --config-settings editable_mode=strict   # comment
COMMAND = re.compile(r"^pip install -e '\.\[snakemake\]'(?P<options>[^#\n]*)", re.MULTILINE)


def readme_options() -> list[str]:
    """The options the README gives ``pip install -e '.[snakemake]'``."""
    found = COMMAND.search((ROOT / "README.md").read_text())
    assert found, "README.md: no `pip install -e '.[snakemake]' ...` line"
    return shlex.split(found["options"])


def test_an_editable_install_lets_snakemake_and_psij_find_the_executors(tmp_path):
    source = source_copy(tmp_path / "jobtap")  # setuptools writes build/ and egg-info there
    venv = Venv.create(tmp_path / "venv")
    (venv.site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", venv.python, "install", "--quiet",
         "--disable-pip-version-check", "--no-deps", "--no-build-isolation",
         "--editable", f"{source}[snakemake,psij]", *readme_options()],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    elsewhere = tmp_path / "workflow"  # neither the checkout nor its copy
    elsewhere.mkdir()
    (elsewhere / "Snakefile").write_text('rule all:\n    shell: "true"\n')
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no PYTHONPATH
    run = subprocess.run(
        [venv.python, "-m", "snakemake", "--executor", "jobtap-slurm", "--jobs", "1",
         "--dry-run"],
        capture_output=True, text=True, timeout=120, cwd=elsewhere, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    where = subprocess.run(
        [venv.python, "-c", "import jobtap.snakemake as m; print(m.__file__)"],
        capture_output=True, text=True, timeout=60, cwd=elsewhere, env=env, check=True,
    ).stdout.strip()  # fmt: skip
    # editable: the checkout's file (strict mode reaches it through a link)
    assert Path(where).resolve() == source / "integrations" / "snakemake" / "__init__.py"

    psij = subprocess.run(
        [venv.python, "-c", PSIJ_PROBE],
        capture_output=True, text=True, timeout=60, cwd=elsewhere, env=env,
    )  # fmt: skip
    assert psij.returncode == 0, psij.stdout[-3000:] + psij.stderr[-3000:]
    assert {"jobtap-slurm", "jobtap-pbs"} <= set(json.loads(psij.stdout)["names"])
