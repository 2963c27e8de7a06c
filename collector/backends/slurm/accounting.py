"""What slurmdbd keeps: ``sacct --json`` (the final record of a job that left
slurmctld's list), ``sacct -n -P -o JobID,ExitCode`` (exit codes that the JSON
of 22.05 and 23.02 gets wrong) and the reconciliation's window of ended jobs.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from jobtap.schema import TERMINAL

from ..base import Native
from .listing import load_document, records
from .normalise import JOB_STATES
from .values import expand_task_ids, jobtap_id
from .versions import PLAIN, Generation, generation_of

__all__ = [
    "ENDED_STATES",
    "SACCT_NOTHING_FOUND",
    "exit_unsure",
    "nothing_found",
    "parse_sacct",
    "parse_sacct_exit_codes",
]

# sacct's short names of the states a job ends in (``sacct -s``).
ENDED_STATES = "BF,CA,CD,DL,F,NF,OOM,PR,RV,TO"
SACCT_NOTHING_FOUND = 9003  # slurmdb_jobs_get: "Nothing found with query"


def _sacct_id(job: dict[str, Any], gen: Generation) -> str | None:
    array = job.get("array") if isinstance(job.get("array"), dict) else {}
    task = gen.number(array.get("task_id"))
    return jobtap_id(job.get("job_id"), gen.number(array.get("job_id")), task)


def parse_sacct(raw: bytes | str) -> dict[str, Native]:
    """``sacct --json`` -> ``{job id: native record}``.

    Job steps are nested in their job's record (``steps``); the job's own record
    is the one kept.  Array tasks are ``ARRAY_TASK``; a record of tasks that never
    started (``array.task`` = ``"1-4"``) is expanded like squeue's.
    """
    doc, fmt = load_document(raw, "sacct")
    gen = fmt.generation
    out: dict[str, Native] = {}
    for index, job in enumerate(records(doc, "jobs", "sacct")):
        if not isinstance(job, dict):
            out[f"?{index}"] = job
            continue
        array = job.get("array") if isinstance(job.get("array"), dict) else {}
        array_id = gen.number(array.get("job_id")) or 0
        spec = array.get("task")
        if array_id and gen.number(array.get("task_id")) is None and spec:
            tasks = expand_task_ids(spec) if isinstance(spec, str) else None
            if tasks is not None:
                for task in tasks:
                    copy = {**array, "task_id": gen.as_number(task),
                            "task": None if gen is PLAIN else ""}  # fmt: skip
                    out.setdefault(f"{array_id}_{task}", {**job, "array": copy})
                continue
        job_id = _sacct_id(job, gen)
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


def nothing_found(raw: bytes | str) -> bool:
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


def exit_unsure(native: Any) -> bool:
    """A sacct record whose JSON exit code may be wrong: written by a generation
    that prints every plain exit as SUCCESS/0 (v0.0.38, v0.0.39), for a job that
    ended other than COMPLETED."""
    if not isinstance(native, dict):
        return False
    gen = generation_of(native)
    if gen.sacct_exit_trusted:
        return False
    state = native.get("state")
    word = gen.job_word(state.get("current") if isinstance(state, dict) else None)
    return JOB_STATES.get(word or "") in TERMINAL and word != "COMPLETED"
