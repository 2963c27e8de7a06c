"""What slurmctld's own scripts send: the completion record of a job.

deploy/slurm/jobtap-slurmctld-hook.sh pokes the collector as ``PrologSlurmctld``
and ``EpilogSlurmctld`` (a job starts, ends), and, named as ``JobCompLoc`` with
``JobCompType=jobcomp/script`` (every release from 22.05), once slurmctld has
completed a job: its poke then carries what jobcomp put in the script's
environment, as a JSON object of text values (``JOBID``, ``JOBSTATE``,
``EXITCODE`` ``"3:0"``, ``START``, ``END``, ``NODES``, ``PARTITION``,
``USERNAME``...; captures in tests/fixtures/slurm/*/jobcomp-env/).

Such a record lets the collector ship the job's final without asking slurmctld.
It is accepted (:func:`completion_record`) only where it cannot be false:

* the job ended COMPLETED or FAILED, where the job's ``EXITCODE`` is the batch
  script's (a cancelled, timed-out or node-failed job's is not: sacct then has
  the script killed by a signal and the job at ``0:0``), and its exit code
  agrees with its state;
* the collector has listed the job before: jobcomp says nothing of its memory,
  priority or comment, which are taken from that listing's record
  (``jobtap_listed``), so the final does not show them changed.

Anything else is read from slurmctld as for a record-less poke.  The record
cannot equal the listing's (another shape, fewer fields); the collector never
ships a job again once its final went out from a poke's record
(``Collector._not_after_poked_final``), so the listing that still shows the job
for ``MinJobAge`` changes nothing.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from ..base import Native
from ..common import parse_int
from .values import jobtap_id

__all__ = ["COMPLETION_KEY", "LISTED_KEYS", "completion_record"]

COMPLETION_KEY = "jobcomp"  # the native record's key that holds jobcomp's facts
# What jobcomp does not say, taken from the collector's last listing of the job.
LISTED_KEYS = ("tres_req_str", "priority", "comment")
_TRUSTED = {"COMPLETED": True, "FAILED": False}  # state -> exit code 0:0 expected
_EXIT = re.compile(r"^(\d{1,3}):(\d{1,3})$")
_NUMBER = re.compile(r"^\d{1,12}$")
_REQUIRED = ("JOBID", "JOBSTATE", "EXITCODE", "START", "END", "USERNAME", "PARTITION")


def completion_record(job_id: str, raw: bytes | str, listed: Any) -> Native | None:
    """The native record of a poke's completion record (see the module), or
    None where it cannot be the job's final: ask slurmctld.  ``listed``: the
    job's record in the collector's last listing (or single read)."""
    if not isinstance(listed, dict):
        return None
    try:
        facts = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(facts, dict) or not all(isinstance(v, str) for v in facts.values()):
        return None
    array, task = parse_int(facts.get("ARRAYJOBID")), parse_int(facts.get("ARRAYTASKID"))
    if (
        any(not facts.get(key) for key in _REQUIRED)
        or jobtap_id(facts["JOBID"], array, task) != job_id
    ):
        return None
    if not all(_NUMBER.match(facts[key]) for key in ("JOBID", "START", "END")):
        return None
    expect_zero = _TRUSTED.get(facts["JOBSTATE"])
    code = _EXIT.match(facts["EXITCODE"])
    if expect_zero is None or code is None or code[2] != "0":
        return None
    if (code[1] == "0") != expect_zero:
        return None
    return {COMPLETION_KEY: facts, "jobtap_listed": {k: listed.get(k) for k in LISTED_KEYS}}
