"""Full records of a few Slurm jobs through ``slurmrestd`` in inetd mode.

On Slurm 22.05 ``squeue --json`` prints every job whatever ``-j`` says, so the
only JSON record of one job that does not cost slurmctld a pack of every job
comes from the REST API's ``GET /slurm/VERSION/job/ID``: one
REQUEST_JOB_INFO_SINGLE (about 0.3 ms of slurmctld's time, against 4-5 ms for
the full list of 2,000 jobs), dumped by the same plugin version that writes
``squeue --json`` (``openapi/v0.0.38`` on 22.05, ``data_parser/v0.0.42`` on
24.11: ``Format.rest_argv`` in :mod:`.versions`), so the record is the one a
full stat would show, key for key (seen on 22.05.8 and 24.11.5).

``slurmrestd`` needs no daemon for this: started without a listening address it
reads HTTP requests from its standard input and writes the answers to its
standard output (inetd mode).  One process answers every request written to
it, in order (HTTP/1.1 pipelining), with one exception seen on 22.05.8: after
an error answer (an unknown job id gives ``500`` and error 2017, "Invalid job
id specified"; 24.11.5 answers ``404`` with the same error) it closes the
connection and the later requests get no answer; :func:`answers` returns what
came back and the caller asks again for the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import orjson

from ..base import StatError

__all__ = ["INVALID_JOB_ID", "answers", "requests", "unknown_job"]

INVALID_JOB_ID = 2017  # slurm_load_job: "Invalid job id specified"
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})[^\r\n]*\r\n((?:[^\r\n]+\r\n)*)\r\n")
_LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)\s*$")
_CLOSE = re.compile(rb"(?im)^connection:\s*close\s*$")


def requests(version: str, job_numbers: Iterable[str], query: str = "") -> bytes:
    """The pipelined ``GET /slurm/VERSION/job/N`` requests, one per job number,
    each with ``query`` (``Format.rest_query``) after it."""
    return b"".join(
        f"GET /slurm/{version}/job/{n}{query} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
        for n in job_numbers
    )


def answers(raw: bytes) -> list[tuple[int, dict[str, Any]]]:
    """``(HTTP status, JSON document)`` of each answer, in order, up to the one
    that closes the connection (what follows it, a cut-short ``400`` on 22.05.8,
    answers nothing).  Output that is not a run of HTTP answers with JSON
    bodies raises :class:`StatError`; answers missing at the end are absent."""
    out: list[tuple[int, dict[str, Any]]] = []
    pos = 0
    while pos < len(raw):
        head = _STATUS.match(raw, pos)
        length = _LENGTH.search(head[2]) if head else None
        if head is None or length is None:
            excerpt = raw[pos : pos + 80].decode(errors="replace")
            raise StatError(f"slurmrestd printed something that is not an answer: {excerpt!r}")
        start = head.end()
        end = start + int(length[1])
        if end > len(raw):
            raise StatError("slurmrestd's answer was cut short")
        try:
            doc = orjson.loads(raw[start:end])
        except orjson.JSONDecodeError as exc:
            raise StatError(f"slurmrestd answered with a body that is not JSON ({exc})") from exc
        if not isinstance(doc, dict):
            raise StatError("slurmrestd answered with JSON that is not an object")
        out.append((int(head[1]), doc))
        if _CLOSE.search(head[2]):
            break
        pos = end
    return out


def unknown_job(status: int, doc: dict[str, Any]) -> bool:
    """The answer for a job slurmctld does not know (finished and purged, or
    never existed): an error answer whose only complaint is error 2017."""
    errors = doc.get("errors")
    return (
        status >= 400
        and isinstance(errors, list)
        and bool(errors)
        and all(isinstance(e, dict) and e.get("error_number") == INVALID_JOB_ID for e in errors)
    )
