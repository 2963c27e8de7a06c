"""Slurm backend: 22.05 through 25.11, through its commands.

One module per thing Slurm gives, in the order a record travels:

* :mod:`.versions`: the generations of Slurm's JSON (data_parser v0.0.38 to
  v0.0.44) and the one place where releases differ;
* :mod:`.listing`: what slurmctld lists (``squeue --json``, the node listing,
  ``scontrol show partition -o``, the probe's ``squeue`` lines);
* :mod:`.accounting`: what slurmdbd keeps (``sacct``);
* :mod:`.rest`: single job reads through ``slurmrestd`` in inetd mode;
* :mod:`.sdiag`: what reads cost slurmctld;
* :mod:`.values`: the values inside (times, host lists, exit codes);
* :mod:`.normalise`: one record -> the normalised record of ``jobtap.schema``;
* :mod:`.backend`: :class:`SlurmBackend`, which runs the commands.

The slurmctld hook that pokes follow mode is ``deploy/slurm/jobtap-slurmctld-hook.sh``.
"""

from __future__ import annotations

from ..common import QUEUE_CLOSED, QUEUE_OPEN, QUEUE_STOPPED
from .accounting import ENDED_STATES, parse_sacct, parse_sacct_exit_codes
from .backend import VOLATILE_JOB_KEYS, SlurmBackend, format_of_release
from .listing import (
    PROBE_FIELDS,
    PROBE_FORMAT,
    STATE_PROBE_FIELDS,
    parse_nodes,
    parse_probe,
    parse_scontrol_partitions,
    parse_sinfo,
    parse_squeue,
    squeue_jobs,
)
from .normalise import (
    JOB_STATES,
    job_state,
    node_state,
    normalise_job,
    normalise_node,
    normalise_queue,
    partition_state,
)
from .sdiag import parse_sdiag_rpcs
from .values import (
    MAX_ARRAY_TASKS,
    exit_status_from_text,
    exit_status_from_wait,
    expand_hostlist,
    expand_task_ids,
    slurm_time,
)
from .versions import FORMATS, Format, UnknownFormat, document_format, generation_of

__all__ = [
    "ENDED_STATES",
    "FORMATS",
    "JOB_STATES",
    "MAX_ARRAY_TASKS",
    "PROBE_FIELDS",
    "PROBE_FORMAT",
    "STATE_PROBE_FIELDS",
    "QUEUE_CLOSED",
    "QUEUE_OPEN",
    "QUEUE_STOPPED",
    "VOLATILE_JOB_KEYS",
    "Format",
    "SlurmBackend",
    "UnknownFormat",
    "document_format",
    "exit_status_from_text",
    "exit_status_from_wait",
    "expand_hostlist",
    "expand_task_ids",
    "format_of_release",
    "generation_of",
    "job_state",
    "node_state",
    "normalise_job",
    "normalise_node",
    "normalise_queue",
    "parse_nodes",
    "parse_probe",
    "parse_sacct",
    "parse_sacct_exit_codes",
    "parse_scontrol_partitions",
    "parse_sdiag_rpcs",
    "parse_sinfo",
    "parse_squeue",
    "partition_state",
    "slurm_time",
    "squeue_jobs",
]
