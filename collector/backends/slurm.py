"""Slurm backend: ``squeue --json``, ``sinfo --json``, ``sacct --json`` (Slurm 22.05+).

Three layers, like the PBS backend, so that captured output of a real Slurm tests
the first two:

* parsers (``parse_squeue``, ``parse_sinfo``, ``parse_sacct``,
  ``parse_scontrol_partitions``, ``parse_sacct_exit_codes``): bytes ->
  ``{id: native record}``.  Output that is not what the command prints, or whose
  ``errors`` list is not empty, raises :class:`StatError`: with slurmctld down,
  22.05's ``squeue --json`` still exits 0 and prints ``"jobs": []`` with one entry
  in ``errors``, which must not read as "every job finished".
* normalisers (``normalise_job``, ``normalise_node``, ``normalise_queue``): one
  native record -> the normalised record of ``jobtap.schema``, exactly as the PBS
  backend does (same fields, same rules for times, exit status and reason).
* :class:`SlurmBackend`: runs the commands (locally or through a prefix such as
  ``ssh head1``) and feeds the parsers.

Job ids: a plain job is its number (``"12"``); an array task is ``ARRAY_TASK``
(``"12_3"``), with ``array_parent`` ``"12"`` and ``array_index`` 3.  Slurm shows the
not-yet-started tasks of an array as one pending record (``array_task_string``
``"2-5%2"``); it is expanded into one record per task (``12_2`` ... ``12_5``), each a
copy of it with ``array_task_id`` set and ``array_task_string`` empty, which is how
Slurm itself prints a task once it has split off.  A task thus keeps its id from
submission to the end.  (An array of more than ``MAX_ARRAY_TASKS`` pending tasks
stays one record, ``12_[2-200000]``.)

Job states (``job_state`` of squeue, ``state.current`` of sacct):

=====================================  =========================================
Slurm                                  normalised
=====================================  =========================================
PENDING                                queued; held if the reason is a hold
                                       (JobHeldUser, JobHeldAdmin,
                                       JobHoldMaxRequeue) or the priority is 0;
                                       waiting if the reason is BeginTime
REQUEUED, REQUEUE_FED                  queued
REQUEUE_HOLD, SPECIAL_EXIT,            held
RESV_DEL_HOLD
RUNNING, CONFIGURING, RESIZING,        running
SIGNALING
SUSPENDED, STOPPED                     suspended
COMPLETING, STAGE_OUT                  exiting
COMPLETED                              completed
FAILED, TIMEOUT, NODE_FAIL,            failed
OUT_OF_MEMORY, BOOT_FAIL, DEADLINE
CANCELLED, PREEMPTED, REVOKED          cancelled (a job preempted with
                                       PreemptMode=REQUEUE is never PREEMPTED
                                       for long: it goes back to PENDING)
anything else                          unknown
=====================================  =========================================

Exit status (None until the job is exiting or terminal, and for a job that never
started): the exit code of the job's batch script; a script killed by signal N
gives ``256 + N`` (271 for SIGTERM: ``scancel`` of a running job, a time limit),
the convention of PBS's ``Exit_status``, so that one number means one thing
whatever the scheduler.  squeue prints it as a wait status (``768`` = exit 3,
``15`` = SIGTERM).  sacct 22.05's JSON prints every plain non-zero exit as
``{"status": "SUCCESS", "return_code": 0}``; :meth:`SlurmBackend.history`
therefore also asks ``sacct -o JobID,ExitCode`` (``"3:0"``) and adds it to the
record as ``jobtap_exit_codes``.

Reason: the pending reason (``state_reason``) of a queued, held or waiting job,
verbatim (``Resources``, ``Priority``, ``Dependency``, ``JobHeldUser``,
``BeginTime``...); Slurm's failure reason of a failed job (``NonZeroExitCode``,
``TimeLimit``, ``OutOfMemory``, ``NodeDown``, ``RaisedSignal:9``...);
``"cancelled by USER"`` when sacct names who cancelled; otherwise None.

Times: Slurm prints seconds since the epoch; they become UTC ISO-8601.  A start
time is only given once the job has started (squeue shows the *expected* start of
a pending job there), an end time only once it has ended.
"""

from __future__ import annotations

import logging
import math
import pwd
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache, partial
from itertools import product
from typing import Any

import orjson

from jobtap.schema import (
    CANCELLED,
    COMPLETED,
    EXITING,
    FAILED,
    HELD,
    NODE_BUSY,
    NODE_DOWN,
    NODE_DRAIN,
    NODE_FREE,
    QUEUED,
    RUNNING,
    SUSPENDED,
    TERMINAL,
    UNKNOWN,
    WAITING,
)

from . import slurm_rest
from .base import BadRecord, Native, Probe, Record, StatError, check_object_id
from .common import (
    QUEUE_CLOSED,
    QUEUE_OPEN,
    QUEUE_STOPPED,
    CommandBackend,
    check_record,
    epoch_iso,
    load_object,
    mapping_field,
    parse_int,
    text_field,
)
from .run import first_line

log = logging.getLogger("jobtap.collector")

__all__ = [
    "JOB_STATES",
    "MAX_ARRAY_TASKS",
    "QUEUE_CLOSED",
    "QUEUE_OPEN",
    "QUEUE_STOPPED",
    "SlurmBackend",
    "expand_hostlist",
    "expand_task_ids",
    "exit_status_from_text",
    "exit_status_from_wait",
    "job_state",
    "node_state",
    "normalise_job",
    "normalise_node",
    "normalise_queue",
    "parse_sacct",
    "parse_sacct_exit_codes",
    "parse_scontrol_partitions",
    "parse_sinfo",
    "parse_squeue",
    "partition_state",
    "slurm_time",
]

# Queue states: QUEUE_OPEN, QUEUE_STOPPED, QUEUE_CLOSED (common.py), the words of
# the PBS backend (open: accepts and runs jobs; stopped: accepts jobs but starts
# none; closed: refuses new jobs).

JOB_STATES: dict[str, str] = {
    "PENDING": QUEUED,
    "REQUEUED": QUEUED,
    "REQUEUE_FED": QUEUED,
    "REQUEUE_HOLD": HELD,
    "SPECIAL_EXIT": HELD,
    "RESV_DEL_HOLD": HELD,
    "RUNNING": RUNNING,
    "CONFIGURING": RUNNING,
    "RESIZING": RUNNING,
    "SIGNALING": RUNNING,
    "SUSPENDED": SUSPENDED,
    "STOPPED": SUSPENDED,
    "COMPLETING": EXITING,
    "STAGE_OUT": EXITING,
    "COMPLETED": COMPLETED,
    "FAILED": FAILED,
    "TIMEOUT": FAILED,
    "NODE_FAIL": FAILED,
    "OUT_OF_MEMORY": FAILED,
    "BOOT_FAIL": FAILED,
    "DEADLINE": FAILED,
    "CANCELLED": CANCELLED,
    "PREEMPTED": CANCELLED,
    "REVOKED": CANCELLED,
}
HOLD_REASONS = frozenset(
    {"JobHeldUser", "JobHeldAdmin", "JobHoldMaxRequeue", "launch failed requeued held"}
)
WAIT_REASONS = frozenset({"BeginTime"})
# Slurm's own words for how a job failed, when the record carries no reason.
_FAIL_REASONS = {
    "TIMEOUT": "TimeLimit",
    "NODE_FAIL": "NodeDown",
    "OUT_OF_MEMORY": "OutOfMemory",
    "BOOT_FAIL": "BootFail",
    "DEADLINE": "DeadLine",
    "PREEMPTED": "Preempted",
}
_NOT_STARTED = frozenset({QUEUED, HELD, WAITING})
_ON_NODES = frozenset({RUNNING, SUSPENDED, EXITING})
_NO_NODES = frozenset({"", "None assigned", "(null)"})

# Node states: base state of sinfo's JSON (lower case) and its flags.
_NODE_DOWN_BASES = frozenset({"DOWN", "ERROR"})
_NODE_DRAIN_FLAGS = frozenset({"DRAIN", "FAIL"})
_NODE_BUSY_BASES = frozenset({"ALLOCATED", "MIXED"})

# Keys that change at every scheduler pass (or every sinfo) without meaning anything
# to a reader; SlurmBackend drops them so that polling does not turn every
# pending job and every node into an update event each cycle.
VOLATILE_JOB_KEYS = ("last_sched_evaluation",)
VOLATILE_NODE_KEYS = ("cpu_load", "free_memory")

MAX_ARRAY_TASKS = 100_000
_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")


# Parsers ---------------------------------------------------------------------------
def _load(raw: bytes | str, command: str) -> dict[str, Any]:
    """One ``orjson.loads`` of a whole output: a JSON object with an empty ``errors``.
    Invalid UTF-8 is retried once (common.load_object); when that fails too, the
    message gives the first attempt's complaint."""
    doc = load_object(raw, command, report_first_error=True)
    errors = doc.get("errors")
    if errors:
        raise StatError(f"{command} reported errors: {_describe_errors(errors)}")
    return doc


def _describe_errors(errors: Any) -> str:
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


def _records(doc: dict[str, Any], key: str, command: str) -> list[Any]:
    items = doc.get(key)
    if items is None:
        raise StatError(f"{command} printed no {key!r} list")
    if not isinstance(items, list):
        raise StatError(f"{command} printed {key!r} as {type(items).__name__}, expected a list")
    return items


def expand_task_ids(spec: str, limit: int = MAX_ARRAY_TASKS) -> list[int] | None:
    """Slurm's array task string as task ids: ``"2-5%2"`` -> [2, 3, 4, 5],
    ``"1,3,7-11:2"`` -> [1, 3, 7, 9, 11].  None if it does not parse or holds
    more than ``limit`` tasks."""
    spec = spec.partition("%")[0].strip()
    if not spec:
        return None
    ids: list[int] = []
    for part in spec.split(","):
        rng, _, step_text = part.partition(":")
        first, dash, last = rng.partition("-")
        try:
            lo = int(first)
            hi = int(last) if dash else lo
            step = int(step_text) if step_text else 1
        except ValueError:
            return None
        if lo < 0 or hi < lo or step < 1:
            return None
        if len(ids) + (hi - lo) // step + 1 > limit:
            return None
        ids.extend(range(lo, hi + 1, step))
    return ids


def _squeue_id(job: dict[str, Any]) -> str | None:
    job_id = parse_int(job.get("job_id"))
    if job_id is None or job_id < 0:
        return None
    array_id = parse_int(job.get("array_job_id")) or 0
    task = parse_int(job.get("array_task_id"))
    if array_id and task is not None:
        return f"{array_id}_{task}"
    return str(job_id)


def parse_squeue(raw: bytes | str) -> dict[str, Native]:
    """``squeue --json`` -> ``{job id: native record}``.

    The pending record of an array's tasks that have not started is expanded into
    one record per task (see the module's docstring).  A record without a usable
    ``job_id`` is kept under ``"?INDEX"`` so that the normaliser reports it.
    """
    return squeue_jobs(_load(raw, "squeue"))


def openapi_version(doc: dict[str, Any]) -> str | None:
    """The openapi plugin that wrote a JSON document (``"v0.0.38"`` on 22.05),
    from its ``meta``; None if it does not say."""
    meta = doc.get("meta")
    plugin = meta.get("plugin") if isinstance(meta, dict) else None
    kind = plugin.get("type") if isinstance(plugin, dict) else None
    if isinstance(kind, str) and re.fullmatch(r"openapi/v\d+\.\d+\.\d+", kind):
        return kind.partition("/")[2]
    return None


def squeue_jobs(doc: dict[str, Any], command: str = "squeue") -> dict[str, Native]:
    """The ``jobs`` of a loaded ``squeue --json`` document (or of a REST
    answer, written by the same plugin) keyed as :func:`parse_squeue` says."""
    jobs = _records(doc, "jobs", command)
    out: dict[str, Native] = {}
    pending_arrays: list[tuple[int, dict[str, Any]]] = []
    for index, job in enumerate(jobs):
        if not isinstance(job, dict):
            out[f"?{index}"] = job
            continue
        array_id = parse_int(job.get("array_job_id")) or 0
        spec = job.get("array_task_string")
        if array_id and job.get("array_task_id") is None and isinstance(spec, str) and spec:
            pending_arrays.append((array_id, job))
            continue
        job_id = _squeue_id(job)
        out[job_id if job_id is not None else f"?{index}"] = job
    for array_id, job in pending_arrays:
        spec = job["array_task_string"]
        tasks = expand_task_ids(spec)
        if tasks is None:
            out.setdefault(f"{array_id}_[{spec}]", job)
            continue
        for task in tasks:
            # A task that already split off (its own record) wins over the copy.
            out.setdefault(
                f"{array_id}_{task}", {**job, "array_task_id": task, "array_task_string": ""}
            )
    return out


def parse_sinfo(raw: bytes | str) -> dict[str, Native]:
    """``sinfo --json`` -> ``{node name: native record}`` (22.05 lists nodes only)."""
    nodes = _records(_load(raw, "sinfo"), "nodes", "sinfo")
    out: dict[str, Native] = {}
    for index, node in enumerate(nodes):
        name = node.get("name") if isinstance(node, dict) else None
        out[name if isinstance(name, str) and name else f"?{index}"] = node
    return out


def _sacct_id(job: dict[str, Any]) -> str | None:
    job_id = parse_int(job.get("job_id"))
    if job_id is None or job_id < 0:
        return None
    array = job.get("array")
    if isinstance(array, dict):
        array_id = parse_int(array.get("job_id")) or 0
        task = parse_int(array.get("task_id"))
        if array_id and task is not None:
            return f"{array_id}_{task}"
    return str(job_id)


def parse_sacct(raw: bytes | str) -> dict[str, Native]:
    """``sacct --json`` -> ``{job id: native record}``.

    Job steps are nested in their job's record (``steps``); the job's own record
    is the one kept.  Array tasks are ``ARRAY_TASK``; a record of tasks that never
    started (``array.task`` = ``"1-4"``) is expanded like squeue's.
    """
    jobs = _records(_load(raw, "sacct"), "jobs", "sacct")
    out: dict[str, Native] = {}
    for index, job in enumerate(jobs):
        if not isinstance(job, dict):
            out[f"?{index}"] = job
            continue
        array = job.get("array") if isinstance(job.get("array"), dict) else {}
        array_id = parse_int(array.get("job_id")) or 0
        spec = array.get("task")
        if array_id and array.get("task_id") is None and isinstance(spec, str) and spec:
            tasks = expand_task_ids(spec)
            if tasks is not None:
                for task in tasks:
                    copy = {**array, "task_id": task, "task": None}
                    out.setdefault(f"{array_id}_{task}", {**job, "array": copy})
                continue
        job_id = _sacct_id(job)
        # sacct lists a requeued job once per run with --duplicates: the last one wins.
        out[job_id if job_id is not None else f"?{index}"] = job
    return out


def parse_sacct_exit_codes(raw: bytes | str) -> dict[str, dict[str, str]]:
    """``sacct -n -P -o JobID,ExitCode`` -> ``{job id: {"job": "3:0", "batch": "3:0"}}``.

    The job's own line gives ``job``, its ``.batch`` step ``batch``; other steps
    are ignored.  ``ExitCode`` is ``EXIT:SIGNAL``.
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 2 or not fields[0]:
            continue
        job_id, _, step = fields[0].partition(".")
        code = fields[1].strip()
        if not re.fullmatch(r"\d+:\d+", code):
            continue
        if not step:
            out.setdefault(job_id, {})["job"] = code
        elif step == "batch":
            out.setdefault(job_id, {})["batch"] = code
    return out


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


def parse_probe(raw: bytes | str) -> dict[str, str]:
    """``squeue -h -a --local -t all -o PROBE_FORMAT`` -> ``{job id: signature}``.

    Ids are those :func:`parse_squeue` gives the same jobs: ``12``, ``12_3`` for
    an array task, one id per task for the pending part of an array (each with
    the pending line's signature; a task's own line wins).  A line that is not
    such a line raises :class:`StatError`: a garbled probe changes nothing."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    out: dict[str, str] = {}
    pending: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        if len(fields) != len(PROBE_FIELDS) or not fields[0].isdigit():
            raise StatError(f"squeue printed a line that is not a job: {line[:80]!r}")
        job, array, task = fields[:3]
        if not array.isdigit():
            array = job
        signature = "|".join(fields[3:])
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
    """``scontrol show partition -o`` -> ``{partition: {Key: Value}}`` (22.05's
    scontrol has no ``--json``; values are kept as printed, as text)."""
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


# Field helpers ---------------------------------------------------------------------
def slurm_time(value: Any) -> str | None:
    """Seconds since the epoch as UTC ISO-8601 with offset; None for 0, absent or odd."""
    seconds = parse_int(value)
    if seconds is None or seconds <= 0:
        return None
    return epoch_iso(seconds)


# A text attribute; the empty string is None.
_text = partial(text_field, empty_is_none=True)


def _hostlist_items(text: str) -> Iterator[str]:
    """Split at the commas that are not inside brackets."""
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


def _expand_ranges(body: str) -> list[str]:
    values: list[str] = []
    for part in body.split(","):
        first, dash, last = part.partition("-")
        if not dash:
            values.append(first)
            continue
        width = len(first)
        lo, hi = int(first), int(last)
        if hi < lo or hi - lo > 100_000:
            raise ValueError(part)
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


_BRACKET = re.compile(r"\[([^\]]*)\]")


@lru_cache(maxsize=4096)
def _expand_one(item: str) -> tuple[str, ...]:
    pieces = _BRACKET.split(item)  # text, ranges, text, ranges, ..., text
    choices: list[list[str]] = []
    for i, piece in enumerate(pieces):
        choices.append(_expand_ranges(piece) if i % 2 else [piece])
    return tuple("".join(combo) for combo in product(*choices))


def expand_hostlist(value: Any) -> list[str]:
    """Slurm's host list as names: ``"n[1-3],gpu01"`` -> ``["n1", "n2", "n3", "gpu01"]``;
    zero padding (``n[01-02]``) and several brackets (``r[1-2]n[1-2]``) too.  An
    empty list for ``""``, ``"None assigned"`` or anything else that is not text;
    a malformed part is kept as printed."""
    if not isinstance(value, str) or value.strip() in _NO_NODES:
        return []
    names: dict[str, None] = {}
    for item in _hostlist_items(value.strip()):
        item = item.strip()
        if not item:
            continue
        try:
            expanded = _expand_one(item) if "[" in item else (item,)
        except ValueError:
            expanded = (item,)
        for name in expanded:
            names[name] = None
    return list(names)


def exit_status_from_wait(value: Any) -> int | None:
    """squeue's ``exit_code`` (a wait status) as an exit status: ``768`` -> 3,
    ``15`` (killed by SIGTERM) -> 271 (256 + signal)."""
    status = parse_int(value)
    if status is None or status < 0 or status > 0xFFFF:
        return None
    signal = status & 0x7F
    if signal and signal != 0x7F:
        return 256 + signal
    return (status >> 8) & 0xFF


def exit_status_from_text(value: Any) -> int | None:
    """sacct's ``ExitCode`` text ``"EXIT:SIGNAL"``: ``"3:0"`` -> 3, ``"0:9"`` -> 265."""
    if not isinstance(value, str):
        return None
    code, _, signal = value.partition(":")
    code_n, signal_n = parse_int(code), parse_int(signal) if signal else 0
    if code_n is None or signal_n is None:
        return None
    return 256 + signal_n if signal_n else code_n


def _exit_from_json(value: Any) -> int | None:
    """sacct's JSON ``exit_code`` object (trusted for signals only, see above)."""
    if not isinstance(value, dict):
        return None
    status = value.get("status")
    signal = value.get("signal")
    if status == "SIGNALED" and isinstance(signal, dict):
        number = parse_int(signal.get("signal_id"))
        if number:
            return 256 + number
    if status == "PENDING":
        return None
    return parse_int(value.get("return_code"))


def _walltime(minutes: Any) -> str | None:
    """A time limit in minutes as ``HH:MM:SS`` (PBS's walltime format); None = no limit."""
    m = parse_int(minutes)
    if m is None or m < 0 or m >= 0xFFFFFFFE:
        return None
    return f"{m // 60:02d}:{m % 60:02d}:00"


def _duration(seconds: Any) -> str | None:
    s = parse_int(seconds)
    if s is None or s < 0:
        return None
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _tres(value: Any) -> dict[str, str]:
    """``"cpu=16,mem=4000M,node=4"`` -> ``{"cpu": "16", "mem": "4000M", "node": "4"}``."""
    out: dict[str, str] = {}
    if isinstance(value, str):
        for part in value.split(","):
            key, eq, val = part.partition("=")
            if eq and key:
                out[key.strip()] = val.strip()
    return out


@lru_cache(maxsize=1024)
def _user_of_uid(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None


# Jobs ------------------------------------------------------------------------------
def job_state(native_state: Any, reason: Any = None, priority: Any = None) -> str:
    """The normalised state of a Slurm job state (see the module's table)."""
    if not isinstance(native_state, str) or not native_state:
        raise BadRecord(f"job state missing or not a string: {native_state!r:.40}")
    word = native_state.split()[0].upper()  # sacct's text form says "CANCELLED by 0"
    state = JOB_STATES.get(word, UNKNOWN)
    if state == QUEUED and word == "PENDING":
        if reason in HOLD_REASONS or parse_int(priority) == 0:
            return HELD
        if reason in WAIT_REASONS:
            return WAITING
    return state


def _user(name: Any, uid: Any) -> str:
    user = name if isinstance(name, str) and name else None
    if user is None:
        number = parse_int(uid)
        user = _user_of_uid(number) if number is not None and number >= 0 else None
        if user is None and number is not None and number >= 0:
            user = str(number)
    if not user:
        raise BadRecord(f"no user (user_name={name!r:.40}, user_id={uid!r:.20})")
    return check_object_id(user, "job owner")


def _reason(state: str, word: str, slurm_reason: str | None, exit_status: int | None,
            killer: str | None) -> str | None:  # fmt: skip
    """Why the job is where it is (see the module's docstring)."""
    reason = None if slurm_reason in (None, "", "None") else slurm_reason
    if state in _NOT_STARTED:
        return reason
    if state == SUSPENDED:
        return reason
    if state == FAILED:
        if reason and reason not in HOLD_REASONS and reason not in WAIT_REASONS:
            return reason
        if word in _FAIL_REASONS:
            return _FAIL_REASONS[word]
        if exit_status is not None and exit_status > 256:
            return f"RaisedSignal:{exit_status - 256}"
        return "NonZeroExitCode" if exit_status else None
    if state == CANCELLED:
        if killer:
            return f"cancelled by {killer}"
        return _FAIL_REASONS.get(word)
    return None


def _array_fields(job_id: str, parent: int, task: Any) -> tuple[str | None, int | None]:
    if not parent:
        return None, None
    index = parse_int(task)
    if index is None:
        head, sep, tail = job_id.partition("_")
        index = parse_int(tail) if sep else None
    return str(parent), index


def _normalise_squeue(job_id: str, native: Native, scheduler: str) -> Record:
    word = native.get("job_state")
    slurm_reason = native.get("state_reason")
    state = job_state(word, slurm_reason, native.get("priority"))
    word = word.split()[0].upper()
    user = _user(native.get("user_name"), native.get("user_id"))
    resources = native.get("job_resources")
    nodes = resources.get("nodes") if isinstance(resources, dict) else None
    allocated = expand_hostlist(nodes if isinstance(nodes, str) and nodes else native.get("nodes"))
    ran = bool(allocated) or bool(native.get("batch_host"))
    started = ran and state not in _NOT_STARTED
    ended = state in TERMINAL or state == EXITING
    exit_status = exit_status_from_wait(native.get("exit_code")) if ended and ran else None
    start, end = parse_int(native.get("start_time")), parse_int(native.get("end_time"))
    tres = _tres(native.get("tres_req_str"))
    used: dict[str, Any] = {}
    if state in TERMINAL and started and start and end and end >= start:
        used["walltime"] = _duration(end - start)
    array_parent, array_index = _array_fields(
        job_id, parse_int(native.get("array_job_id")) or 0, native.get("array_task_id")
    )
    return {
        "id": job_id,
        "scheduler": scheduler,
        "user": user,
        "group": _text(native, "group_name"),
        "account": _text(native, "account"),
        "name": _text(native, "name"),
        "queue": _text(native, "partition"),
        "state": state,
        "native_state": native["job_state"],
        "reason": _reason(state, word, _text(native, "state_reason"), exit_status, None),
        "comment": _text(native, "comment"),
        "submit_time": slurm_time(native.get("submit_time")),
        "start_time": slurm_time(start) if started else None,
        "end_time": slurm_time(end) if ended and end else None,
        "exit_status": exit_status,
        "requested": {
            "ncpus": parse_int(native.get("cpus")) or parse_int(tres.get("cpu")),
            "nodes": parse_int(native.get("node_count")) or parse_int(tres.get("node")),
            "mem": tres.get("mem"),
            "walltime": _walltime(native.get("time_limit")),
            "select": None,
        },
        "allocated": allocated,
        "resources_used": used,
        "array_parent": array_parent,
        "array_index": array_index,
        "priority": parse_int(native.get("priority")),
        "native": native,
    }


def _tres_list(value: Any) -> dict[str, int]:
    """sacct's ``tres.requested``: ``[{"type": "cpu", "count": 1}, ...]`` -> ``{"cpu": 1}``."""
    out: dict[str, int] = {}
    if isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("type"), str):
                count = parse_int(item.get("count"))
                if count is not None:
                    out[item["type"]] = count
    return out


def _sacct_exit(native: Native, word: str) -> int | None:
    """The job's exit status from a sacct record: the text codes that history adds
    (the batch script's, else the job's); failing those, the JSON (the batch
    step's, else the job's), except a zero for a job that did not complete:
    22.05's JSON prints every plain non-zero exit as 0, so that zero means
    "unknown" (None)."""
    codes = native.get("jobtap_exit_codes")
    if isinstance(codes, dict):
        for key in ("batch", "job"):
            status = exit_status_from_text(codes.get(key))
            if status is not None:
                return status
    status = None
    steps = native.get("steps")
    if isinstance(steps, list):
        for step in steps:
            if isinstance(step, dict) and (step.get("step") or {}).get("id") == "batch":
                status = _exit_from_json(step.get("exit_code"))
                break
    if status is None:
        status = _exit_from_json(native.get("exit_code"))
    if status == 0 and word != "COMPLETED":
        return None
    return status


def _normalise_sacct(job_id: str, native: Native, scheduler: str) -> Record:
    state_obj = mapping_field(native, "state")
    word = state_obj.get("current")
    slurm_reason = state_obj.get("reason")
    state = job_state(word, slurm_reason, native.get("priority"))
    word = word.split()[0].upper()
    user = _user(native.get("user"), None)
    times = mapping_field(native, "time")
    allocated = expand_hostlist(native.get("nodes"))
    start, end = parse_int(times.get("start")), parse_int(times.get("end"))
    ran = bool(allocated) and bool(start)
    started = ran and state not in _NOT_STARTED
    ended = state in TERMINAL or state == EXITING
    exit_status = _sacct_exit(native, word) if ended and ran else None
    tres = _tres_list(mapping_field(native, "tres").get("requested"))
    required = mapping_field(native, "required")
    used: dict[str, Any] = {}
    if state in TERMINAL and started:
        elapsed = _duration(times.get("elapsed"))
        if elapsed is not None:
            used["walltime"] = elapsed
        total = mapping_field(times, "total")
        if "seconds" in total:
            used["cput"] = _duration(total.get("seconds"))
    comment = native.get("comment")
    comment_text = comment.get("job") if isinstance(comment, dict) else comment
    array = mapping_field(native, "array")
    array_parent, array_index = _array_fields(
        job_id, parse_int(array.get("job_id")) or 0, array.get("task_id")
    )
    killer = native.get("kill_request_user")
    mem = tres.get("mem")
    return {
        "id": job_id,
        "scheduler": scheduler,
        "user": user,
        "group": _text(native, "group"),
        "account": _text(native, "account"),
        "name": _text(native, "name"),
        "queue": _text(native, "partition"),
        "state": state,
        "native_state": state_obj.get("current"),
        "reason": _reason(
            state,
            word,
            slurm_reason if isinstance(slurm_reason, str) else None,
            exit_status,
            killer if isinstance(killer, str) and killer else None,
        ),
        "comment": comment_text if isinstance(comment_text, str) and comment_text else None,
        "submit_time": slurm_time(times.get("submission")),
        "start_time": slurm_time(start) if started else None,
        "end_time": slurm_time(end) if ended and end else None,
        "exit_status": exit_status,
        "requested": {
            "ncpus": parse_int(required.get("CPUs")) or tres.get("cpu"),
            "nodes": tres.get("node") or parse_int(native.get("allocation_nodes")) or None,
            "mem": f"{mem}M" if mem else None,
            "walltime": _walltime(times.get("limit")),
            "select": None,
        },
        "allocated": allocated,
        "resources_used": used,
        "array_parent": array_parent,
        "array_index": array_index,
        "priority": parse_int(native.get("priority")),
        "native": native,
    }


def normalise_job(
    job_id: str, native: Native, *, scheduler: str = "slurm", tz: str | None = None
) -> Record:
    """One job of ``squeue --json`` or of ``sacct --json`` as a normalised record.

    ``tz`` is accepted for the common signature and ignored: Slurm prints epoch
    seconds.  ``native`` is the record itself, not a copy, and is not modified.
    """
    check_object_id(job_id, "job id")
    check_record(native, "job")
    number = native.get("job_id")
    if parse_int(number) is None or isinstance(number, str):
        raise BadRecord(f"job_id missing or not a number: {number!r:.40}")
    if "job_state" in native:
        return _normalise_squeue(job_id, native, scheduler)
    if isinstance(native.get("state"), dict):
        return _normalise_sacct(job_id, native, scheduler)
    raise BadRecord("neither a squeue record (job_state) nor a sacct record (state)")


# Nodes -----------------------------------------------------------------------------
def node_state(base: Any, flags: Any = ()) -> str:
    """sinfo's ``state`` and ``state_flags`` -> the normalised node state.

    down (DOWN, ERROR) beats drain (the DRAIN flag: drained or draining; FAIL)
    beats busy (ALLOCATED, MIXED, or COMPLETING) beats free (IDLE); anything else
    (FUTURE, UNKNOWN) is unknown.  Slurm has no "offline".  NOT_RESPONDING alone
    changes nothing: slurmctld sets it for a moment on every ``state=resume`` (it
    pings the node), and marks a node that stays silent DOWN itself after
    SlurmdTimeout; the flag shows in ``native_state`` (``IDLE+NOT_RESPONDING``).
    """
    if not isinstance(base, str) or not base:
        raise BadRecord(f"node state missing or not a string: {base!r:.40}")
    word = base.upper()
    flag_set = (
        {f.upper() for f in flags if isinstance(f, str)} if isinstance(flags, list) else set()
    )
    if word in _NODE_DOWN_BASES:
        return NODE_DOWN
    if flag_set & _NODE_DRAIN_FLAGS:
        return NODE_DRAIN
    if word in _NODE_BUSY_BASES or (word == "IDLE" and "COMPLETING" in flag_set):
        return NODE_BUSY
    if word == "IDLE":
        return NODE_FREE
    return UNKNOWN


def normalise_node(
    name: str, native: Native, *, scheduler: str = "slurm", tz: str | None = None
) -> Record:
    """One node of ``sinfo --json`` as a normalised record.

    ``native_state`` reads like scontrol's (``MIXED+DRAIN``).  ``jobs`` are the
    ids of the jobs running there, which :class:`SlurmBackend` adds to the record
    as ``jobtap_jobs`` from the same cycle's squeue (sinfo does not list them).
    """
    check_object_id(name, "node name")
    check_record(native, "node")
    base = native.get("state")
    flags = native.get("state_flags")
    state = node_state(base, flags)
    flag_words = [f for f in flags if isinstance(f, str)] if isinstance(flags, list) else []
    jobs = native.get("jobtap_jobs")
    return {
        "id": name,
        "scheduler": scheduler,
        "state": state,
        "native_state": "+".join([base.upper(), *flag_words]),
        "reason": _text(native, "reason"),
        "jobs": [j for j in jobs if isinstance(j, str)] if isinstance(jobs, list) else [],
        "resources": {
            "available": {
                "cpus": parse_int(native.get("cpus")),
                "mem": parse_int(native.get("real_memory")),
                "gres": _text(native, "gres"),
                "features": _text(native, "active_features"),
                "partitions": native.get("partitions") or [],
            },
            "assigned": {
                "cpus": parse_int(native.get("alloc_cpus")),
                "mem": parse_int(native.get("alloc_memory")),
                "gres": _text(native, "gres_used"),
            },
        },
        "native": native,
    }


# Queues (partitions) ---------------------------------------------------------------
_PARTITION_STATES = {
    "UP": QUEUE_OPEN,
    "DOWN": QUEUE_STOPPED,
    "DRAIN": QUEUE_CLOSED,
    "INACTIVE": QUEUE_CLOSED,
}


def partition_state(value: Any) -> str:
    """``State=`` of a partition: UP -> open; DOWN (accepts jobs, starts none) ->
    stopped; DRAIN (refuses new jobs, runs its own) and INACTIVE -> closed."""
    if not isinstance(value, str) or not value:
        raise BadRecord(f"partition State missing: {value!r:.40}")
    return _PARTITION_STATES.get(value.upper(), UNKNOWN)


def _number_or_text(value: Any) -> int | str | None:
    if value is None or value == "":
        return None
    number = parse_int(value)
    return number if number is not None else value


def normalise_queue(
    name: str, native: Native, *, scheduler: str = "slurm", tz: str | None = None
) -> Record:
    """One partition of ``scontrol show partition -o`` as a normalised queue record.

    ``counts`` are the active jobs by normalised state and their ``total``, which
    :class:`SlurmBackend` adds as ``jobtap_counts`` from the same cycle's squeue.
    """
    check_object_id(name, "queue name")
    check_record(native, "queue")
    native_state = native.get("State")
    counts = native.get("jobtap_counts")
    return {
        "id": name,
        "scheduler": scheduler,
        "state": partition_state(native_state),
        "native_state": native_state,
        "counts": dict(counts) if isinstance(counts, dict) else {},
        "resources": {
            "available": {
                "cpus": _number_or_text(native.get("TotalCPUs")),
                "nodes": _number_or_text(native.get("TotalNodes")),
                "tres": native.get("TRES"),
                "node_list": native.get("Nodes"),
            },
            "max": {
                "walltime": native.get("MaxTime"),
                "nodes": _number_or_text(native.get("MaxNodes")),
                "cpus_per_node": _number_or_text(native.get("MaxCPUsPerNode")),
                "mem_per_node": native.get("MaxMemPerNode"),
            },
            "default": {"walltime": native.get("DefaultTime")},
        },
        "native": native,
    }


# The backend -----------------------------------------------------------------------
class SlurmBackend(CommandBackend):
    """Slurm through its commands: ``squeue --json`` (jobs), ``sinfo --json``
    (nodes), ``scontrol show partition -o`` (queues), ``sacct --json`` (history);
    a compact ``squeue`` text line per job as the cheap probe, and
    ``slurmrestd`` (inetd mode, see :mod:`.slurm_rest`) for the full records of
    a few jobs.

    ``prefix``: a command prefix such as ``"ssh head1"`` (a string is split with
    shlex; words are shell-quoted when it runs ssh).  ``squeue``, ``sinfo``,
    ``sacct``, ``scontrol``, ``slurmrestd``: the commands (``slurmrestd=""``:
    never use it; a targeted stat is then one ``squeue --json`` filtered).
    ``timeout``: seconds per command.  ``history_batch``: job ids per sacct
    call.  ``drop_volatile``: leave out the keys that change at every scheduler
    pass (``last_sched_evaluation`` of jobs, ``cpu_load`` and ``free_memory``
    of nodes), so that they do not make every pending job and every node an
    update event each cycle.

    ``stat_nodes`` and ``stat_queues`` use the jobs of the latest ``stat_jobs``
    (this cycle's or, when the collector stats nodes first, the previous one's),
    kept up to date by the probes and targeted stats since, to add each node's
    running jobs (``jobtap_jobs``) and each partition's job counts
    (``jobtap_counts``); before any job stat they add neither.
    """

    scheduler: str
    # 22.05 answers the probe's listing with the RPC of a full stat (see probe()):
    # in follow mode the collector relies on the hook's pokes instead (a pushed
    # plan, collector/plan.py).
    probe_costs_full_stat = True

    def __init__(
        self,
        *,
        prefix: str | Sequence[str] = (),
        squeue: str = "squeue",
        sinfo: str = "sinfo",
        sacct: str = "sacct",
        scontrol: str = "scontrol",
        slurmrestd: str = "slurmrestd",
        sdiag: str = "sdiag",
        timeout: float = 60.0,
        scheduler: str = "slurm",
        history_batch: int = 500,
        drop_volatile: bool = True,
    ) -> None:
        super().__init__(prefix=prefix, timeout=timeout)
        self.squeue = squeue
        self.sinfo = sinfo
        self.sacct = sacct
        self.scontrol = scontrol
        self.slurmrestd = slurmrestd
        self.scheduler = scheduler
        if history_batch < 1:
            raise ValueError("history_batch must be at least 1")
        self.history_batch = int(history_batch)
        self.drop_volatile = bool(drop_volatile)
        self._last_jobs: dict[str, Native] | None = None
        self._openapi: str | None = None  # the plugin of squeue --json, for slurmrestd
        self._rest_unavailable: str | None = None  # why slurmrestd is not used
        self.sdiag = sdiag
        self._rpc_seen: dict[str, tuple[int, int]] | None = None  # sdiag's, last time

    def __repr__(self) -> str:
        return f"SlurmBackend({self.squeue!r}{self._via()})"

    # Stats ---------------------------------------------------------------------
    def stat_jobs(self) -> dict[str, Native]:
        jobs = self._squeue()
        self._last_jobs = jobs
        return jobs

    def _squeue(self) -> dict[str, Native]:
        """Every job of ``squeue --json``, volatile keys left out: the one source
        of live records of a full stat (and of a targeted one without
        slurmrestd).  Notes the openapi plugin that wrote it, which slurmrestd
        must use to write the same records."""
        doc = _load(self._run([self.squeue, "--json"]), "squeue")
        self._openapi = openapi_version(doc) or self._openapi
        return self._without_volatile(squeue_jobs(doc))

    def _without_volatile(self, jobs: dict[str, Native]) -> dict[str, Native]:
        if self.drop_volatile:
            for native in jobs.values():
                if isinstance(native, dict):
                    for key in VOLATILE_JOB_KEYS:
                        native.pop(key, None)
        return jobs

    def probe(self, since: float | None) -> Probe:
        """The cheap probe: one ``squeue -h -a --local -t all -o PROBE_FORMAT``,
        a line per job (see :func:`parse_probe`), every job listed (``since``
        plays no part).  Jobs it no longer lists are dropped from the jobs
        that node and partition records are built from.

        On 22.05 this is the same RPC as ``squeue --json`` (REQUEST_JOB_INFO,
        which packs every job whatever is printed), so it costs slurmctld as
        much; what it saves is squeue's JSON rendering and the collector's
        parsing: about 20 times fewer bytes (docs/performance.md)."""
        raw = self._run([self.squeue, "-h", "-a", "--local", "-t", "all", "-o", PROBE_FORMAT])
        named = parse_probe(raw)
        if self._last_jobs is not None:
            self._last_jobs = {j: n for j, n in self._last_jobs.items() if j in named}
        return Probe(named=named, complete=True)

    def stat_some(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """The current records of these jobs, live or finished (the targeted
        stat of a probe cycle, and follow mode's refresh), keyed like
        :meth:`stat_jobs` and :meth:`history` (``"12"``, ``"12_3"``); ids Slurm
        does not know are absent.

        A job slurmctld still knows (queued, running, or finished less than
        ``MinJobAge`` ago) gets exactly the record :meth:`stat_jobs` would give
        it, so an unchanged job has the same fingerprint whichever of the two
        saw it, and the next full stat ships nothing for it: through
        ``slurmrestd``, one single-job RPC per job, written by the plugin that
        wrote the last ``squeue --json`` (:mod:`.slurm_rest`).  When that is not
        possible (no full stat yet, ``slurmrestd`` missing or switched off), it
        is one ``squeue --json`` filtered here (22.05's ``squeue --json`` prints
        every job whatever ``-j`` says).  When so many jobs are poked that one
        listing costs slurmctld less, the collector's plan asks
        :meth:`stat_jobs` instead (plan.ReadBudget, :meth:`read_costs`).

        A job that slurmctld no longer knows gets its final record from
        :meth:`history` (``sacct``), which is also what a full cycle ships for
        it.  If ``sacct`` fails (slurmdbd away), those jobs are left out (the
        next full cycle looks them up again) and the live ones still come back.

        An array task is ``ARRAY_TASK``; its own job number (``SLURM_JOB_ID`` of
        the task, e.g. ``25`` for ``20_3``) is not one of its ids and comes back
        absent: deploy/slurm/jobtap-slurmctld-hook.sh pokes ``20_3``.
        """
        wanted: dict[str, None] = {}
        for job_id in job_ids:
            if isinstance(job_id, str) and _JOB_ID.match(job_id):
                wanted[job_id] = None
        if not wanted:
            return {}
        live = self._live_records(list(wanted))
        found = {job_id: live[job_id] for job_id in wanted if job_id in live}
        if self._last_jobs is not None:
            self._last_jobs.update(found)
        gone = [job_id for job_id in wanted if job_id not in live]
        if gone:
            try:
                found.update(self.history(gone))
            except StatError as exc:
                log.warning("targeted stat: sacct of %d jobs failed: %s", len(gone), exc)
        return found

    def _live_records(self, job_ids: list[str]) -> dict[str, Native]:
        """Records of these jobs as ``squeue --json`` writes them (and maybe of
        others): through slurmrestd when it can, else from one full ``squeue
        --json``.  Whether one listing would cost slurmctld less than these
        single reads is the plan's decision (plan.ReadBudget), made before."""
        version = self._openapi
        numbers = list(dict.fromkeys(j.partition("_")[0] for j in job_ids))
        if self.slurmrestd and version and not self._rest_unavailable:
            try:
                return self._rest_records(numbers, version)
            except _RestUnavailable as exc:
                self._rest_unavailable = str(exc)
                log.warning("slurmrestd cannot be used (%s): targeted stats list every job", exc)
        return self._squeue()

    def _rest_records(self, numbers: list[str], version: str) -> dict[str, Native]:
        """``GET /slurm/VERSION/job/N`` for each job number, through one
        slurmrestd (and one more for the requests after an unknown job, whose
        error answer closes the connection).  An array's number brings all its
        tasks.  Unknown jobs are absent; any other error is a StatError."""
        argv = ["env", "SLURMRESTD_SECURITY=disable_user_check", self.slurmrestd,
                "-a", "rest_auth/local", "-s", f"openapi/{version}"]  # fmt: skip
        out: dict[str, Native] = {}
        while numbers:
            status, raw, err = self._run_full(argv, input=slurm_rest.requests(version, numbers))
            if status in (126, 127):  # env could not run it: not installed, not executable
                raise _RestUnavailable(first_line(err))
            got = slurm_rest.answers(raw)
            if not got:
                raise StatError(f"slurmrestd answered none of {len(numbers)} requests"
                                f" (status {status}): {first_line(err)}")  # fmt: skip
            for (code, doc), number in zip(got, numbers, strict=False):
                if slurm_rest.unknown_job(code, doc):
                    continue
                errors = doc.get("errors")
                if code != 200 or errors:
                    raise StatError(f"slurmrestd on job {number}: HTTP {code}, "
                                    f"{_describe_errors(errors)}")  # fmt: skip
                out.update(squeue_jobs(doc, "slurmrestd"))
            numbers = numbers[len(got) :]
        return self._without_volatile(out)

    def reads_singly(self) -> bool:
        """Whether :meth:`stat_some` reads live jobs one by one (slurmrestd)."""
        return bool(self.slurmrestd and self._openapi and not self._rest_unavailable)

    def read_costs(self) -> dict[str, float]:
        """slurmctld's own time per read since the previous call, from
        ``sdiag``'s RPC statistics: ``listing`` (REQUEST_JOB_INFO, what
        ``squeue`` costs) and ``single`` (a job read on its own through
        slurmrestd: REQUEST_JOB_INFO_SINGLE plus its REQUEST_FED_INFO), each
        present only if such RPCs ran since (the first call: since slurmctld's
        statistics were last reset).  They are every client's RPCs of those
        types: what one costs slurmctld now, whoever asks."""
        stats = parse_sdiag_rpcs(self._run([self.sdiag]))
        prev, self._rpc_seen = self._rpc_seen, stats
        out: dict[str, float] = {}
        for key, rpcs in (("listing", _LISTING_RPCS), ("single", _SINGLE_RPCS)):
            total = 0.0
            for rpc in rpcs:
                count, micros = stats.get(rpc, (0, 0))
                before = (prev or {}).get(rpc, (0, 0))
                if count < before[0]:  # statistics were reset since
                    before = (0, 0)
                if count - before[0] <= 0:
                    break
                total += (micros - before[1]) / (count - before[0]) / 1e6
            else:
                out[key] = total
        return out

    def stat_nodes(self) -> dict[str, Native]:
        nodes = parse_sinfo(self._run([self.sinfo, "--json"]))
        on_node = self._jobs_by_node() if self._last_jobs is not None else None
        for name, native in nodes.items():
            if not isinstance(native, dict):
                continue
            if self.drop_volatile:
                for key in VOLATILE_NODE_KEYS:
                    native.pop(key, None)
            if on_node is not None:
                native["jobtap_jobs"] = on_node.get(name, [])
        return nodes

    def stat_queues(self) -> dict[str, Native]:
        partitions = parse_scontrol_partitions(
            self._run([self.scontrol, "show", "partition", "-o"])
        )
        if self._last_jobs is not None:
            counts = self._counts_by_partition()
            for name, native in partitions.items():
                native["jobtap_counts"] = counts.get(name, {"total": 0})
        return partitions

    def _jobs_by_node(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for job_id, native in (self._last_jobs or {}).items():
            if not isinstance(native, dict):
                continue
            try:
                state = job_state(native.get("job_state"), None, None)
            except BadRecord:
                continue
            if state not in _ON_NODES:
                continue
            resources = native.get("job_resources")
            nodes = resources.get("nodes") if isinstance(resources, dict) else None
            for node in expand_hostlist(nodes or native.get("nodes")):
                out.setdefault(node, []).append(job_id)
        return out

    def _counts_by_partition(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for native in (self._last_jobs or {}).values():
            if not isinstance(native, dict):
                continue
            try:
                state = job_state(
                    native.get("job_state"), native.get("state_reason"), native.get("priority")
                )
            except BadRecord:
                continue
            if state in TERMINAL:
                continue
            partitions = native.get("partition")
            for partition in partitions.split(",") if isinstance(partitions, str) else ():
                counts = out.setdefault(partition, {"total": 0})
                counts[state] = counts.get(state, 0) + 1
                counts["total"] += 1
        return out

    def history(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """Final records of jobs from ``sacct --json -j ID,ID,...``, for the ids the
        accounting database knows; the others are absent from the result (when
        it knows none of them, 22.05's sacct reports "Nothing found" as an
        error: that is an empty result, not a failure).

        For the jobs that ended other than COMPLETED, one more call, ``sacct -n -P
        -o JobID,ExitCode -j ...``, supplies the exit codes that 22.05's JSON
        prints as 0 (added to the record as ``jobtap_exit_codes``).
        """
        wanted: list[str] = []
        seen: set[str] = set()
        for job_id in job_ids:
            # Only plain ids and array tasks reach the command line.
            if isinstance(job_id, str) and job_id not in seen and _JOB_ID.match(job_id):
                seen.add(job_id)
                wanted.append(job_id)
        found: dict[str, Native] = {}
        for start in range(0, len(wanted), self.history_batch):
            batch = wanted[start : start + self.history_batch]
            ids = ",".join(batch)
            raw = self._run([self.sacct, "--json", "-j", ids])
            try:
                records = parse_sacct(raw)
            except StatError:
                if not _nothing_found(raw):
                    raise
                records = {}  # sacct knows none of them
            records = {job_id: records[job_id] for job_id in batch if job_id in records}
            found.update(self._with_exit_codes(records))
        return found

    def _with_exit_codes(self, records: dict[str, Native]) -> dict[str, Native]:
        """``records`` with ``jobtap_exit_codes`` added to those whose JSON exit
        code may be wrong (one ``sacct -o JobID,ExitCode`` per batch)."""
        unsure = [job_id for job_id, native in records.items() if _exit_unsure(native)]
        for start in range(0, len(unsure), self.history_batch):
            batch = unsure[start : start + self.history_batch]
            out = self._run([self.sacct, "-n", "-P", "-o", "JobID,ExitCode", "-j", ",".join(batch)])
            codes = parse_sacct_exit_codes(out)
            for job_id in batch:
                if job_id in codes:
                    records[job_id] = {**records[job_id], "jobtap_exit_codes": codes[job_id]}
        return records

    def ended_since(self, since: float) -> dict[str, Native]:
        """Final records of every job that ended at ``since`` (seconds since the
        epoch) or later, whoever its user, as :meth:`history` gives them:
        ``sacct --json -a -s ENDED_STATES -S now-N -E now``.  With ``-s``, sacct's
        window selects the jobs that reached one of those states within it.
        The start is given relative to sacct's own clock (``now-N``, N seconds
        rounded up), so no time zone or clock of this host's is involved but
        the length of the window.

        A reconciliation asks this for the window since the previous one: a
        job that was submitted, ran and left ``squeue`` in between, with no poke
        (hook off, poke lost), still gets its ``new`` and ``final``."""
        seconds = max(1, math.ceil(time.time() - since))
        raw = self._run([self.sacct, "--json", "-a", "-s", ENDED_STATES,
                         "-S", f"now-{seconds}", "-E", "now"])  # fmt: skip
        try:
            records = parse_sacct(raw)
        except StatError:
            if not _nothing_found(raw):
                raise
            records = {}
        records = {j: n for j, n in records.items() if _JOB_ID.match(j)}
        return self._with_exit_codes(records)

    # Normalising ---------------------------------------------------------------
    def normalise_job(self, job_id: str, native: Native) -> Record:
        return normalise_job(job_id, native, scheduler=self.scheduler)

    def normalise_node(self, name: str, native: Native) -> Record:
        return normalise_node(name, native, scheduler=self.scheduler)

    def normalise_queue(self, name: str, native: Native) -> Record:
        return normalise_queue(name, native, scheduler=self.scheduler)


class _RestUnavailable(Exception):
    """slurmrestd cannot run here (not installed, not executable)."""


# sacct's short names of the states a job ends in (``sacct -s``).
ENDED_STATES = "BF,CA,CD,DL,F,NF,OOM,PR,RV,TO"

# slurmctld's RPCs behind a listing and behind a job read on its own (slurmrestd's
# GET /job/N: slurm_load_job() asks for the federation first, not being --local).
_LISTING_RPCS = ("REQUEST_JOB_INFO",)
_SINGLE_RPCS = ("REQUEST_JOB_INFO_SINGLE", "REQUEST_FED_INFO")
_SDIAG_RPC = re.compile(
    r"^\s*([A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)"
)


def parse_sdiag_rpcs(raw: bytes | str) -> dict[str, tuple[int, int]]:
    """``sdiag``'s "Remote Procedure Call statistics by message type":
    ``{type: (count, total microseconds)}``.  Output without that section
    raises :class:`StatError`."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    out: dict[str, tuple[int, int]] = {}
    in_section = False
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            in_section = True
            continue
        if in_section and line and not line[0].isspace():
            break
        match = _SDIAG_RPC.match(line) if in_section else None
        if match:
            out[match[1]] = (int(match[2]), int(match[3]))
    if not in_section:
        raise StatError("sdiag printed no RPC statistics by message type")
    return out


SACCT_NOTHING_FOUND = 9003  # slurmdb_jobs_get: "Nothing found with query"


def _nothing_found(raw: bytes | str) -> bool:
    """``sacct --json -j IDS`` when the database knows none of the ids: 22.05
    exits 0 with no jobs and this single complaint in ``errors``, which means
    "none of them", not a failed query."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    if not isinstance(doc, dict) or doc.get("jobs"):
        return False
    errors = doc.get("errors")
    return (
        isinstance(errors, list)
        and bool(errors)
        and all(
            isinstance(e, dict) and e.get("error_number") == SACCT_NOTHING_FOUND for e in errors
        )
    )


def _exit_unsure(native: Any) -> bool:
    """A sacct record whose JSON exit code may be wrong: it ended other than
    COMPLETED (22.05 prints a non-zero exit as SUCCESS/0)."""
    if not isinstance(native, dict):
        return False
    state = native.get("state")
    word = state.get("current") if isinstance(state, dict) else None
    if not isinstance(word, str) or not word:
        return False
    word = word.split()[0].upper()
    return JOB_STATES.get(word) in TERMINAL and word != "COMPLETED"
