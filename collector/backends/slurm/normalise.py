"""One Slurm record -> the normalised record of ``jobtap.schema``: jobs (of
``squeue --json``, of ``sacct --json`` or of slurmrestd), nodes and partitions,
exactly as the PBS backend does (same fields, same rules for times, exit status
and reason).  Every field is read through the generation of the JSON that
wrote the record (:mod:`.versions`), so one job gives one normalised record
whichever release printed it.

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
``15`` = SIGTERM) up to v0.0.39, as an object from v0.0.40 on.  sacct's JSON
of 22.05 and 23.02 prints every plain non-zero exit as ``{"status": "SUCCESS",
"return_code": 0}``; :meth:`SlurmBackend.history` therefore also asks
``sacct -o JobID,ExitCode`` (``"3:0"``) and adds it to the record as ``jobtap_exit_codes``.

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

import re
from typing import Any

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

from ..base import BadRecord, Native, Record, check_object_id
from ..common import (
    QUEUE_CLOSED,
    QUEUE_OPEN,
    QUEUE_STOPPED,
    check_record,
    mapping_field,
    parse_int,
)
from .hook import COMPLETION_KEY
from .values import (
    duration,
    exit_status_from_text,
    expand_hostlist,
    slurm_time,
    text,
    tres,
    user_of_uid,
    walltime,
)
from .versions import FLAGS, Generation, generation_of, job_state_word, node_generation

__all__ = [
    "JOB_STATES",
    "job_state",
    "node_state",
    "normalise_job",
    "normalise_node",
    "normalise_queue",
    "partition_state",
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

# Node states: base state of sinfo's JSON (lower case) and its flags.
_NODE_DOWN_BASES = frozenset({"DOWN", "ERROR"})
_NODE_DRAIN_FLAGS = frozenset({"DRAIN", "FAIL"})
_NODE_BUSY_BASES = frozenset({"ALLOCATED", "MIXED"})


# Jobs ------------------------------------------------------------------------------
def job_state(native_state: Any, reason: Any = None, priority: Any = None) -> str:
    """The normalised state of a Slurm job state, its text (``"RUNNING"``,
    sacct's ``"CANCELLED by 0"``) or its flag list (``["RUNNING"]``), and of
    its pending reason and priority (a number, or a v0.0.39+ number object);
    see the module's table."""
    word = job_state_word(native_state)
    if word is None:
        raise BadRecord(f"job state missing or unreadable: {native_state!r:.60}")
    state = JOB_STATES.get(word, UNKNOWN)
    if state == QUEUED and word == "PENDING":
        if reason in HOLD_REASONS or FLAGS.number(priority) == 0:
            return HELD
        if reason in WAIT_REASONS:
            return WAITING
    return state


def _user(name: Any, uid: Any) -> str:
    user = name if isinstance(name, str) and name else None
    if user is None:
        number = parse_int(uid)
        user = user_of_uid(number) if number is not None and number >= 0 else None
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


def _array_fields(job_id: str, parent: int, index: int | None) -> tuple[str | None, int | None]:
    if not parent:
        return None, None
    if index is None:
        head, sep, tail = job_id.partition("_")
        index = parse_int(tail) if sep else None
    return str(parent), index


def _native_state(value: Any, word: str) -> Any:
    """``native_state``: the state as printed when it is text (22.05, 23.02),
    else the word 22.05 printed for it (``["COMPLETED", "COMPLETING"]`` ->
    ``"COMPLETING"``), so one job has one ``native_state`` on every release."""
    return value if isinstance(value, str) else word


def _normalise_squeue(job_id: str, native: Native, gen: Generation, scheduler: str) -> Record:
    printed = native.get("job_state")
    slurm_reason = native.get("state_reason")
    state = job_state(printed, slurm_reason, native.get("priority"))
    word = job_state_word(printed) or ""
    user = _user(native.get("user_name"), native.get("user_id"))
    allocated = expand_hostlist(gen.job_nodes(native))
    ran = bool(allocated) or bool(native.get("batch_host"))
    started = ran and state not in _NOT_STARTED
    ended = state in TERMINAL or state == EXITING
    exit_status = gen.squeue_exit(native.get("exit_code")) if ended and ran else None
    start, end = gen.number(native.get("start_time")), gen.number(native.get("end_time"))
    asked = tres(native.get("tres_req_str"))
    used: dict[str, Any] = {}
    if state in TERMINAL and started and start and end and end >= start:
        used["walltime"] = duration(end - start)
    array_parent, array_index = _array_fields(
        job_id, gen.number(native.get("array_job_id")) or 0, gen.number(native.get("array_task_id"))
    )
    return {
        "id": job_id,
        "scheduler": scheduler,
        "user": user,
        "group": text(native, "group_name"),
        "account": text(native, "account"),
        "name": text(native, "name"),
        "queue": text(native, "partition"),
        "state": state,
        "native_state": _native_state(printed, word),
        "reason": _reason(state, word, text(native, "state_reason"), exit_status, None),
        "comment": text(native, "comment"),
        "submit_time": slurm_time(gen.number(native.get("submit_time"))),
        "start_time": slurm_time(start) if started else None,
        "end_time": slurm_time(end) if ended and end else None,
        "exit_status": exit_status,
        "requested": {
            "ncpus": gen.number(native.get("cpus")) or parse_int(asked.get("cpu")),
            "nodes": gen.number(native.get("node_count")) or parse_int(asked.get("node")),
            "mem": asked.get("mem"),
            "walltime": walltime(gen.number(native.get("time_limit"))),
            "select": None,
        },
        "allocated": allocated,
        "resources_used": used,
        "array_parent": array_parent,
        "array_index": array_index,
        "priority": gen.number(native.get("priority")),
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


def _sacct_exit(native: Native, gen: Generation, word: str) -> int | None:
    """The job's exit status from a sacct record: the text codes that history adds
    (the batch script's, else the job's); failing those, the JSON (the batch
    step's, else the job's).  Where the generation prints every plain non-zero
    exit as 0 (v0.0.38, v0.0.39), a zero for a job that did not complete means
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
            if gen.is_batch_step(step):
                status = gen.sacct_exit(step.get("exit_code"))
                break
    if status is None:
        status = gen.sacct_exit(native.get("exit_code"))
    if status == 0 and word != "COMPLETED" and not gen.sacct_exit_trusted:
        return None
    return status


def _normalise_sacct(job_id: str, native: Native, gen: Generation, scheduler: str) -> Record:
    state_obj = mapping_field(native, "state")
    printed = state_obj.get("current")
    slurm_reason = state_obj.get("reason")
    state = job_state(printed, slurm_reason, native.get("priority"))
    word = job_state_word(printed) or ""
    user = _user(native.get("user"), None)
    times = mapping_field(native, "time")
    allocated = expand_hostlist(native.get("nodes"))
    start, end = gen.number(times.get("start")), gen.number(times.get("end"))
    ran = bool(allocated) and bool(start)
    started = ran and state not in _NOT_STARTED
    ended = state in TERMINAL or state == EXITING
    exit_status = _sacct_exit(native, gen, word) if ended and ran else None
    asked = _tres_list(mapping_field(native, "tres").get("requested"))
    required = mapping_field(native, "required")
    used: dict[str, Any] = {}
    if state in TERMINAL and started:
        elapsed = duration(gen.number(times.get("elapsed")))
        if elapsed is not None:
            used["walltime"] = elapsed
        total = mapping_field(times, "total")
        if "seconds" in total:
            used["cput"] = duration(gen.number(total.get("seconds")))
    comment = native.get("comment")
    comment_text = comment.get("job") if isinstance(comment, dict) else comment
    array = mapping_field(native, "array")
    array_parent, array_index = _array_fields(
        job_id, gen.number(array.get("job_id")) or 0, gen.number(array.get("task_id"))
    )
    killer = native.get("kill_request_user")
    mem = asked.get("mem")
    return {
        "id": job_id,
        "scheduler": scheduler,
        "user": user,
        "group": text(native, "group"),
        "account": text(native, "account"),
        "name": text(native, "name"),
        "queue": text(native, "partition"),
        "state": state,
        "native_state": _native_state(printed, word),
        "reason": _reason(
            state,
            word,
            slurm_reason if isinstance(slurm_reason, str) else None,
            exit_status,
            killer if isinstance(killer, str) and killer else None,
        ),
        "comment": comment_text if isinstance(comment_text, str) and comment_text else None,
        "submit_time": slurm_time(gen.number(times.get("submission"))),
        "start_time": slurm_time(start) if started else None,
        "end_time": slurm_time(end) if ended and end else None,
        "exit_status": exit_status,
        "requested": {
            "ncpus": gen.number(required.get("CPUs")) or asked.get("cpu"),
            "nodes": asked.get("node") or gen.number(native.get("allocation_nodes")) or None,
            "mem": f"{mem}M" if mem else None,
            "walltime": walltime(gen.number(times.get("limit"))),
            "select": None,
        },
        "allocated": allocated,
        "resources_used": used,
        "array_parent": array_parent,
        "array_index": array_index,
        "priority": gen.number(native.get("priority")),
        "native": native,
    }


def _limit_minutes(text: str | None) -> int | None:
    """jobcomp's ``LIMIT`` (``"00:02:00"``, ``"1-00:00:00"``, ``"UNLIMITED"``) in minutes."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d\d):(\d\d)", text or "")
    if match is None:
        return None
    days, hours, minutes = int(match[1] or 0), int(match[2]), int(match[3])
    return (days * 24 + hours) * 60 + minutes


def _normalise_completion(job_id: str, native: Native, scheduler: str) -> Record:
    """A completion record (:mod:`.hook`): jobcomp's facts, and what the
    collector's last listing said of what jobcomp does not (memory, priority,
    comment), read as the listing's own record of the job would be."""
    facts = mapping_field(native, COMPLETION_KEY)
    listed = mapping_field(native, "jobtap_listed")
    word = job_state_word(facts.get("JOBSTATE")) or ""
    state = job_state(word)
    exit_status = exit_status_from_text(facts.get("EXITCODE"))
    allocated = expand_hostlist(facts.get("NODES"))
    start, end = parse_int(facts.get("START")), parse_int(facts.get("END"))
    asked = tres(listed.get("tres_req_str"))
    used: dict[str, Any] = {}
    if allocated and start and end and end >= start:
        used["walltime"] = duration(end - start)
    array_id = parse_int(facts.get("ARRAYJOBID")) or 0
    array_parent, array_index = _array_fields(
        job_id, array_id, parse_int(facts.get("ARRAYTASKID")) if array_id else None
    )
    comment = listed.get("comment")
    return {
        "id": job_id,
        "scheduler": scheduler,
        "user": _user(facts.get("USERNAME"), None),
        "group": text(facts, "GROUPNAME"),
        "account": text(facts, "ACCOUNT"),
        "name": text(facts, "JOBNAME"),
        "queue": text(facts, "PARTITION"),
        "state": state,
        "native_state": word,
        "reason": _reason(state, word, None, exit_status, None),
        "comment": comment if isinstance(comment, str) and comment else None,
        "submit_time": slurm_time(facts.get("SUBMIT")),
        "start_time": slurm_time(start) if allocated else None,
        "end_time": slurm_time(end),
        "exit_status": exit_status if allocated else None,
        "requested": {
            "ncpus": parse_int(facts.get("PROCS")),
            "nodes": parse_int(facts.get("NODECNT")),
            "mem": asked.get("mem"),
            "walltime": walltime(_limit_minutes(facts.get("LIMIT"))),
            "select": None,
        },
        "allocated": allocated,
        "resources_used": used,
        "array_parent": array_parent,
        "array_index": array_index,
        "priority": FLAGS.number(listed.get("priority")),
        "native": native,
    }


def normalise_job(
    job_id: str, native: Native, *, scheduler: str = "slurm", tz: str | None = None
) -> Record:
    """One job of ``squeue --json``, of ``sacct --json`` or of a completion
    record (:mod:`.hook`) as a normalised record.

    ``tz`` is accepted for the common signature and ignored: Slurm prints epoch
    seconds.  ``native`` is the record itself, not a copy, and is not modified.
    """
    check_object_id(job_id, "job id")
    check_record(native, "job")
    if COMPLETION_KEY in native:
        return _normalise_completion(job_id, native, scheduler)
    number = native.get("job_id")
    if parse_int(number) is None or isinstance(number, str):
        raise BadRecord(f"job_id missing or not a number: {number!r:.40}")
    gen = generation_of(native)
    if "job_state" in native:
        return _normalise_squeue(job_id, native, gen, scheduler)
    if isinstance(native.get("state"), dict):
        return _normalise_sacct(job_id, native, gen, scheduler)
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
    """One node of the node listing (22.05's ``sinfo --json``, later ``scontrol
    show nodes --json``) as a normalised record.

    ``native_state`` reads like scontrol's (``MIXED+DRAIN``).  ``jobs`` are the
    ids of the jobs running there, which :class:`SlurmBackend` adds to the record
    as ``jobtap_jobs`` from the same cycle's squeue (sinfo does not list them).
    """
    check_object_id(name, "node name")
    check_record(native, "node")
    gen = node_generation(native)
    base, flag_words = gen.node_state(native)
    state = node_state(base, flag_words)
    jobs = native.get("jobtap_jobs")
    return {
        "id": name,
        "scheduler": scheduler,
        "state": state,
        "native_state": "+".join([base.upper(), *flag_words]),
        "reason": text(native, "reason"),
        "jobs": [j for j in jobs if isinstance(j, str)] if isinstance(jobs, list) else [],
        "resources": {
            "available": {
                "cpus": gen.number(native.get("cpus")),
                "mem": gen.number(native.get("real_memory")),
                "gres": text(native, "gres"),
                "features": gen.text_list(native.get("active_features")),
                "partitions": native.get("partitions") or [],
            },
            "assigned": {
                "cpus": gen.number(native.get("alloc_cpus")),
                "mem": gen.number(native.get("alloc_memory")),
                "gres": text(native, "gres_used"),
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
