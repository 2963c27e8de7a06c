"""What slurmctld lists: ``squeue --json`` (jobs), the node listing (22.05's
``sinfo --json``, later ``scontrol show nodes --json``), ``scontrol show
partition -o`` (partitions) and the probe's compact ``squeue`` lines (or, from
23.11, ``squeue --only-job-state``'s).

Each parser takes the bytes a command printed and gives ``{id: native record}``.
Output that is not what the command prints, whose ``errors`` list is not empty,
or that names a version of the JSON jobtap does not know raises
:class:`StatError`: with slurmctld down, ``squeue --json`` still exits 0 and
prints ``"jobs": []`` with one entry in ``errors``, which must not read as
"every job finished".

Job ids: a plain job is its number (``"12"``); an array task is ``ARRAY_TASK``
(``"12_3"``).  Slurm shows the not-yet-started tasks of an array as one pending
record (``array_task_string`` ``"2-5%2"``); it is expanded into one record per
task, each a copy with ``array_task_id`` set and ``array_task_string`` empty,
which is how Slurm itself prints a task once it has split off.  A task thus
keeps its id from submission to the end.  (An array of more than
``MAX_ARRAY_TASKS`` pending tasks stays one record, ``12_[2-200000]``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..base import Native, StatError
from ..common import load_object
from .values import expand_task_ids, jobtap_id
from .versions import Format, Generation, document_format

__all__ = [
    "PROBE_ARGV",
    "PROBE_FIELDS",
    "PROBE_FORMAT",
    "STATE_PROBE_ARGV",
    "STATE_PROBE_FIELDS",
    "describe_errors",
    "load_document",
    "parse_nodes",
    "parse_probe",
    "parse_scontrol_partitions",
    "parse_sinfo",
    "parse_squeue",
    "records",
    "squeue_jobs",
]


def load_document(raw: bytes | str, command: str) -> tuple[dict[str, Any], Format]:
    """One ``orjson.loads`` of a whole output: a JSON object with an empty
    ``errors``, written in a format jobtap knows.  Invalid UTF-8 is retried
    once (common.load_object); when that fails too, the message gives the first
    attempt's complaint."""
    doc = load_object(raw, command, report_first_error=True)
    errors = doc.get("errors")
    if errors:
        raise StatError(f"{command} reported errors: {describe_errors(errors)}")
    return doc, document_format(doc, command)


def describe_errors(errors: Any) -> str:
    if not isinstance(errors, list):
        return repr(errors)[:300]
    parts = []
    for err in errors[:3]:
        if isinstance(err, dict):
            words = [str(err[k]) for k in ("source", "description", "error") if err.get(k)]
            parts.append(": ".join(words) or repr(err)[:100])
        else:
            parts.append(repr(err)[:100])
    return "; ".join(parts)[:300]


def records(doc: dict[str, Any], key: str, command: str) -> list[Any]:
    items = doc.get(key)
    if items is None:
        raise StatError(f"{command} printed no {key!r} list")
    if not isinstance(items, list):
        raise StatError(f"{command} printed {key!r} as {type(items).__name__}, expected a list")
    return items


def _squeue_id(job: dict[str, Any], gen: Generation) -> str | None:
    array_id = gen.number(job.get("array_job_id"))
    return jobtap_id(job.get("job_id"), array_id, gen.number(job.get("array_task_id")))


def parse_squeue(raw: bytes | str) -> dict[str, Native]:
    """``squeue --json`` -> ``{job id: native record}``.

    The pending record of an array's tasks that have not started is expanded into
    one record per task (see the module's docstring).  A record without a usable
    ``job_id`` is kept under ``"?INDEX"`` so that the normaliser reports it.
    """
    doc, fmt = load_document(raw, "squeue")
    return squeue_jobs(doc, fmt)


def squeue_jobs(doc: dict[str, Any], fmt: Format, command: str = "squeue") -> dict[str, Native]:
    """The ``jobs`` of a loaded ``squeue --json`` document (or of a REST
    answer, written by the same plugin) keyed as :func:`parse_squeue` says."""
    gen = fmt.generation
    jobs = records(doc, "jobs", command)
    out: dict[str, Native] = {}
    pending_arrays: list[tuple[int, dict[str, Any]]] = []
    for index, job in enumerate(jobs):
        if not isinstance(job, dict):
            out[f"?{index}"] = job
            continue
        array_id = gen.number(job.get("array_job_id")) or 0
        spec = job.get("array_task_string")
        if array_id and gen.number(job.get("array_task_id")) is None and spec:
            if isinstance(spec, str):
                pending_arrays.append((array_id, job))
                continue
        job_id = _squeue_id(job, gen)
        out[job_id if job_id is not None else f"?{index}"] = job
    for array_id, job in pending_arrays:
        spec = job["array_task_string"]
        tasks = expand_task_ids(spec)
        if tasks is None:
            out.setdefault(f"{array_id}_[{spec}]", job)
            continue
        for task in tasks:
            # A task that already split off (its own record) wins over the copy.
            split = {**job, "array_task_id": gen.as_number(task), "array_task_string": ""}
            out.setdefault(f"{array_id}_{task}", split)
    return out


def parse_nodes(raw: bytes | str, command: str) -> dict[str, Native]:
    """The node listing -> ``{node name: native record}``: 22.05's ``sinfo
    --json`` or a later ``scontrol show nodes --json`` (``Format.nodes_argv``);
    both print a ``nodes`` list of one record per node."""
    doc, _ = load_document(raw, command)
    out: dict[str, Native] = {}
    for index, node in enumerate(records(doc, "nodes", command)):
        name = node.get("name") if isinstance(node, dict) else None
        out[name if isinstance(name, str) and name else f"?{index}"] = node
    return out


def parse_sinfo(raw: bytes | str) -> dict[str, Native]:
    """``sinfo --json`` -> ``{node name: native record}`` (22.05 lists nodes)."""
    return parse_nodes(raw, "sinfo")


# The probe: one compact line per job, with the fields that reveal a change (no
# user text: a name or comment edit is left to the reconciliation).  ``%A``,
# ``%F`` and ``%K`` give the job id as parse_squeue keys it; the rest is the
# line's signature.  ``-a`` and ``--local`` list what ``squeue --json`` lists
# (its show flags are SHOW_ALL, SHOW_DETAIL and SHOW_LOCAL).
PROBE_FIELDS = (
    "%A", "%F", "%K",  # job id, array job id, array task id (or pending tasks)
    "%T", "%r", "%Q", "%S", "%e", "%N", "%l", "%P", "%q", "%D", "%C", "%y", "%E", "%V",
)  # fmt: skip
PROBE_FORMAT = "|".join(PROBE_FIELDS)
PROBE_ARGV = ("-h", "-a", "--local", "-t", "all", "-o", PROBE_FORMAT)

# The state probe (23.11+): ``squeue --only-job-state`` asks slurmctld for
# REQUEST_JOB_STATE, ids and states of every job and nothing else, which it
# answers without packing records (from a cache that needs no job lock under
# ``SchedulerParameters=enable_job_state_cache``): 16 times cheaper than the
# listing of the line probe with 2,000 jobs on 24.11 (docs/performance.md).
# Its text output keeps the array fields of the line probe, so one parser
# reads both.  No ``-a``: from 25.05 squeue refuses it beside
# ``--only-job-state`` (which lists every partition's jobs anyway).
STATE_PROBE_FIELDS = ("%A", "%F", "%K", "%T")
STATE_PROBE_ARGV = (
    "--only-job-state", "-h", "--local", "-t", "all", "-o", "|".join(STATE_PROBE_FIELDS),
)  # fmt: skip


def parse_probe(raw: bytes | str, fields: Sequence[str] = PROBE_FIELDS) -> dict[str, str]:
    """``squeue PROBE_ARGV`` (or ``STATE_PROBE_ARGV`` with ``fields``
    ``STATE_PROBE_FIELDS``) -> ``{job id: signature}``.

    Ids are those :func:`parse_squeue` gives the same jobs: ``12``, ``12_3`` for
    an array task, one id per task for the pending part of an array (each with
    the pending line's signature; a task's own line wins).  A line that is not
    such a line raises :class:`StatError`: a garbled probe changes nothing."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    out: dict[str, str] = {}
    pending: list[tuple[str, str, str]] = []
    width = len(fields)
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split("|")
        if len(cells) != width or not cells[0].isdigit():
            raise StatError(f"squeue printed a line that is not a job: {line[:80]!r}")
        job, array, task = cells[:3]
        if not array.isdigit():
            array = job
        signature = "|".join(cells[3:])
        if task in ("N/A", ""):
            out[job] = signature
        elif task.isdigit():
            out[f"{array}_{task}"] = signature
        else:
            pending.append((array, task, signature))
    for array, spec, signature in pending:
        tasks = expand_task_ids(spec)
        if tasks is None:
            out.setdefault(f"{array}_[{spec}]", signature)
            continue
        for task in tasks:
            out.setdefault(f"{array}_{task}", signature)
    return out


def _key_values(line: str) -> dict[str, str]:
    """``Key=Value Key=Value`` (scontrol ``-o``).  A word without ``=`` continues the
    previous value (``OS=Linux 6.1 #1 SMP``)."""
    out: dict[str, str] = {}
    last: str | None = None
    for word in line.split():
        key, eq, value = word.partition("=")
        if eq and key and key[0].isalpha():
            out[key] = value
            last = key
        elif last is not None:
            out[last] = f"{out[last]} {word}"
    return out


def parse_scontrol_partitions(raw: bytes | str) -> dict[str, Native]:
    """``scontrol show partition -o`` -> ``{partition: {Key: Value}}``, values as
    printed, as text.  The text has kept its keys from 22.05 to 25.11 (22.05's
    scontrol has no ``--json``), so every release is read the same way."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    out: dict[str, Native] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("No partitions"):
            continue
        fields = _key_values(line)
        name = fields.get("PartitionName")
        if not name:
            raise StatError(f"scontrol show partition printed an unexpected line: {line[:80]!r}")
        out[name] = fields
    return out
