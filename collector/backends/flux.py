"""Flux backend: ``flux jobs -A --json -c 0`` and friends, plus the events
journal for follow mode.

Three layers, as in the PBS backend, so that captured output of a real Flux
(``tests/fixtures/flux``, flux-core 0.88) tests the first two:

* parsers (``parse_flux_jobs``, ``parse_resource_R``, ``parse_resource_list``,
  ``parse_resource_status``, ``parse_queue_list``, ``parse_job_stats``) and the
  pure mergers (``merge_nodes``, ``merge_queues``): command output -> ``{id:
  native record}``.  Output that is not what Flux prints raises
  :class:`StatError`.
* normalisers (``normalise_job``, ``normalise_node``, ``normalise_queue``): one
  native record -> the normalised record of ``jobtap.schema``.  A record that
  cannot be used raises :class:`BadRecord`.
* :class:`FluxBackend`: runs the commands (locally or through a prefix such as
  ``ssh head1``) and feeds the parsers.

Job ids are Flux's F58 ids with the ``ƒ`` prefix (``ƒ45fzSqM``), computed from
the integer ``id`` of each record (never from the printed ``jobid``, which Flux
spells ``f45fzSqM`` under a non-UTF-8 locale), so the poll and the journal
always agree on a job's id.  The integer stays in ``native["id"]``.

Job states (``state``, and ``result`` once INACTIVE; see RFC 21):

=====================================  =========================================
Flux                                   normalised
=====================================  =========================================
NEW, DEPEND, PRIORITY, SCHED           queued; held when ``urgency`` is 0
RUN                                    running
CLEANUP                                exiting
INACTIVE + result COMPLETED            completed
INACTIVE + result FAILED or TIMEOUT    failed
INACTIVE + result CANCELED             cancelled
anything else                          unknown
=====================================  =========================================

``exit_status``: the job's return code (``returncode``, else decoded from
``waitstatus``) once the job has a wait status, i.e. once it ran; None while it
has not finished and for jobs that never ran (Flux prints a synthetic -128 for
"cancelled before it ran" and 1 for other exceptions; they stay in native).  A
task killed by signal N makes the job shell exit 128+N (a timeout is SIGALRM:
142, a cancel SIGTERM: 143); a job shell itself killed by signal N gives -N.

``reason``: the job exception as ``"TYPE: NOTE"`` (``"cancel"``, ``"timeout:
resource allocation expired"``, ``"alloc: unsatisfiable request: ..."``);
otherwise "held (urgency 0)", "waiting for dependencies: ...", the scheduler's
``reason_pending`` annotation, or ``"exit N"`` for a job that failed without
an exception.

Times: Flux prints seconds since the epoch; they become UTC ISO-8601.
"""

from __future__ import annotations

import logging
import math
import pwd
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
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
    NODE_OFFLINE,
    QUEUED,
    RUNNING,
    TERMINAL,
    UNKNOWN,
)

from .base import BadRecord, Native, PokedReads, Probe, Record, StatError, check_object_id
from .common import (
    MAX_TEXT,
    CommandBackend,
    as_int,
    check_record,
    epoch_iso,
    load_json,
    queue_state,
    text_field,
)
from .flux_journal import JournalRecords
from .run import first_line

__all__ = [
    "ANONYMOUS_QUEUE",
    "FLUX_STATES",
    "FluxBackend",
    "JournalBatch",
    "READER_PATH",
    "canonical_job_id",
    "decode_jobid",
    "encode_f58",
    "expand_hostlist",
    "expand_idset",
    "job_state",
    "journal_job_ids",
    "merge_nodes",
    "merge_queues",
    "node_state",
    "normalise_job",
    "normalise_node",
    "normalise_queue",
    "parse_flux_jobs",
    "parse_job_stats",
    "parse_journal_line",
    "parse_queue_list",
    "parse_resource_R",
    "parse_resource_list",
    "parse_resource_status",
]

log = logging.getLogger("jobtap.collector.flux")

# The reader runs as a script under `flux python`, whose sys.path starts with the
# script's folder: beside this module, `import flux` would find this file, not
# Flux's bindings.  So it lives in a folder of its own.
READER_PATH = Path(__file__).parent / "journal_reader" / "flux_journal_reader.py"
ANONYMOUS_QUEUE = "default"  # the record name of Flux's single unnamed queue
MAX_HOSTS = 1_000_000  # a hostlist or idset larger than this is not believed

FLUX_STATES = ("NEW", "DEPEND", "PRIORITY", "SCHED", "RUN", "CLEANUP", "INACTIVE")
_PENDING = frozenset({"NEW", "DEPEND", "PRIORITY", "SCHED"})
_RESULTS = {"COMPLETED": COMPLETED, "FAILED": FAILED, "TIMEOUT": FAILED, "CANCELED": CANCELLED}
URGENCY_HOLD = 0

# Fields ``flux jobs`` computes from the time of the query would make a running
# job's record differ at every stat although nothing happened to it: they are
# dropped.  ``t_remaining`` is ``expiration - now``; ``runtime`` is ``now -
# t_run`` until the job reaches CLEANUP (then ``t_cleanup - t_run``, stable,
# and kept).

# Commands (the -o formats name only fields flux-core has had for years).
RESOURCE_LIST_FORMAT = "{state} {nnodes} {ncores} {ngpus} {nodelist}"
RESOURCE_STATUS_FORMAT = "{state} {status} {nnodes} {nodelist} {reason}"
QUEUE_LIST_FIELDS = (
    "queuem",
    "submission",
    "scheduling",
    "defaults.timelimit",
    "limits.timelimit",
    "limits.range.nnodes",
    "limits.range.ncores",
    "limits.range.ngpus",
)
QUEUE_LIST_FORMAT = "|".join("{" + f + "}" for f in QUEUE_LIST_FIELDS)

F58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
F58_PREFIX = "\u0192"  # ƒ
_F58_VALUE = {c: i for i, c in enumerate(F58_ALPHABET)}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_UNKNOWN_JOB = re.compile(r"JobID (\S+) unknown\s*$")


# Job ids ---------------------------------------------------------------------------
def encode_f58(value: int) -> str:
    """A Flux job id (an unsigned 64-bit integer) in F58: ``ƒ`` + base 58."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
        raise ValueError(f"not a Flux job id: {value!r:.40}")
    digits = []
    while True:
        value, rest = divmod(value, 58)
        digits.append(F58_ALPHABET[rest])
        if not value:
            break
    return F58_PREFIX + "".join(reversed(digits))


def decode_jobid(value: str | int) -> int:
    """A job id as Flux accepts it (F58 with ``ƒ`` or ``f``, decimal, ``0x`` hex)
    -> the integer.  Raises ValueError for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value:
        text = value.strip()
        if text[:1] in (F58_PREFIX, "f") and len(text) > 1:
            number = 0
            for char in text[1:]:
                digit = _F58_VALUE.get(char)
                if digit is None:
                    raise ValueError(f"not a Flux job id: {value!r:.40}")
                number = number * 58 + digit
        elif text.isdigit():
            number = int(text)
        elif text[:2].lower() == "0x":
            number = int(text[2:], 16)
        else:
            raise ValueError(f"not a Flux job id: {value!r:.40}")
    else:
        raise ValueError(f"not a Flux job id: {value!r:.40}")
    if not 0 <= number < 1 << 64:
        raise ValueError(f"not a Flux job id: {value!r:.40}")
    return number


def canonical_job_id(value: str | int) -> str | None:
    """The collector's id of a job (``ƒ`` F58) given any spelling Flux accepts,
    or None if ``value`` is not a job id."""
    try:
        return encode_f58(decode_jobid(value))
    except ValueError:
        return None


# Hostlists and idsets --------------------------------------------------------------
def _split_top(text: str) -> list[str]:
    """Split at the commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced brackets in {text!r:.80}")
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced brackets in {text!r:.80}")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _ranges(body: str) -> list[str]:
    """``"0-3,07-09"`` -> ``["0", "1", "2", "3", "07", "08", "09"]`` (zero padding
    follows the lower bound)."""
    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"bad range {part!r:.40}")
        if not dash:
            out.append(low)
            continue
        first, last = int(low), int(high)
        if last < first or last - first >= MAX_HOSTS or len(out) + last - first >= MAX_HOSTS:
            raise ValueError(f"bad range {part!r:.40}")
        width = len(low) if low.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(first, last + 1))
    return out


def expand_hostlist(text: Any) -> list[str]:
    """An RFC 29 hostlist (``"node[0-3],login1"``, ``"r[1-2]n[01-02]"``) -> host
    names, in order.  None or "" -> [].  Raises ValueError if malformed."""
    if text is None or text == "":
        return []
    if not isinstance(text, str):
        raise ValueError(f"hostlist is a {type(text).__name__}")
    hosts: list[str] = []
    for item in _split_top(text):
        pieces: list[list[str]] = []
        rest = item
        while "[" in rest:
            head, _, tail = rest.partition("[")
            body, close, rest = tail.partition("]")
            if not close:
                raise ValueError(f"unbalanced brackets in {item!r:.80}")
            pieces.append([head])
            pieces.append(_ranges(body))
        pieces.append([rest])
        names = [""]
        for choices in pieces:
            names = [name + choice for name in names for choice in choices]
            if len(hosts) + len(names) > MAX_HOSTS:
                raise ValueError("hostlist too large")
        hosts.extend(names)
    return hosts


def expand_idset(text: Any) -> list[int]:
    """An RFC 22 idset (``"0-3,5"``, also ``"[0-2]"``) -> sorted unique integers."""
    if text is None or text == "":
        return []
    if isinstance(text, int) and not isinstance(text, bool):
        return [text]
    if not isinstance(text, str):
        raise ValueError(f"idset is a {type(text).__name__}")
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    if not body:
        return []
    return sorted({int(n) for n in _ranges(body)})


# Parsers: jobs ---------------------------------------------------------------------
def _stable(job: dict[str, Any]) -> dict[str, Any]:
    """The record without the fields computed from the time of the query."""
    drop_runtime = "runtime" in job and "t_cleanup" not in job
    if "t_remaining" not in job and not drop_runtime:
        return job
    return {
        k: v for k, v in job.items() if k != "t_remaining" and not (k == "runtime" and drop_runtime)
    }


def parse_flux_jobs(raw: bytes | str) -> dict[str, Native]:
    """``flux jobs --json`` -> ``{ƒ-id: native record}``.

    Accepts the listing (``{"jobs": [...]}``) and the single object that
    ``flux jobs --json ID`` prints for one id.  Every record must carry its
    integer ``id`` (Flux always prints it): one that does not means the output
    is not what Flux prints, and the whole stat fails.  ``t_remaining`` and the
    ``runtime`` of a job that has not reached CLEANUP are dropped (see the
    module's notes); everything else is kept as printed.
    """
    doc = load_json(raw, "flux jobs")
    if isinstance(doc, dict) and "jobs" in doc and "id" not in doc:
        jobs = doc["jobs"]
        if not isinstance(jobs, list):
            raise StatError(f"flux jobs printed 'jobs' as {type(jobs).__name__}, expected a list")
    elif isinstance(doc, dict):
        jobs = [doc]
    else:
        raise StatError(f"flux jobs printed JSON that is not an object: {type(doc).__name__}")
    out: dict[str, Native] = {}
    for job in jobs:
        if not isinstance(job, dict):
            raise StatError(f"flux jobs printed a job that is a {type(job).__name__}")
        try:
            job_id = encode_f58(job.get("id"))  # type: ignore[arg-type]
        except ValueError as exc:
            raise StatError(f"flux jobs printed a job without a valid id: {exc}") from exc
        out[job_id] = _stable(job)
    return out


# Parsers: resources ----------------------------------------------------------------
def _lines(raw: bytes | str) -> list[str]:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    return [_ANSI.sub("", line).rstrip() for line in text.splitlines() if line.strip()]


def _count(token: str, command: str) -> int:
    try:
        return int(token)
    except ValueError as exc:
        raise StatError(f"{command} printed {token!r:.40} where a count belongs") from exc


def parse_resource_R(raw: bytes | str) -> dict[str, dict[str, Any]]:
    """``flux resource R`` (RFC 20 R, JSON) -> ``{node: {"rank", "cores", "ncores",
    "gpus", "ngpus", "properties"}}``.  RFC 20: the hostnames of ``nodelist``
    belong to the ranks of ``R_lite`` in ascending rank order."""
    doc = load_json(raw, "flux resource R")
    execution = doc.get("execution") if isinstance(doc, dict) else None
    if not isinstance(execution, dict):
        raise StatError("flux resource R printed no 'execution' object")
    r_lite = execution.get("R_lite") or []
    if not isinstance(r_lite, list):
        raise StatError("flux resource R printed 'R_lite' that is not a list")
    try:
        children: dict[int, dict[str, Any]] = {}
        for entry in r_lite:
            kids = entry.get("children") or {}
            for rank in expand_idset(entry.get("rank")):
                children[rank] = kids
        hosts: list[str] = []
        for item in execution.get("nodelist") or []:
            hosts.extend(expand_hostlist(item))
        properties: dict[int, list[str]] = {}
        for name, ranks in (execution.get("properties") or {}).items():
            for rank in expand_idset(ranks):
                properties.setdefault(rank, []).append(name)
    except (ValueError, AttributeError, TypeError) as exc:
        raise StatError(f"flux resource R printed an R that does not parse: {exc}") from exc
    ranks = sorted(children)
    if len(hosts) != len(ranks):
        raise StatError(
            f"flux resource R: {len(hosts)} host names for {len(ranks)} ranks in R_lite"
        )
    nodes: dict[str, dict[str, Any]] = {}
    for rank, host in zip(ranks, hosts):
        kids = children[rank]
        cores = str(kids.get("core", ""))
        gpus = str(kids.get("gpu", ""))
        nodes[host] = {
            "rank": rank,
            "cores": cores,
            "ncores": len(expand_idset(cores)),
            "gpus": gpus,
            "ngpus": len(expand_idset(gpus)),
            "properties": sorted(properties.get(rank, [])),
        }
    return nodes


def parse_resource_list(raw: bytes | str) -> list[dict[str, Any]]:
    """``flux resource list -n -o "{state} {nnodes} {ncores} {ngpus} {nodelist}"``
    (the same columns as the default format, whose header line is skipped) ->
    rows ``{"state", "nnodes", "ncores", "ngpus", "nodelist"}``."""
    rows = []
    for line in _lines(raw):
        tokens = line.split()
        if tokens[0] == "STATE":
            continue
        if len(tokens) not in (4, 5):
            raise StatError(f"flux resource list printed an odd line: {line!r:.80}")
        state, nnodes, ncores, ngpus = tokens[:4]
        rows.append(
            {
                "state": state,
                "nnodes": _count(nnodes, "flux resource list"),
                "ncores": _count(ncores, "flux resource list"),
                "ngpus": _count(ngpus, "flux resource list"),
                "nodelist": tokens[4] if len(tokens) == 5 else "",
            }
        )
    return rows


_ONLINE = {"online": True, "offline": False, "✔": True, "✗": False, "y": True, "n": False}


def parse_resource_status(raw: bytes | str) -> list[dict[str, Any]]:
    """``flux resource status -n -o "{state} {status} {nnodes} {nodelist} {reason}"``
    -> rows ``{"state", "online", "nnodes", "nodelist", "reason"}``.

    Also reads the default format (``STATE UP NNODES NODELIST``, the header
    skipped, ✔/✗ for up).  ``state`` loses the ``*`` that marks offline nodes;
    ``online`` says it.  Rows without nodes are skipped.
    """
    rows = []
    for line in _lines(raw):
        tokens = line.split(maxsplit=4)
        if tokens[0].startswith("STATE"):
            continue
        if len(tokens) < 3 or tokens[1] not in _ONLINE:
            raise StatError(f"flux resource status printed an odd line: {line!r:.80}")
        nnodes = _count(tokens[2], "flux resource status")
        if nnodes == 0 or len(tokens) < 4:
            continue
        state = tokens[0]
        online = _ONLINE[tokens[1]] and not state.endswith("*")
        rows.append(
            {
                "state": state.rstrip("*"),
                "online": online,
                "nnodes": nnodes,
                "nodelist": tokens[3],
                "reason": tokens[4].strip() if len(tokens) == 5 else "",
            }
        )
    return rows


def merge_nodes(
    inventory: Mapping[str, Mapping[str, Any]],
    sched_rows: Iterable[Mapping[str, Any]],
    status_rows: Iterable[Mapping[str, Any]],
    running: Mapping[str, Native] | None = None,
) -> dict[str, Native]:
    """One native record per node from ``flux resource R`` (the inventory),
    ``flux resource list`` (the scheduler's free/allocated/down), ``flux resource
    status`` (avail/exclude/drained/draining/torpid/housekeeping/allocated,
    online or not, drain reason) and, optionally, the running jobs (``flux jobs
    -A --json -f running``), whose ``nodelist`` says which jobs sit on a node.

    A node that is partly allocated is in both the scheduler's "free" and
    "allocated" rows: it counts as allocated.
    """
    nodes: dict[str, Native] = {}
    try:
        for name, info in inventory.items():
            nodes[name] = {"name": name, **info, "sched": None, "status": [], "online": None}
        for row in sched_rows:
            for host in expand_hostlist(row.get("nodelist")):
                node = nodes.setdefault(host, {"name": host, "sched": None, "status": []})
                if node["sched"] != "allocated":
                    node["sched"] = row["state"]
        for row in status_rows:
            for host in expand_hostlist(row.get("nodelist")):
                node = nodes.setdefault(host, {"name": host, "sched": None, "status": []})
                if row["state"] not in node["status"]:
                    node["status"].append(row["state"])
                node["online"] = bool(row.get("online"))
                if row.get("reason"):
                    node["reason"] = row["reason"]
        if running is not None:
            for node in nodes.values():
                node["jobs"] = []
            for job_id, job in running.items():
                for host in expand_hostlist(job.get("nodelist")):
                    if host in nodes and job_id not in nodes[host]["jobs"]:
                        nodes[host]["jobs"].append(job_id)
    except ValueError as exc:
        raise StatError(f"flux resource: a node list does not parse: {exc}") from exc
    for node in nodes.values():
        node["status"].sort()
    return nodes


# Parsers: queues -------------------------------------------------------------------
_FSD = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _seconds(value: str) -> float | None:
    """``"inf"``, ``"60.0"``, ``"30s"``, ``"1m"`` -> seconds (None = no limit)."""
    text = value.strip()
    if not text or text in ("inf", "infinity", "0", "0.0", "0s"):
        return None
    for suffix in ("ms", "s", "m", "h", "d"):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * _FSD[suffix]
    try:
        seconds = float(text)
    except ValueError:
        return None
    return None if seconds in (float("inf"), 0.0) or seconds != seconds else seconds


def parse_queue_list(raw: bytes | str) -> dict[str, Native]:
    """``flux queue list -n -o QUEUE_LIST_FORMAT`` (fields separated by ``|``) ->
    ``{queue: native}``.  The single anonymous queue of an instance without
    named queues is called ``"default"``."""
    queues: dict[str, Native] = {}
    for line in _lines(raw):
        fields = line.split("|")
        if len(fields) != len(QUEUE_LIST_FIELDS):
            raise StatError(f"flux queue list printed an odd line: {line!r:.80}")
        values = dict(zip(QUEUE_LIST_FIELDS, (f.strip() for f in fields)))
        marked = values["queuem"]
        name = marked.rstrip("*") or ANONYMOUS_QUEUE
        if values["submission"] not in ("enabled", "disabled"):
            raise StatError(f"flux queue list printed an odd line: {line!r:.80}")
        queues[name] = {
            "name": name,
            "named": bool(marked),
            "default": marked.endswith("*") or not marked,
            "submission": values["submission"],
            "scheduling": values["scheduling"],
            "defaults": {"timelimit": _seconds(values["defaults.timelimit"])},
            "limits": {
                "timelimit": _seconds(values["limits.timelimit"]),
                "nnodes": values["limits.range.nnodes"],
                "ncores": values["limits.range.ncores"],
                "ngpus": values["limits.range.ngpus"],
            },
        }
    return queues


def parse_job_stats(raw: bytes | str) -> dict[str, dict[str, Any]]:
    """``flux job stats`` (JSON) -> ``{queue: counts}``; the instance-wide
    counts are under ``ANONYMOUS_QUEUE`` unless a queue of that name exists."""
    doc = load_json(raw, "flux job stats")
    if not isinstance(doc, dict) or not isinstance(doc.get("job_states"), dict):
        raise StatError("flux job stats printed no 'job_states' object")

    def counts(entry: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in entry.items() if k not in ("queues", "name")}

    out = {ANONYMOUS_QUEUE: counts(doc)}
    for entry in doc.get("queues") or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            out[entry["name"]] = counts(entry)
    return out


def merge_queues(
    queues: Mapping[str, Native], stats: Mapping[str, Mapping[str, Any]]
) -> dict[str, Native]:
    """The queue records with the job counts of ``flux job stats`` attached."""
    return {name: {**q, "stats": dict(stats.get(name, {}))} for name, q in queues.items()}


# Field helpers ---------------------------------------------------------------------
def flux_time(value: Any) -> str | None:
    """Seconds since the epoch (Flux's timestamps) -> UTC ISO-8601, or None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return epoch_iso(value, timespec="milliseconds")
    return None


# A text attribute; a boolean is refused like any other non-scalar.
_text = partial(text_field, booleans=False)


def _hms(seconds: Any) -> str | None:
    """Seconds -> ``"HH:MM:SS"`` like PBS walltimes (0 or absent -> None)."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds <= 0:
        return None
    if seconds == float("inf"):
        return None
    total = int(seconds + 0.5)
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"


# Jobs ------------------------------------------------------------------------------
def job_state(native: Native) -> str:
    """The normalised state of a native job record (see the module's table)."""
    state = native.get("state")
    if not isinstance(state, str):
        raise BadRecord(f"state missing or not a string: {state!r:.40}")
    if state in _PENDING:
        return HELD if native.get("urgency") == URGENCY_HOLD else QUEUED
    if state == "RUN":
        return RUNNING
    if state == "CLEANUP":
        return EXITING
    if state != "INACTIVE":
        return UNKNOWN
    result = native.get("result")
    if isinstance(result, str) and result in _RESULTS:
        return _RESULTS[result]
    if result is None:  # an older job-list without result: judge by the rest
        if native.get("success") is True:
            return COMPLETED
        exception = native.get("exception")
        if isinstance(exception, dict) and exception.get("type") == "cancel":
            return CANCELLED
        if native.get("success") is False:
            return FAILED
    return UNKNOWN


def exit_status(native: Native) -> int | None:
    """The job's return code once it has a wait status (see the module's notes)."""
    waitstatus = as_int(native.get("waitstatus"))
    if waitstatus is None:
        return None
    returncode = as_int(native.get("returncode"))
    if returncode is not None:
        return returncode
    if waitstatus & 0x7F == 0:  # WIFEXITED
        return (waitstatus >> 8) & 0xFF
    return -(waitstatus & 0x7F)  # WIFSIGNALED: the job shell itself was killed


def _exception_reason(native: Native) -> str | None:
    exception = native.get("exception")
    if not isinstance(exception, dict) or not exception.get("occurred"):
        return None
    kind = exception.get("type")
    kind = kind if isinstance(kind, str) and kind else "exception"
    note = exception.get("note")
    text = f"{kind}: {note}" if isinstance(note, str) and note.strip() else kind
    severity = as_int(exception.get("severity"))
    if severity:  # non-fatal exceptions do not end the job
        text = f"{text} (severity {severity})"
    return text[:MAX_TEXT]


def _reason(state: str, native: Native, code: int | None) -> str | None:
    """Why the job is where it is, in words (see the module's notes)."""
    text = _exception_reason(native)
    if text is not None:
        return text
    if state == HELD:
        return "held (urgency 0)"
    if state == QUEUED:
        deps = native.get("dependencies")
        if native.get("state") == "DEPEND" and isinstance(deps, list) and deps:
            return "waiting for dependencies: " + ", ".join(str(d) for d in deps)
        annotations = native.get("annotations")
        sched = annotations.get("sched") if isinstance(annotations, dict) else None
        pending = sched.get("reason_pending") if isinstance(sched, dict) else None
        return pending if isinstance(pending, str) and pending else None
    if state == FAILED and code is not None:
        return f"exit {code}" if code >= 0 else f"job shell killed by signal {-code}"
    return None


def _user(native: Native) -> str:
    name = native.get("username")
    if not isinstance(name, str) or not name:
        uid = as_int(native.get("userid"))
        # flux jobs itself prints the uid when it has no name for it
        name = str(uid) if uid is not None and uid >= 0 else None
    if not name:
        raise BadRecord(f"no user (username={native.get('username')!r:.40})")
    return check_object_id(name, "job owner")


def normalise_job(
    job_id: str, native: Native, *, scheduler: str = "flux", tz: str | None = None
) -> Record:
    """One job of ``flux jobs --json`` as a normalised record.

    ``job_id`` is the ``ƒ`` F58 id (the integer stays in ``native["id"]``).
    ``allocated`` is the expanded ``nodelist`` and is kept after the job ends.
    ``requested`` holds ``ntasks``/``ncores``/``nnodes`` (as printed: from the
    jobspec while pending, from the allocation once it ran) and ``duration`` as
    an HH:MM:SS walltime.  ``resources_used`` holds the run time once it is
    final (CLEANUP).  ``tz`` is accepted for symmetry: Flux prints epoch times.
    """
    check_object_id(job_id, "job id")
    check_record(native, "job")
    state = job_state(native)
    user = _user(native)
    code = exit_status(native) if state in TERMINAL or state == EXITING else None
    try:
        allocated = expand_hostlist(native.get("nodelist"))
    except ValueError as exc:
        raise BadRecord(f"nodelist: {exc}") from exc
    t_run, t_cleanup = native.get("t_run"), native.get("t_cleanup")
    used: dict[str, Any] = {}
    if isinstance(t_run, int | float) and isinstance(t_cleanup, int | float):
        runtime = max(0.0, float(t_cleanup) - float(t_run))
        used = {"runtime": round(runtime, 6), "walltime": _hms(runtime) or "00:00:00"}
    return {
        "id": job_id,
        "scheduler": scheduler,
        "user": user,
        "group": None,
        "account": _text(native, "bank") or _text(native, "project"),
        "name": _text(native, "name"),
        "queue": _text(native, "queue"),
        "state": state,
        "native_state": native["state"],
        "reason": _reason(state, native, code),
        "comment": None,
        "submit_time": flux_time(native.get("t_submit")),
        "start_time": flux_time(t_run),
        "end_time": flux_time(t_cleanup),
        "exit_status": code,
        "requested": {
            "ncpus": as_int(native.get("ncores")),
            "nodes": as_int(native.get("nnodes")),
            "ntasks": as_int(native.get("ntasks")),
            "mem": None,
            "walltime": _hms(native.get("duration")),
            "select": None,
        },
        "allocated": allocated,
        "resources_used": used,
        "array_parent": None,
        "array_index": None,
        "priority": as_int(native.get("priority")),
        "native": native,
    }


# Nodes -----------------------------------------------------------------------------
def node_state(native: Native) -> str:
    """down (offline or torpid) beats offline (excluded) beats drain beats busy
    (allocated, housekeeping) beats free."""
    status = set(native.get("status") or ())
    sched = native.get("sched")
    if native.get("online") is False or "torpid" in status:
        return NODE_DOWN
    if "exclude" in status:
        return NODE_OFFLINE
    if status & {"drained", "draining", "drain"}:
        return NODE_DRAIN
    if sched == "allocated" or status & {"allocated", "housekeeping"}:
        return NODE_BUSY
    if sched == "down":
        return NODE_DOWN
    if sched == "free" or "avail" in status:
        return NODE_FREE
    return UNKNOWN


def normalise_node(
    name: str, native: Native, *, scheduler: str = "flux", tz: str | None = None
) -> Record:
    """One node (a record of :func:`merge_nodes`) as a normalised record."""
    check_object_id(name, "node name")
    check_record(native, "node")
    status = native.get("status")
    if not isinstance(status, list):
        raise BadRecord(f"node status is not a list: {status!r:.40}")
    words = [str(s) for s in status]
    if native.get("sched"):
        words.append(str(native["sched"]))
    if native.get("online") is False:
        words.append("offline")
    jobs = native.get("jobs")
    return {
        "id": name,
        "scheduler": scheduler,
        "state": node_state(native),
        "native_state": ",".join(words) or "unknown",
        "reason": _text(native, "reason"),
        "jobs": list(jobs) if isinstance(jobs, list) else [],
        "resources": {
            "available": {"ncores": native.get("ncores"), "ngpus": native.get("ngpus")},
            "rank": native.get("rank"),
            "properties": native.get("properties") or [],
        },
        "native": native,
    }


# Queues ----------------------------------------------------------------------------
def normalise_queue(
    name: str, native: Native, *, scheduler: str = "flux", tz: str | None = None
) -> Record:
    """One queue (a record of :func:`merge_queues`) as a normalised record.

    State like PBS queues: ``open`` (submission enabled, scheduling started),
    ``stopped`` (enabled but not started), ``closed`` (submission disabled).
    ``counts`` holds Flux's job counts by state and result plus the common
    ``queued``/``running``/``exiting``/``total``."""
    check_object_id(name, "queue name")
    check_record(native, "queue")
    enabled = native.get("submission") == "enabled"
    started = native.get("scheduling") == "started"
    state = queue_state(enabled, started)
    stats = native.get("stats") or {}
    states = stats.get("job_states") if isinstance(stats, dict) else None
    counts: dict[str, int] = {}
    if isinstance(states, dict):
        counts = {k: v for k, v in states.items() if as_int(v) is not None}
        counts["queued"] = sum(as_int(states.get(k)) or 0 for k in ("depend", "priority", "sched"))
        counts["running"] = as_int(states.get("run")) or 0
        counts["exiting"] = as_int(states.get("cleanup")) or 0
    for key in ("successful", "failed", "canceled", "timeout", "inactive_purged"):
        if isinstance(stats, dict) and as_int(stats.get(key)) is not None:
            counts[key] = stats[key]
    return {
        "id": name,
        "scheduler": scheduler,
        "state": state,
        "native_state": f"enabled={enabled} started={started}",
        "counts": counts,
        "resources": {
            "limits": native.get("limits") or {},
            "defaults": native.get("defaults") or {},
        },
        "native": native,
    }


def local_username(uid: int) -> str:
    """What ``flux jobs`` prints as the user of a job of ``uid`` when it runs on
    this host (flux.job.info.get_username)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


# The events journal ----------------------------------------------------------------
# The state a job is at least in once the journal has shown this event (RFC 21).
EVENT_STATE = {
    "submit": "NEW",
    "validate": "DEPEND",
    "depend": "PRIORITY",
    "priority": "SCHED",
    "alloc": "RUN",
    "finish": "CLEANUP",
    "clean": "INACTIVE",
    "invalidate": "INACTIVE",
}


class JournalBatch(list):
    """A batch of changed job ids (``ƒ`` F58, each once, in the order of their
    first event), as :func:`journal_job_ids` yields it.

    ``states``: per job, the Flux state its record should at least show
    (from the events of the batch); ``entries``: per job, its events in the
    batch (``event``, ``timestamp``, ``context``); ``last_timestamp``: the
    newest event timestamp seen so far (to restart the reader with
    ``--since``); ``events``: how many journal events the batch covers."""

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, str] = {}
        self.entries: dict[str, list[dict[str, Any]]] = {}
        self.last_timestamp: float | None = None
        self.events = 0


def parse_journal_line(line: bytes | str) -> dict[str, Any] | None:
    """One NDJSON line of the journal reader -> a dict, or None if it is not one.

    Event lines carry ``id`` (``ƒ`` F58), ``id_int``, ``event``, ``timestamp``,
    ``context`` (and ``userid`` on submit); control lines carry ``flush``,
    ``sentinel`` or ``ready``.  The fixtures' JournalConsumer dump format
    (``jobid_int``, ``name``) is read too.  The id is always recomputed from
    the integer.
    """
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    if doc.get("flush") or doc.get("sentinel") or doc.get("ready"):
        return doc
    number = doc.get("id_int", doc.get("jobid_int"))
    name = doc.get("event", doc.get("name"))
    try:
        job_id = encode_f58(number)  # type: ignore[arg-type]
    except ValueError:
        return None
    if not isinstance(name, str):
        return None
    context = doc.get("context")
    timestamp = doc.get("timestamp")
    out = {
        "id": job_id,
        "id_int": number,
        "event": name,
        "timestamp": timestamp if isinstance(timestamp, int | float) else None,
        "context": context if isinstance(context, dict) else {},
    }
    if name == "submit" and isinstance(doc.get("jobspec"), dict):
        out["jobspec"] = doc["jobspec"]
    elif name == "alloc" and isinstance(doc.get("R"), dict):
        out["R"] = doc["R"]
    return out


def journal_job_ids(
    lines: Iterable[bytes | str | None], *, max_batch: int = 1000
) -> Iterator[JournalBatch]:
    """The reader's NDJSON stream -> batches of changed job ids.

    A batch ends at a ``{"flush": true}`` line (the reader writes one when the
    journal has been quiet for a moment, and at least every few hundred
    milliseconds under a flood), at the end-of-backlog sentinel, at a None or
    blank item (a caller's own "idle" mark), when ``max_batch`` ids are
    collected, and at the end of the stream.  A job with several events in one
    batch appears once.  Lines that are not journal lines are skipped.
    """
    if max_batch < 1:
        raise ValueError("max_batch must be at least 1")
    batch = JournalBatch()
    newest: float | None = None
    for line in lines:
        if line is None or not line.strip():
            doc: dict[str, Any] | None = {"flush": True}
        else:
            doc = parse_journal_line(line)
            if doc is None:
                log.debug("journal reader printed a line that is not a journal line")
                continue
        if "id" not in doc:
            if doc.get("flush") or doc.get("sentinel"):
                if batch:
                    yield batch
                    batch = JournalBatch()
            continue
        job_id, timestamp = doc["id"], doc["timestamp"]
        if timestamp is not None and (newest is None or timestamp > newest):
            newest = timestamp
        if job_id not in batch.states:
            batch.append(job_id)
            batch.states[job_id] = "NEW"
        entry = {"event": doc["event"], "timestamp": timestamp, "context": doc["context"]}
        for extra in ("jobspec", "R"):  # on submit and alloc
            if extra in doc:
                entry[extra] = doc[extra]
        batch.entries.setdefault(job_id, []).append(entry)
        implied = EVENT_STATE.get(doc["event"])
        if doc["event"] == "exception" and doc["context"].get("severity") == 0:
            implied = "CLEANUP"
        if implied and FLUX_STATES.index(implied) > FLUX_STATES.index(batch.states[job_id]):
            batch.states[job_id] = implied
        batch.events += 1
        batch.last_timestamp = newest
        if len(batch) >= max_batch:
            yield batch
            batch = JournalBatch()
    if batch:
        yield batch


# The backend -----------------------------------------------------------------------
class FluxBackend(CommandBackend):
    """Flux through its commands.

    ``prefix``: a command prefix such as ``"ssh head1"`` (a string is split with
    shlex; with ssh the words are shell-quoted).  The commands must reach the
    instance as its owner (``FLUX_URI`` in the environment, or the system
    instance), or other users' jobs are missing and the journal is closed.

    ``count``: ``flux jobs -c``; 0 (the default) lifts the cap of 1,000 jobs
    that ``flux jobs`` applies silently with ``--json``.  ``since``: also pass
    ``--since WHEN`` (e.g. ``"-6h"``) to list only the inactive jobs that ended
    since then; older ones leave the list and are forgotten once final.
    ``node_jobs``: also list the running jobs when stat'ing nodes, to fill each
    node's ``jobs``.  ``batch``: job ids per ``flux jobs --json ID...`` call.
    ``reader_path``: where :mod:`flux_journal_reader` lives on the host that
    runs ``flux`` (``journal_reader/`` beside this file by default).
    ``coalesce``, ``max_delay``: the reader ends a batch after this long
    without an event, or this long after its first (0.02 and 0.1 s: with the
    records built from the journal a batch costs no command, so short batches
    cost little and shorten the delay to the callback).
    ``from_journal``: in follow mode, build a job's new record from the journal
    events the feed read, when they are enough (:mod:`.flux_journal`), instead
    of listing the job again; ``new_jobs``: also for jobs the feed saw from
    their submit on, from the jobspec and R the journal carries (else those
    are listed until a record of theirs is at hand).  ``clock``: the
    instance's time (the journal's timestamps are its), to know which events
    a listing already shows.
    ``overlap``: seconds by which each probe's window (:meth:`probe`) reaches
    back into the last one's.
    """

    # In follow mode the journal names every job that changed and carries its
    # new record (flux_journal.py): the cycles between two reconciliations need
    # no listing (a pushed plan, collector/plan.py), as with Slurm's hooks.
    follow_pushed = True

    def __init__(
        self,
        *,
        prefix: str | Sequence[str] = (),
        flux: str = "flux",
        timeout: float = 60.0,
        scheduler: str = "flux",
        tz: str | None = None,
        count: int = 0,
        since: str | None = None,
        node_jobs: bool = True,
        batch: int = 500,
        reader_path: str | None = None,
        coalesce: float = 0.02,
        max_delay: float = 0.1,
        from_journal: bool = True,
        new_jobs: bool = True,
        clock: Callable[[], float] = time.time,
        overlap: float = 5.0,
    ) -> None:
        super().__init__(prefix=prefix, timeout=timeout)
        self.flux = flux
        self.overlap = float(overlap)
        self.scheduler = scheduler
        self.tz = tz
        if count < 0:
            raise ValueError("count must be >= 0 (0 = no cap)")
        self.count = int(count)
        self.since = since
        self.node_jobs = bool(node_jobs)
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self.batch = int(batch)
        self.reader_path = str(reader_path or READER_PATH)
        self.coalesce = float(coalesce)
        self.max_delay = float(max_delay)
        self.from_journal = bool(from_journal)
        self.clock = clock
        # flux jobs names a job's user from the passwd database of the host it
        # runs on: this one's, without a prefix
        self.journal = JournalRecords(
            lookup_user=None if self.prefix else local_username, new_jobs=new_jobs
        )

    def __repr__(self) -> str:
        return f"FluxBackend({self.flux!r}{self._via()})"

    # Running (command, _run and _run_full: CommandBackend) ---------------------
    def _parallel(self, *argvs: Sequence[str]) -> list[bytes]:
        """Run several commands at once (each ``flux`` start costs ~0.2 s)."""
        with ThreadPoolExecutor(max_workers=len(argvs)) as pool:
            futures = [pool.submit(self._run, argv) for argv in argvs]
            return [f.result() for f in futures]

    def jobs_argv(self, since: str | None = None) -> list[str]:
        """``flux jobs -a -A``: all states (``-a``) of all users (``-A``).  ``-A``
        alone lists active jobs only (flux-jobs(1): "-A: list jobs of all
        users", "-a: list jobs in all states"), and a job that started and
        ended between two stats would never be seen.  ``since``: instead of
        the backend's own ``--since``."""
        argv = [self.flux, "jobs", "-a", "-A", "--json", "-c", str(self.count)]
        since = since or self.since
        if since:
            argv.append(f"--since={since}")  # "-6h" must not pass for an option
        return argv

    def probe(self, since: float | None) -> Probe:
        """The probe: ``flux jobs -a -A --json --since=-Ns``, the jobs active at
        any time in the last N seconds (pending, running, or inactive since
        then: flux-jobs(1)), whole records, where N reaches back to ``since``
        and ``overlap`` seconds more.  The window is relative to the
        instance's own clock, so a skew between it and this host's does not
        move it.  Inactive jobs older than that (Flux keeps them until
        purged) are not listed again.  With ``since`` None no command runs."""
        until = self.clock()
        if since is None:
            return Probe(until=until)
        window = max(1, math.ceil(until - since + self.overlap))
        natives = parse_flux_jobs(self._run(self.jobs_argv(since=f"-{window}s")))
        self.journal.note_listing(natives, until, full=False)
        self._warn_if_capped(natives)
        return Probe(named=dict.fromkeys(natives, ""), records=natives, until=until)

    def _warn_if_capped(self, natives: dict[str, Native]) -> None:
        if self.count and len(natives) >= self.count:
            log.warning(
                "flux jobs returned %d jobs, its cap (-c %d): the list is probably cut short",
                len(natives),
                self.count,
            )

    # Stats ---------------------------------------------------------------------
    def stat_jobs(self) -> dict[str, Native]:
        """Every job of every user that Flux still lists, INACTIVE ones included."""
        as_of = self.clock()
        natives = parse_flux_jobs(self._run(self.jobs_argv()))
        self.journal.note_listing(natives, as_of, full=True)
        self._warn_if_capped(natives)
        return natives

    def stat_nodes(self) -> dict[str, Native]:
        """``flux resource R``, ``list`` and ``status`` (and the running jobs), at once."""
        argvs = [
            [self.flux, "resource", "R"],
            [self.flux, "resource", "list", "-n", "-o", RESOURCE_LIST_FORMAT],
            [self.flux, "resource", "status", "-n", "-o", RESOURCE_STATUS_FORMAT],
        ]
        if self.node_jobs:
            argvs.append([self.flux, "jobs", "-A", "--json", "-c", "0", "-f", "running"])
        outputs = self._parallel(*argvs)
        running = parse_flux_jobs(outputs[3]) if self.node_jobs else None
        return merge_nodes(
            parse_resource_R(outputs[0]),
            parse_resource_list(outputs[1]),
            parse_resource_status(outputs[2]),
            running,
        )

    def stat_queues(self) -> dict[str, Native]:
        """``flux queue list`` and ``flux job stats``, at once."""
        queues, stats = self._parallel(
            [self.flux, "queue", "list", "-n", "-o", QUEUE_LIST_FORMAT],
            [self.flux, "job", "stats"],
        )
        return merge_queues(parse_queue_list(queues), parse_job_stats(stats))

    def stat_some(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """The current records of just these jobs, keyed by ``ƒ`` F58 id whatever
        spelling was asked for; jobs Flux does not know (never existed, or
        purged) and ids that are not job ids are absent.  Follow mode's
        targeted refresh: a job whose journal events (read by the feed) say
        all that changed is answered from them (``from_journal``); the others
        with ``flux jobs --json ID...``."""
        wanted = [job for job in map(canonical_job_id, job_ids) if job is not None]
        found: dict[str, Native] = {}
        if self.from_journal:
            found, wanted = self.journal.take(dict.fromkeys(wanted))
        as_of = self.clock()
        listed = self._list(wanted)
        self.journal.note_listing(listed, as_of, full=False)
        return {**found, **listed}

    def history(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """Final records of jobs that left the live list, for those Flux still
        knows (an INACTIVE job stays known until it is purged)."""
        return self._list(job_ids)

    def poked_reads(self) -> PokedReads:
        """Jobs the feed's journal events describe are built at no cost."""
        return PokedReads(at_hand=self.at_hand)

    def at_hand(self, job_ids: Iterable[str]) -> list[str]:
        """The jobs whose new record the journal gives (:meth:`stat_some` builds
        it without ``flux jobs``); follow mode refreshes them first."""
        if not self.from_journal:
            return []
        wanted = {job_id: canonical_job_id(job_id) for job_id in job_ids}
        quick = set(self.journal.at_hand(j for j in wanted.values() if j is not None))
        return [job_id for job_id, canonical in wanted.items() if canonical in quick]

    def _list(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """``flux jobs --json ID...`` for these jobs, ``batch`` ids a call."""
        wanted: dict[int, None] = {}
        for job_id in job_ids:
            try:
                wanted[decode_jobid(job_id)] = None
            except ValueError:
                continue
        numbers = list(wanted)
        found: dict[str, Native] = {}
        for start in range(0, len(numbers), self.batch):
            found.update(self._jobs_by_id(numbers[start : start + self.batch]))
        return found

    def _jobs_by_id(self, numbers: Sequence[int]) -> dict[str, Native]:
        """One ``flux jobs --json ID...``.  It prints one object for one id, a
        ``{"jobs": [...]}`` listing for several, and "JobID ID unknown" on
        stderr for each id it does not know (exit status 0).  Any other
        complaint is a failed stat."""
        if not numbers:
            return {}
        argv = [self.flux, "jobs", "--json", *(str(n) for n in numbers)]
        returncode, out, err = self._run_full(argv)
        lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        other = [line for line in lines if not _UNKNOWN_JOB.search(line)]
        if returncode != 0 or other:
            detail = other[0][:300] if other else first_line(err)
            raise StatError(f"flux jobs exited with status {returncode}: {detail}")
        if not out.strip():
            return {}
        return parse_flux_jobs(out)

    # Follow mode ---------------------------------------------------------------
    def follow_command(self, *, since: float | None = None, full: bool = False) -> list[str]:
        """The command that runs the journal reader under ``flux python``; its
        standard output is the NDJSON that :func:`journal_job_ids` reads.

        ``since``: replay the journal's events newer than this timestamp first
        (e.g. ``JournalBatch.last_timestamp`` of the last batch handled, when
        the reader is restarted); ``full``: replay every event the job manager
        still holds.  Without either, only new events are printed.  The
        journal is open only to the instance owner.
        """
        self.journal.restart()  # what it followed may miss an event from here on
        argv = [self.flux, "python", self.reader_path]
        argv += ["--coalesce", f"{self.coalesce:g}", "--max-delay", f"{self.max_delay:g}"]
        if since is not None:
            argv += ["--since", repr(float(since))]
        elif full:
            argv.append("--full")
        return [*self.prefix, *self.command(argv)]

    def follow_parse(self, lines: Iterable[bytes | str | None]) -> Iterator[JournalBatch]:
        """The reader's output (``follow_command()``'s standard output, line by
        line) -> batches of changed job ids: :func:`journal_job_ids`, yielding
        each batch as soon as the reader marks its end.  Follow mode's feed.
        Each batch's events are kept for :meth:`stat_some` before it is yielded
        (the feed pokes the collector only after that)."""
        for batch in journal_job_ids(lines, max_batch=self.batch):
            if self.from_journal:
                self.journal.note_events(batch.entries)
            yield batch

    def canonical_id(self, job_id: str) -> str | None:
        """The collector's id for any spelling Flux accepts (``f45fzSqM``,
        ``117272739840``, ``ƒ45fzSqM`` -> ``ƒ45fzSqM``); None if not a job id.
        :meth:`stat_some` keys its result this way, so pokes that spell ids
        differently should go through here first."""
        return canonical_job_id(job_id)

    # Normalising ---------------------------------------------------------------
    def normalise_job(self, job_id: str, native: Native) -> Record:
        return normalise_job(job_id, native, scheduler=self.scheduler, tz=self.tz)

    def normalise_node(self, name: str, native: Native) -> Record:
        return normalise_node(name, native, scheduler=self.scheduler, tz=self.tz)

    def normalise_queue(self, name: str, native: Native) -> Record:
        return normalise_queue(name, native, scheduler=self.scheduler, tz=self.tz)
