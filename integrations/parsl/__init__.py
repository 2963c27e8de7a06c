"""Parsl providers whose ``status()`` reads jobtap (``pip install 'jobtap[parsl]'``).

:class:`SlurmProvider` and :class:`PBSProProvider` are Parsl's own providers (the
same constructor, submit script, ``sbatch``/``qsub`` and ``scancel``/``qdel``) with
job status from jobtap's cache: a block jobtap has not seen yet is PENDING (never
COMPLETED), a block that ended has its real terminal state (COMPLETED, FAILED
with its exit code, CANCELLED, TIMEOUT), and a status call costs the scheduler
nothing, so Parsl polls at its strategy period (5 s) instead of every 60 s::

    from jobtap.parsl import SlurmProvider
    provider = SlurmProvider(partition="debug", walltime="00:10:00")  # $JOBTAP_REDIS...
    provider = SlurmProvider(partition="debug", jobtap_redis="redis://h:6379/0?site=hpc1")

See docs/integrations.md.  Importing this module imports Parsl; ``import jobtap``
never does.
"""

from __future__ import annotations

from .providers import PBSProProvider, SlurmProvider, parsl_status

__all__ = ["PBSProProvider", "SlurmProvider", "parsl_status"]
