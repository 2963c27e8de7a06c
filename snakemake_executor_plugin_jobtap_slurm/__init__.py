"""Snakemake's plugin discovery imports every top-level module named
``snakemake_executor_plugin_*``; this one names executor ``jobtap-slurm``, whose
code is ``jobtap.snakemake`` (integrations/snakemake/).  A shim, nothing more."""

from jobtap.snakemake import Executor, ExecutorSettings, common_settings

__all__ = ["Executor", "ExecutorSettings", "common_settings"]
