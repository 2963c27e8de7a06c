"""Flux jobs' records from the events journal, without asking ``flux jobs`` again.

Follow mode hears of a change through the job manager's events journal, and the
journal entry itself says what changed (``finish`` carries the wait status,
``exception`` its type and note, ``clean`` the end).  Asking ``flux jobs --json
ID`` afterwards costs about 0.21 s per call on flux-core 0.88, most of the
delay between a job's end and the user's callback (issue 11: p50 302-323 ms,
p99 up to 1,344 ms with it).  So the Flux backend keeps the last record it saw
of each active job and, when only events it understands followed, builds the
new record itself, exactly as ``flux jobs`` would print it: same fields, same
values, same key order (the collector fingerprints the record as printed, and
a full stat must find nothing left to ship).

What the journal cannot give, the listing still does: a new job (its record is
built from the jobspec), an allocation (nodes, ranks, expiration come from R),
a non-fatal exception or a memo other than a URI (what ``flux jobs`` shows of
those was never captured), and any job not seen since its last listing.  Those
jobs go to ``flux jobs --json ID...`` as before.

Events older than the listing a record came from are not applied to it
(``urgency``, ``priority`` and dependencies can go back and forth): such a job
is listed again instead.  Event times are the broker's clock, the listing's is
the collector's; with the two more than a moment apart the listing is used
more often, never a stale event.

The rules below copy what flux-core 0.88's job-list printed for the captured
jobs (``tests/fixtures/flux``: every job's eventlog and final record); the
tests rebuild each captured job's final record from its earlier records and its
journal events, byte for byte.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .base import Native

log = logging.getLogger("jobtap.collector.flux")

# flux jobs --json prints a job's fields in this order (job-list adds them in a
# fixed order; every record of the fixtures agrees with it).  Fields it does not
# name keep their place after the field that preceded them.
KEY_ORDER = (
    "t_depend", "t_priority", "t_sched", "t_run", "t_cleanup", "t_inactive", "duration",
    "expiration", "name", "cwd", "queue", "project", "bank", "ntasks", "ncores", "nnodes",
    "priority", "ranks",
    "nodelist", "success", "result", "waitstatus", "id", "t_submit", "t_remaining", "state",
    "username", "userid", "urgency", "runtime", "status", "returncode", "dependencies",
    "jobid", "annotations", "exception", "uri",
)  # fmt: skip
_RANK = {key: i for i, key in enumerate(KEY_ORDER)}

# Events that change nothing flux jobs prints.
_SILENT = frozenset(
    {"start", "release", "free", "prolog-start", "prolog-finish", "epilog-start",
     "epilog-finish"}
)  # fmt: skip
_APPLIED = frozenset({"depend", "priority", "urgency", "dependency-add", "dependency-remove",
                      "finish", "clean"})  # fmt: skip
_PENDING = ("DEPEND", "PRIORITY", "SCHED")
_DONE = ("CLEANUP", "INACTIVE")


class CannotApply(Exception):
    """The journal does not carry what ``flux jobs`` would show after this event."""


def ordered(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's keys in the order flux jobs prints them."""
    place: dict[str, float] = {}
    last = -1.0
    for key in record:
        last = float(_RANK[key]) if key in _RANK else last + 1e-6
        place[key] = last
    return {key: record[key] for key in sorted(record, key=place.__getitem__)}


def _cleanup(job: dict[str, Any], timestamp: float) -> None:
    """The job stops running (or is cancelled): CLEANUP from the first such event."""
    if job.get("state") in _DONE:
        return
    job["state"] = job["status"] = "CLEANUP"
    job["t_cleanup"] = timestamp
    if "t_run" in job:  # stable from here on, so flux jobs prints it
        job["runtime"] = timestamp - job["t_run"]


def _result(job: dict[str, Any]) -> str:
    exception = job.get("exception") or {}
    if exception.get("occurred"):
        return {"cancel": "CANCELED", "timeout": "TIMEOUT"}.get(exception.get("type"), "FAILED")
    return "COMPLETED" if job.get("waitstatus", 0) == 0 else "FAILED"


def _returncode(job: dict[str, Any]) -> int:
    status = job.get("waitstatus")
    if status is None:  # never ran: a synthetic code
        return -128 if (job.get("exception") or {}).get("type") == "cancel" else 1
    return -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF


def apply_event(
    job: dict[str, Any], name: str, timestamp: float, context: dict, R: Any = None
) -> None:
    """Change ``job`` (a flux jobs record) as this journal event changes it;
    :class:`CannotApply` if the journal does not carry what changes.  Applying
    an event the record already shows changes nothing.  ``R``: what the
    journal carries with ``alloc``."""
    state = job.get("state")
    if name in _SILENT:
        return
    if name == "annotations" and "annotations" in context:
        annotations, uri = printed_annotations(context["annotations"])
        job["annotations"] = annotations
        if uri is None:
            job.pop("uri", None)
        else:
            job["uri"] = uri
        return
    if name == "alloc" and state in _PENDING and isinstance(R, dict) and "ntasks" in job:
        # job-list's parse_R; ntasks moves with R only for per-resource
        # options, and then the listing printed none while pending
        run = JobState(str(job.get("jobid")), 0)
        run.R = R
        run._parse_R()
        job["state"] = job["status"] = "RUN"
        job["t_run"] = timestamp
        job.update(nnodes=run.nnodes, ranks=run.ranks, nodelist=run.nodelist, ncores=run.ncores)
        if run.expiration > 0:
            job["expiration"] = run.expiration
        return
    if name == "depend" and state == "DEPEND":
        job["state"] = job["status"] = "PRIORITY"
        job["t_priority"] = timestamp
    elif name == "priority" and state in _PENDING:
        job["priority"] = context["priority"]
        if state == "PRIORITY":  # SCHED can be entered again: t_sched is the first time
            job["state"] = job["status"] = "SCHED"
            job.setdefault("t_sched", timestamp)
    elif name == "urgency" and state in _PENDING:
        job["urgency"] = context["urgency"]
        if state == "SCHED":  # back to PRIORITY (priority unshown) until the next priority
            job["state"] = job["status"] = "PRIORITY"
            job.pop("priority", None)
    elif name in ("dependency-add", "dependency-remove") and state in _PENDING:
        deps = list(job.get("dependencies") or [])
        description = context["description"]
        if name == "dependency-add" and description not in deps:
            deps.append(description)
        elif name == "dependency-remove" and description in deps:
            deps.remove(description)
        job["dependencies"] = deps
    elif name == "exception" and context.get("severity") == 0:
        job["exception"] = {"occurred": True, "severity": 0, "type": context.get("type"),
                            "note": context.get("note", "")}  # fmt: skip
        _cleanup(job, timestamp)
    elif name == "finish":
        job["waitstatus"] = context["status"]
        _cleanup(job, timestamp)
    elif name == "clean":
        job["state"] = "INACTIVE"
        job["t_inactive"] = timestamp
        job["result"] = job["status"] = _result(job)
        job["success"] = job["result"] == "COMPLETED"
        job["returncode"] = _returncode(job)
    elif name == "memo" and set(context) == {"uri"}:
        job["uri"] = context["uri"]
    else:
        raise CannotApply(name)


def apply_events(native: Native, events: Iterable[Mapping[str, Any]]) -> Native:
    """A copy of ``native`` with ``events`` (``event``, ``timestamp``,
    ``context``) applied, keys in flux jobs' order; :class:`CannotApply` if one
    of them needs what the journal does not carry."""
    job = dict(native)
    for event in events:
        try:
            apply_event(
                job, event["event"], event["timestamp"], event.get("context") or {}, event.get("R")
            )
        except (KeyError, TypeError) as exc:
            raise CannotApply(f"{event.get('event')}: {exc}") from exc
    return ordered(job)


class JournalRecords:
    """What the journal says of each job, for the collector's refreshes.

    A job the feed saw from its ``submit`` on (the jobspec with it) is kept as
    job-list keeps it (:class:`JobState`): its record needs no listing at any
    point of its life.  Other jobs (already there when the feed started, or
    when it restarted) keep the last record seen of them, when it was true, and
    the journal events that came after.  The feed thread notes events; the
    collector's thread asks for records (:meth:`take`).

    ``lookup_user``: the user name ``flux jobs`` would print for a uid, when
    this host's answer is the one it gives (``flux`` runs here); names are also
    learnt from every listing.  ``jobid`` is spelt as the last listing spelt
    it (``ƒ`` under a UTF-8 locale, ``f`` under another)."""

    def __init__(
        self, lookup_user: Callable[[int], str | None] | None = None, *, new_jobs: bool = True
    ) -> None:
        self.lock = threading.Lock()
        self.records: dict[str, tuple[Native, float]] = {}  # id -> (record, as of)
        self.events: dict[str, list[dict[str, Any]]] = {}  # id -> events not applied yet
        self.jobs: dict[str, JobState] = {}  # jobs followed from their submit event on
        self.old_finals: set[str] = set()  # final records kept at the last full listing
        self.users: dict[int, str] = {}  # uid -> name, from listings
        self.lookup_user = lookup_user
        self.new_jobs = new_jobs  # False: only records at hand and events (as before)
        self.ascii_ids = False  # flux jobs prints f..., not ƒ...
        self.derived = 0  # records built from the journal
        self.built = 0  # of which, jobs followed from their submit event
        self.listed = 0  # jobs that had to be listed

    def note_events(self, per_job: Mapping[str, Iterable[dict[str, Any]]]) -> None:
        with self.lock:
            for job_id, events in per_job.items():
                pending = self.events.setdefault(job_id, [])
                for event in events:
                    state = self.jobs.get(job_id)
                    if state is None and not pending and self.new_jobs and _submit(event):
                        state = self.jobs[job_id] = JobState(job_id, _number_of(job_id))
                    if state is None:
                        pending.append(event)
                        continue
                    try:
                        if not state.apply(event):  # invalidated: never listed
                            del self.jobs[job_id]
                    except CannotApply as exc:
                        log.debug("journal: job %s is listed from now on: %s", job_id, exc)
                        del self.jobs[job_id]
                if not pending:
                    del self.events[job_id]

    def restart(self) -> None:
        """The feed starts again (after ``--since``, which can skip an event):
        the jobs followed so far go back to their last record and events."""
        with self.lock:
            self.jobs = {}

    def note_listing(self, natives: Mapping[str, Native], as_of: float, *, full: bool) -> None:
        """Records that ``flux jobs`` printed, asked for at ``as_of`` (wall
        clock).  A full listing replaces every record, and drops the events it
        must already show."""
        with self.lock:
            if full:
                # finals stay for a late poke until the full listing after next
                old = self.old_finals
                self.records = {
                    j: v
                    for j, v in self.records.items()
                    if v[0].get("state") == "INACTIVE" and j not in old
                }
                for job_id in [j for j, s in self.jobs.items() if s.state == "INACTIVE"]:
                    if job_id in old:
                        del self.jobs[job_id]
                self.old_finals = set(self.records) | {
                    j for j, s in self.jobs.items() if s.state == "INACTIVE"
                }
                for job_id in list(self.events):
                    newer = [e for e in self.events[job_id] if _time(e) > as_of]
                    if newer:
                        self.events[job_id] = newer
                    else:
                        del self.events[job_id]
            for job_id, native in natives.items():
                uid, name = native.get("userid"), native.get("username")
                if isinstance(uid, int) and isinstance(name, str):
                    self.users[uid] = name
                jobid = native.get("jobid")
                if isinstance(jobid, str) and jobid:
                    self.ascii_ids = jobid[0] == "f"
                if native.get("state") != "INACTIVE" or not full:
                    self.records[job_id] = (native, as_of)

    def _username(self, uid: int) -> str | None:
        name = self.users.get(uid)
        if name is None and self.lookup_user is not None:
            name = self.lookup_user(uid)
            if name is not None:
                self.users[uid] = name
        return name

    def _built(self, job_id: str) -> JobState | None:
        """The job followed from its submit, if its record can be printed."""
        state = self.jobs.get(job_id)
        if state is None or (state.listed and self._username(state.userid) is None):
            return None
        return state

    def at_hand(self, job_ids: Iterable[str]) -> list[str]:
        """The jobs :meth:`take` would answer without a listing (a quick check:
        followed from their submit, or a record and events all newer than it)."""
        with self.lock:
            return [
                job_id
                for job_id in job_ids
                if self._built(job_id) is not None
                or (
                    (known := self.records.get(job_id)) is not None
                    and (events := self.events.get(job_id))
                    and all(_time(e) > known[1] and _appliable(e) for e in events)
                )
            ]

    def take(self, job_ids: Iterable[str]) -> tuple[dict[str, Native], list[str]]:
        """The records the journal gives for these jobs, and the ids that must be
        listed.  A job is listed when it has no record yet, when an event
        predates its record, or when an event needs what the journal lacks.
        A job followed from its submit but not validated yet is in neither
        (``flux jobs`` does not list it yet either)."""
        found: dict[str, Native] = {}
        listing: list[str] = []
        with self.lock:
            for job_id in job_ids:
                state = self._built(job_id)
                if state is not None:
                    if not state.listed:
                        continue
                    try:
                        built = state.record(
                            self._username(state.userid) or "", self._jobid(job_id)
                        )
                    except CannotApply:
                        del self.jobs[job_id]
                    else:
                        found[job_id] = built
                        self.built += 1
                        self._keep(job_id, built, state.newest)
                        continue
                events = self.events.pop(job_id, [])
                known = self.records.get(job_id)
                record: Native | None = None
                if known is not None and events and all(_time(e) > known[1] for e in events):
                    try:
                        record = apply_events(known[0], events)
                    except CannotApply:
                        record = None
                if record is None and known is not None and not events:
                    if known[0].get("state") == "INACTIVE":  # final: poked again, same answer
                        record = known[0]
                if record is None:
                    listing.append(job_id)
                    continue
                found[job_id] = record
                self._keep(job_id, record, max(_time(e) for e in events))
            self.derived += len(found)
            self.listed += len(listing)
        return found, listing

    def _keep(self, job_id: str, record: Native, as_of: float) -> None:
        """The record given, kept: a final one too, until the next full listing
        (a job's last events can come in a batch after the one that ended it,
        and poke it again)."""
        self.records[job_id] = (record, as_of)

    def _jobid(self, job_id: str) -> str:
        return "f" + job_id[1:] if self.ascii_ids else job_id


def _submit(event: Mapping[str, Any]) -> bool:
    return event.get("event") == "submit" and isinstance(event.get("jobspec"), dict)


_F58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _number_of(job_id: str) -> int:
    number = 0
    for char in job_id[1:]:
        number = number * 58 + _F58.index(char)
    return number


def _appliable(event: Mapping[str, Any]) -> bool:
    """Whether :func:`apply_event` can take this event at all (whatever the
    record's state)."""
    name = event.get("event")
    context = event.get("context") or {}
    if name == "exception":
        return context.get("severity") == 0
    if name == "memo":
        return set(context) == {"uri"}
    if name == "alloc":
        return isinstance(event.get("R"), dict)
    return name in _SILENT or name in _APPLIED or name == "annotations"


def _time(event: Mapping[str, Any]) -> float:
    timestamp = event.get("timestamp")
    return float(timestamp) if isinstance(timestamp, int | float) else float("-inf")


# New jobs: job-list's own bookkeeping, fed the same journal -----------------------
# Flux's job-list module (what `flux jobs` asks) builds its records from the job
# manager's events journal, the journal the feed reads: the jobspec comes with
# `submit`, R with `alloc`.  JobState follows flux-core 0.88's job-list
# (src/modules/job-list/job_state.c, job_data.c, job_util.c, libjob/jj.c) and
# `flux jobs --json` (flux.job.JobInfo.to_dict), so a job the feed saw from its
# `submit` on needs no listing at all.  The user name is the one thing the
# journal lacks (`flux jobs` looks the uid up in the passwd database of the host
# it runs on): it comes from earlier listings or, when `flux` runs on this host,
# from the same lookup here.

_STATE_BITS = {"NEW": 1, "DEPEND": 2, "PRIORITY": 4, "SCHED": 8, "RUN": 16, "CLEANUP": 32,
               "INACTIVE": 64}  # fmt: skip


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise CannotApply(f"not an integer: {value!r:.40}")
    return value


def _number(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise CannotApply(f"not a number: {value!r:.40}")
    return float(value)


def _idset(text: Any) -> list[int]:
    """An RFC 22 idset -> sorted ids."""
    if isinstance(text, int) and not isinstance(text, bool):
        return [text]
    if not isinstance(text, str):
        raise CannotApply(f"idset {text!r:.40}")
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    ids: set[int] = set()
    for part in filter(None, body.split(",")):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise CannotApply(f"idset {text!r:.40}")
        ids.update(range(int(low), int(high if dash else low) + 1))
    return sorted(ids)


def encode_idset(ids: Iterable[int]) -> str:
    """idset_encode with IDSET_FLAG_RANGE | IDSET_FLAG_BRACKETS: ``"3"``,
    ``"[0-2]"``, ``"[0,2-3]"``."""
    ordered_ids = sorted(set(ids))
    runs: list[list[int]] = []
    for n in ordered_ids:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    body = ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
    return f"[{body}]" if len(ordered_ids) > 1 else body


def _split_host(host: str) -> tuple[str, str]:
    digits = len(host) - len(host.rstrip("0123456789"))
    return (host, "") if not digits else (host[:-digits], host[-digits:])


def encode_hostlist(hosts: Iterable[str]) -> str:
    """hostlist_encode of hosts in this order: neighbours with the same prefix
    and consecutive numbers (same width) merge, ``node[0-2,5],login1``."""
    groups: list[tuple[str, int, list[list[int]]]] = []  # prefix, width, runs
    for host in hosts:
        prefix, digits = _split_host(host)
        if not digits:
            groups.append((host, -1, []))
            continue
        number = int(digits)
        width = len(digits) if len(digits) > 1 and digits.startswith("0") else 0
        if groups and groups[-1][0] == prefix and groups[-1][1] == width:
            runs = groups[-1][2]
            if number == runs[-1][1] + 1:
                runs[-1][1] = number
            else:
                runs.append([number, number])
        else:
            groups.append((prefix, width, [[number, number]]))
    out = []
    for prefix, width, runs in groups:
        if width < 0:
            out.append(prefix)
            continue
        text = ",".join(
            f"{a:0{width}d}-{b:0{width}d}" if b > a else f"{a:0{width}d}" for a, b in runs
        )
        single = len(runs) == 1 and runs[0][0] == runs[0][1]
        out.append(f"{prefix}{text}" if single else f"{prefix}[{text}]")
    return ",".join(out)


def _hosts(text: Any) -> list[str]:
    """An RFC 29 hostlist -> host names, in order."""
    if not isinstance(text, str):
        raise CannotApply(f"hostlist {text!r:.40}")
    hosts: list[str] = []
    depth, start, items = 0, 0, []
    for i, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    for item in filter(None, (x.strip() for x in items)):
        names = [""]
        rest = item
        while "[" in rest:
            head, _, tail = rest.partition("[")
            body, close, rest = tail.partition("]")
            if not close:
                raise CannotApply(f"hostlist {text!r:.40}")
            choices = []
            for part in body.split(","):
                low, dash, high = part.partition("-")
                if not low.isdigit() or (dash and not high.isdigit()):
                    raise CannotApply(f"hostlist {text!r:.40}")
                width = len(low) if low.startswith("0") else 0
                choices += [str(n).zfill(width) for n in range(int(low), int(high or low) + 1)]
            names = [name + head + choice for name in names for choice in choices]
        hosts.extend(name + rest for name in names)
    return hosts


def jobspec_counts(jobspec: Mapping[str, Any]) -> dict[str, Any]:
    """libjob's jj_get_counts: nnodes, nslots (times nnodes), slot_size,
    exclusive, duration."""
    counts: dict[str, Any] = {
        "nnodes": 0,
        "nslots": 0,
        "slot_size": 0,
        "slot_gpus": 0,
        "exclusive": False,
    }
    _int(jobspec.get("version"))
    system = (jobspec.get("attributes") or {}).get("system")
    if not isinstance(system, dict):
        raise CannotApply("jobspec without attributes.system")
    counts["duration"] = _number(system.get("duration"))

    def level(vertices: Any, factor: int) -> None:
        if not isinstance(vertices, list):
            raise CannotApply("jobspec resources: not a list")
        for vertex in vertices:
            if not isinstance(vertex, dict) or not isinstance(vertex.get("type"), str):
                raise CannotApply("jobspec resources: a vertex without a type")
            count = _int(vertex.get("count"))
            if count <= 0:
                raise CannotApply("jobspec resources: a count below 1")
            kind, here = vertex["type"], factor * count
            if kind == "node":
                counts["nnodes"] = here
                counts["exclusive"] = counts["exclusive"] or bool(vertex.get("exclusive"))
            elif kind == "slot":
                counts["nslots"] = count
            elif kind == "core":
                counts["slot_size"] = count
            elif kind == "gpu":
                counts["slot_gpus"] = count
            if vertex.get("with") is not None:
                level(vertex["with"], here)

    level(jobspec.get("resources"), 1)
    if counts["nslots"] <= 0 or counts["slot_size"] <= 0:
        raise CannotApply("jobspec: no slot count or slot size")
    if counts["nnodes"]:
        counts["nslots"] *= counts["nnodes"]
    return counts


def _jpath_set(doc: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        nxt = doc.get(key)
        if not isinstance(nxt, dict):
            nxt = doc[key] = {}
        doc = nxt
    doc[keys[-1]] = value


def _merge(into: dict[str, Any], update: Mapping[str, Any]) -> None:
    """jpath_update then jpath_clear_null: merge objects, null deletes."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif value is None:
            into.pop(key, None)
        else:
            into[key] = _clear_null(value)


def _clear_null(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clear_null(v) for k, v in value.items() if v is not None}
    return value


class JobState:
    """One job as Flux's job-list keeps it, from its ``submit`` event (with the
    jobspec) on; :meth:`record` prints it as ``flux jobs --json`` does (the
    fields computed from the time of the query left out, as the backend drops
    them from listings)."""

    def __init__(self, job_id: str, number: int) -> None:
        self.job_id, self.number = job_id, number
        self.userid = -1
        self.urgency = -1
        self.submit_version = -1
        self.priority = 0
        self.state = "NEW"
        self.states_mask = self.events_mask = _STATE_BITS["NEW"]
        self.times: dict[str, float] = {}
        self.t_priority = self.t_sched = 0.0
        self.jobspec: dict[str, Any] | None = None
        self.R: dict[str, Any] | None = None
        self.fields: dict[str, Any] = {}  # name, cwd, queue, project, bank
        self.ntasks = self.ncores = self.nnodes = -1
        self.per_node = self.per_core = 0
        self.duration = self.expiration = -1.0
        self.ranks: str | None = None
        self.nodelist: str | None = None
        self.wait_status = -1
        self.success = False
        self.result = "FAILED"
        self.exception: dict[str, Any] | None = None  # occurred: type, severity, note
        self.annotations: dict[str, Any] | None = None
        self.dependencies: list[str] | None = None
        self.grudges: set[str] = set()
        self.newest = float("-inf")  # the newest event applied

    # -- events (job_state.c: journal_process_event) ------------------------------
    def apply(self, event: Mapping[str, Any]) -> bool:
        """Apply one journal event; False once the job is gone (``invalidate``).
        :class:`CannotApply` for what job-list would refuse or this copy does
        not know to read."""
        name, timestamp = event.get("event"), _number(event.get("timestamp"))
        context = event.get("context") or {}
        if not isinstance(context, dict):
            raise CannotApply(f"{name}: context {context!r:.40}")
        self.newest = max(self.newest, timestamp)
        if name == "alloc" and self.R is None and isinstance(event.get("R"), dict):
            self.R = event["R"]
        if name == "invalidate":
            return False
        if name == "submit":
            if self.jobspec is None and isinstance(event.get("jobspec"), dict):
                self.jobspec = event["jobspec"]
            self.userid = _int(context.get("userid"))
            self.urgency = _int(context.get("urgency"))
            version = context.get("version", -1)
            self.submit_version = version if isinstance(version, int) else -1
            self.times["t_submit"] = timestamp
        elif name == "validate":
            self._advance("DEPEND", timestamp)
        elif name == "depend":
            self._advance("PRIORITY", timestamp)
        elif name == "priority":
            self.priority = _int(context.get("priority"))
            self._transition("SCHED", timestamp, conditional="PRIORITY")
        elif name == "alloc":  # its annotations reach job-list by "annotations" events only
            self._advance("RUN", timestamp)
        elif name == "finish":
            self.wait_status = _int(context.get("status"))
            fatal = self.exception is not None and self.exception["severity"] == 0
            if self.wait_status == 0 and not fatal:
                self.success = True
            self._advance("CLEANUP", timestamp)
        elif name == "clean":
            self._advance("INACTIVE", timestamp)
        elif name == "urgency":
            self.urgency = _int(context.get("urgency"))
            self._transition("PRIORITY", timestamp, revert="SCHED")
        elif name == "exception":
            kind, note = context.get("type"), context.get("note")
            severity = _int(context.get("severity"))
            if not isinstance(kind, str) or not isinstance(note, str):
                raise CannotApply("exception: type or note missing")
            if self.exception is None or severity < self.exception["severity"]:
                self.exception = {"severity": severity, "type": kind, "note": note}
            if severity == 0:
                self._advance("CLEANUP", timestamp)
        elif name == "annotations":
            if "annotations" not in context:
                raise CannotApply("annotations: no annotations")
            annotations = context["annotations"]
            if annotations is not None and not isinstance(annotations, dict):
                raise CannotApply("annotations: not an object")
            self.annotations = annotations
        elif name == "jobspec-update":
            if self.jobspec is None:
                raise CannotApply("jobspec-update before the jobspec")
            for key, value in context.items():
                if key.split(".")[0] in ("resources", "tasks", "attributes"):
                    _jpath_set(self.jobspec, key, value)
            self._parse_jobspec()
            self._transition("PRIORITY", timestamp, revert="SCHED")
        elif name == "resource-update":
            if self.R is None:
                raise CannotApply("resource-update before R")
            if "expiration" in context:
                _jpath_set(self.R, "execution.expiration", context["expiration"])
            self._parse_R()
        elif name == "memo":
            annotations = dict(self.annotations or {})
            user = dict(annotations.get("user") or {})
            _merge(user, context)
            annotations["user"] = user
            self.annotations = annotations
        elif name == "dependency-add":
            description = context.get("description")
            if not isinstance(description, str):
                raise CannotApply("dependency-add without a description")
            if description not in self.grudges:
                self.grudges.add(description)
                self.dependencies = [*(self.dependencies or []), description]
        elif name == "dependency-remove":
            description = context.get("description")
            if not isinstance(description, str):
                raise CannotApply("dependency-remove without a description")
            if self.dependencies and description in self.dependencies:
                self.dependencies = [d for d in self.dependencies if d != description]
        elif name == "flux-restart":
            self._transition("PRIORITY", timestamp, revert="SCHED")
        return True

    def _advance(self, state: str, timestamp: float) -> None:
        self._transition(state, timestamp)

    def _transition(self, state: str, timestamp: float, *, revert: str | None = None,
                    conditional: str | None = None) -> None:  # fmt: skip
        bit = _STATE_BITS[state]
        if revert is None and conditional is None and self.events_mask & bit and state not in (
            "PRIORITY", "SCHED"
        ):  # fmt: skip
            return
        self.events_mask |= bit
        if revert is not None:
            if self.state != revert:
                return
            self.states_mask &= ~(_STATE_BITS[self.state] | bit)
            self._enter(state, timestamp)
        elif conditional is not None and self.state != conditional:
            return
        if state == "DEPEND":
            self._parse_jobspec()
        elif state == "RUN":
            self._parse_R()
        elif state == "INACTIVE":
            if self.success:
                self.result = "COMPLETED"
            elif self.exception is not None:
                kind = self.exception["type"]
                self.result = {"cancel": "CANCELED", "timeout": "TIMEOUT"}.get(kind, "FAILED")
        self._enter(state, timestamp)

    def _enter(self, state: str, timestamp: float) -> None:
        self.state = state
        if state == "PRIORITY":
            self.t_priority = self.t_priority or timestamp
        elif state == "SCHED":
            self.t_sched = self.t_sched or timestamp
        elif state != "NEW":
            key = {"DEPEND": "t_depend", "RUN": "t_run", "CLEANUP": "t_cleanup",
                   "INACTIVE": "t_inactive"}[state]  # fmt: skip
            self.times[key] = timestamp
        self.states_mask |= _STATE_BITS[state]

    # -- jobspec and R (job_data.c) ------------------------------------------------
    def _parse_jobspec(self) -> None:
        spec = self.jobspec
        if not isinstance(spec, dict):
            raise CannotApply("no jobspec")
        system = (spec.get("attributes") or {}).get("system") or {}
        job = system.get("job")
        if job is not None and not isinstance(job, dict):
            raise CannotApply("jobspec: attributes.system.job is not an object")
        name = (job or {}).get("name")
        if name is None:
            tasks = spec.get("tasks")
            command = tasks[0].get("command") if isinstance(tasks, list) and tasks else None
            if not isinstance(command, list) or not command or not isinstance(command[0], str):
                raise CannotApply("jobspec: no job name and no command")
            arg0 = command[0]
            base = arg0.rpartition("/")[2]
            name = base if "/" in arg0 and base else arg0
        elif not isinstance(name, str):
            raise CannotApply("jobspec: job name is not a string")
        self.fields["name"] = name
        for key in ("cwd", "queue"):
            self.fields.pop(key, None)
        for key in ("cwd", "queue", "project", "bank"):
            if key in system:
                if not isinstance(system[key], str):
                    raise CannotApply(f"jobspec: {key} is not a string")
                self.fields[key] = system[key]
        self.duration = _number(system.get("duration"))
        counts = jobspec_counts(spec)
        self.nnodes = counts["nnodes"] or -1
        per = ((system.get("shell") or {}).get("options") or {}).get("per-resource")
        kind, count = None, 1
        if per is not None:
            if not isinstance(per, dict) or not isinstance(per.get("type"), str):
                raise CannotApply("jobspec: per-resource without a type")
            kind, count = per["type"], _int(per.get("count", 1))
            if count < 1:
                raise CannotApply("jobspec: per-resource count below 1")
        if kind == "node":
            if counts["nnodes"]:
                self.ntasks = counts["nnodes"] * count
            else:
                self.per_node, self.ntasks = count, -1
        elif kind == "core":
            if not counts["nnodes"]:
                self.ntasks = counts["nslots"] * counts["slot_size"] * count
            else:
                self.per_core, self.ntasks = count, -1
        else:
            tasks = spec.get("tasks")
            first = tasks[0] if isinstance(tasks, list) and tasks else None
            total = (first.get("count") or {}).get("total") if isinstance(first, dict) else None
            if isinstance(total, int) and not isinstance(total, bool):
                self.ntasks = total
            else:
                self.ntasks = counts["nslots"]
        if counts["nnodes"] and counts["exclusive"]:
            self.ncores = -1
        else:
            self.ncores = counts["nslots"] * counts["slot_size"]

    def _parse_R(self) -> None:
        execution = self.R.get("execution") if isinstance(self.R, dict) else None
        if not isinstance(execution, dict):
            raise CannotApply("no R")
        cores: dict[int, set[int]] = {}
        for entry in execution.get("R_lite") or []:
            if not isinstance(entry, dict):
                raise CannotApply("R_lite entry is not an object")
            children = entry.get("children") or {}
            for rank in _idset(entry.get("rank")):
                cores.setdefault(rank, set()).update(_idset(children.get("core", "")))
        if not cores:
            raise CannotApply("R without ranks")
        hosts: list[str] = []
        for item in execution.get("nodelist") or []:
            hosts.extend(_hosts(item))
        ranks = sorted(cores)
        if len(hosts) != len(ranks):
            raise CannotApply("R: nodelist and ranks disagree")
        self.expiration = _number(execution.get("expiration", 0.0))
        self.nnodes = len(ranks)
        if self.per_node:
            self.ntasks = self.nnodes * self.per_node
        self.ranks = encode_idset(ranks)
        self.nodelist = encode_hostlist(hosts)
        self.ncores = sum(len(c) for c in cores.values())
        if self.per_core:
            self.ntasks = self.ncores * self.per_core

    # -- the record (job_util.c: store_attr; flux.job.JobInfo.to_dict) -------------
    @property
    def listed(self) -> bool:
        """Whether ``flux jobs`` lists the job yet (from ``validate`` on)."""
        return self.state != "NEW"

    def record(self, username: str, jobid: str) -> Native:
        mask = self.states_mask
        ran = bool(mask & _STATE_BITS["RUN"])
        inactive = self.state == "INACTIVE"
        out: dict[str, Any] = {}
        t_depend = self.times.get("t_depend")
        if self.submit_version < 1:
            t_depend = self.times.get("t_submit")
        times = {
            "t_depend": t_depend, "t_priority": self.t_priority, "t_sched": self.t_sched,
            "t_run": self.times.get("t_run") if ran else None,
            "t_cleanup": self.times.get("t_cleanup") if mask & _STATE_BITS["CLEANUP"] else None,
            "t_inactive": self.times.get("t_inactive") if inactive else None,
        }  # fmt: skip
        for key, value in times.items():
            if value:
                out[key] = value
        if self.duration >= 0:
            out["duration"] = self.duration
        if ran and self.expiration > 0:
            out["expiration"] = self.expiration
        for key in ("name", "cwd", "queue", "project", "bank"):
            if self.fields.get(key):
                out[key] = self.fields[key]
        for key, value in (("ntasks", self.ntasks), ("ncores", self.ncores),
                           ("nnodes", self.nnodes)):  # fmt: skip
            if value >= 0:
                out[key] = value
        if mask & _STATE_BITS["SCHED"]:
            out["priority"] = self.priority
        if ran and self.ranks:
            out["ranks"] = self.ranks
        if ran and self.nodelist:
            out["nodelist"] = self.nodelist
        if inactive:
            out["success"] = self.success
            out["result"] = self.result
        if self.wait_status >= 0:
            out["waitstatus"] = self.wait_status
        out["id"] = self.number
        out["t_submit"] = self.times["t_submit"]
        out["state"] = self.state
        out["username"] = username
        out["userid"] = self.userid
        out["urgency"] = self.urgency
        if "t_cleanup" in out and "t_run" in out:
            out["runtime"] = out["t_cleanup"] - out["t_run"]
            if not out["runtime"]:
                del out["runtime"]
        out["status"] = self.result if inactive else self.state
        if inactive:  # JobInfo.returncode
            status = out.get("waitstatus")
            if status is None:
                code = {"CANCELED": -128, "FAILED": 1}.get(self.result)
            else:
                code = -(status & 0x7F) if status & 0x7F else (status >> 8) & 0xFF
            if code is not None:
                out["returncode"] = code
        out["dependencies"] = list(self.dependencies or [])
        out["jobid"] = jobid
        annotations, uri = printed_annotations(self.annotations)
        out["annotations"] = annotations
        out["exception"] = self._exception()
        if uri is not None:
            out["uri"] = uri
        return out

    def _exception(self) -> dict[str, Any]:
        """job-list returns the exception once the job is INACTIVE; the stand-in
        of ``flux jobs`` (and so this copy) shows a fatal one from the event on
        (see docs/flux.md)."""
        shown = self.state == "INACTIVE" or (
            self.exception is not None and self.exception["severity"] == 0
        )
        if self.exception is None or not shown:
            return {"occurred": False}
        return {"occurred": True, **self.exception}


def printed_annotations(annotations: Any) -> tuple[dict[str, Any], str | None]:
    """What ``flux jobs --json`` prints of job-list's annotations: the
    annotations without ``user.uri`` (an empty ``user`` goes too), and that uri
    (a ``memo``'s) on its own."""
    if annotations is None:
        return {}, None
    if not isinstance(annotations, dict):
        raise CannotApply("annotations: not an object")
    out = _clear_null(annotations)
    user = out.get("user")
    uri = user.get("uri") if isinstance(user, dict) else None
    if uri is None or uri == "":
        return out, None
    if not isinstance(uri, str) or ":" not in uri:
        raise CannotApply("memo: a uri flux jobs would not print")
    out["user"] = {k: v for k, v in user.items() if k != "uri"}
    if not out["user"]:
        del out["user"]
    return out, uri
