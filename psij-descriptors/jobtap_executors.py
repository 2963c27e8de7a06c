"""PSI/J discovers the jobtap executors here (``psij-descriptors`` is a namespace
folder that PSI/J scans on ``sys.path``; see docs/psij.md).

PSI/J loads an executor class from the file its descriptor's ``cls`` names,
relative to the ``sys.path`` entry this folder sits in.  The descriptors name this
very file, and the names below hand PSI/J the classes of the installed
``jobtap.psij`` package (PEP 562), so that the same file works in an installed
wheel and in a source checkout, and there is one copy of each class.
"""

from packaging.version import Version
from psij.descriptor import Descriptor

import jobtap

_HERE = "psij-descriptors.jobtap_executors"
_VERSION = Version(jobtap.__version__)  # the installed jobtap's (pyproject.toml's)
_CLASSES = {
    "JobtapSlurmJobExecutor": "jobtap.psij.slurm",
    "JobtapPBSJobExecutor": "jobtap.psij.pbs",
}

__PSI_J_EXECUTORS__ = [
    Descriptor(
        name="jobtap-slurm",
        nice_name="Slurm (jobtap)",
        version=_VERSION,
        cls=f"{_HERE}.JobtapSlurmJobExecutor",
    ),
    Descriptor(
        name="jobtap-pbs",
        nice_name="PBS Pro (jobtap)",
        version=_VERSION,
        cls=f"{_HERE}.JobtapPBSJobExecutor",
    ),
]


def __getattr__(name: str):
    module = _CLASSES.get(name)
    if module is None:
        raise AttributeError(name)
    from importlib import import_module

    return getattr(import_module(module), name)
