"""Snakemake's executor ``jobtap-slurm`` (``pip install 'jobtap[snakemake]'``, then
``snakemake --executor jobtap-slurm ...``): the stock Slurm executor plugin's
submission and cancellation, options and resources, with job status from jobtap
and a status loop woken by a subscription instead of sleeping 40 to 180 s.

Snakemake finds it through the top-level shim ``snakemake_executor_plugin_jobtap_slurm``
(its plugin discovery imports every module named ``snakemake_executor_plugin_*``).
See docs/integrations.md.  Importing this module imports Snakemake and the stock
plugin; ``import jobtap`` never does.
"""

from __future__ import annotations

from .executor import Executor, ExecutorSettings, common_settings, slurm_state

__all__ = ["Executor", "ExecutorSettings", "common_settings", "slurm_state"]
