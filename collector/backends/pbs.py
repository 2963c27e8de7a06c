"""PBS Pro / OpenPBS backend: ``qstat -f -F json`` and friends.

Three layers, so that captured output of a real server tests the first two:

* parsers (``parse_qstat_jobs``, ``parse_pbsnodes``, ``parse_qstat_queues``):
  bytes -> ``{id: native record}``, one ``orjson.loads`` and type checks of the
  envelope only.  Output that is not what qstat prints raises :class:`StatError`.
* normalisers (``normalise_job``, ``normalise_node``, ``normalise_queue``): one
  native record -> the normalised record of ``jobtap.schema`` (without ``site``,
  ``version`` and ``updated_at``, which the collector and workers add).  A record
  that cannot be used raises :class:`BadRecord`.
* :class:`PBSBackend`: runs the commands (locally or through a prefix such as
  ``ssh head1``) and feeds the parsers.

Job states (``job_state``, see the PBS reference guide):

====================  ===========================================================
PBS                   normalised
====================  ===========================================================
Q (queued), T         queued (T = in transit between servers)
H                     held
W                     waiting (Execution_Time in the future, or stage-in)
R, B                  running (B = array job whose subjobs have begun)
S, U                  suspended (U = suspended because the workstation is busy)
E                     exiting
F, X                  substate 91 -> cancelled, substate 93 -> failed, otherwise
                      Exit_status 0 -> completed, another number -> failed, no
                      Exit_status -> cancelled (deleted before it ran)
M and anything else   unknown
====================  ===========================================================

Times: PBS prints ``"Sat Nov 21 14:40:20 2026"`` in the server's local time; they
are converted to UTC ISO-8601 with offset using the zone ``tz`` (a zoneinfo name;
``None`` = this machine's local zone).  A time that does not parse becomes None.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from jobtap.schema import (
    CANCELLED,
    COMPLETED,
    EXITING,
    FAILED,
    HELD,
    NODE_BUSY,
    NODE_DOWN,
    NODE_FREE,
    NODE_OFFLINE,
    QUEUED,
    RUNNING,
    SUSPENDED,
    TERMINAL,
    UNKNOWN,
    WAITING,
)

from .base import (
    BadRecord,
    CommandNotFound,
    Native,
    PokedReads,
    Probe,
    ProbeUnavailable,
    Record,
    StatError,
    check_object_id,
)
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
    queue_state,
    text_field,
)
from .pacer import SameSecondPacer
from .run import first_line

__all__ = [
    "PBSBackend",
    "QUEUE_CLOSED",
    "QUEUE_OPEN",
    "QUEUE_STOPPED",
    "job_state",
    "node_state",
    "normalise_job",
    "normalise_node",
    "normalise_queue",
    "parse_pbs_time",
    "parse_pbsnodes",
    "parse_qstat_jobs",
    "parse_qstat_queues",
]

# Queue states: QUEUE_OPEN, QUEUE_STOPPED, QUEUE_CLOSED (common.py), from PBS's
# enabled (accepts jobs) and started (jobs in it may run).

# Job substates that say how a finished job ended (pbs_job.h: JOB_SUBSTATE_*).
SUBSTATE_TERMINATED = 91  # deleted (qdel), whether it had started or not
SUBSTATE_FAILED = 93  # failed: non-zero exit, resource limit exceeded, ...

_ACTIVE_STATES = {
    "Q": QUEUED,
    "T": QUEUED,
    "H": HELD,
    "W": WAITING,
    "R": RUNNING,
    "B": RUNNING,
    "S": SUSPENDED,
    "U": SUSPENDED,
    "E": EXITING,
}
_FINISHED_STATES = frozenset({"F", "X"})
# States in which a job has not started (this time): PBS still shows the stime
# and Exit_status that queued subjobs inherit from their array parent.
_NOT_STARTED = frozenset({QUEUED, HELD, WAITING})

_HOLD_TYPES = {"u": "user", "o": "operator", "s": "system", "p": "bad password"}
_NODE_DOWN_WORDS = frozenset({"down", "state-unknown", "unresolvable", "stale"})
_NODE_BUSY_WORDS = frozenset({"job-busy", "job-exclusive", "resv-exclusive", "busy"})

_SUBJOB_ID = re.compile(r"^([^\[\]]+)\[(\d+)\](.*)$")
_UNKNOWN_JOB = re.compile(rb"^\S*qstat: Unknown Job Id (\S+)\s*$")
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"),
        start=1,
    )
}


# Parsers ---------------------------------------------------------------------------
def _section(raw: bytes | str, key: str, command: str) -> dict[str, Any]:
    """The object under ``key`` of a command's JSON output.  The output is loaded
    with :func:`~collector.backends.common.load_object`, which retries invalid
    UTF-8 once: PBS copies job attributes (a user's environment with ``qsub
    -V``, job names) byte for byte into its JSON, and one job with a Latin-1
    byte must not turn the whole stat into a failure."""
    doc = load_object(raw, command)
    section = doc.get(key)
    if section is None:
        # OpenPBS leaves the key out altogether when there is nothing to list.
        return {}
    if not isinstance(section, dict):
        raise StatError(
            f"{command} printed {key!r} as {type(section).__name__}, expected an object"
        )
    return section


def parse_qstat_jobs(raw: bytes | str) -> dict[str, Native]:
    """``qstat -f -F json`` -> ``{job id: native record}``.

    No ``Jobs`` key means no jobs.  The values are returned as printed, even
    ones that are not objects: :func:`normalise_job` rejects those one by one.
    """
    return _section(raw, "Jobs", "qstat")


def parse_pbsnodes(raw: bytes | str) -> dict[str, Native]:
    """``pbsnodes -av -F json`` -> ``{node name: native record}``."""
    return _section(raw, "nodes", "pbsnodes")


def parse_qstat_queues(raw: bytes | str) -> dict[str, Native]:
    """``qstat -Q -f -F json`` -> ``{queue name: native record}``."""
    return _section(raw, "Queue", "qstat -Q")


# Field helpers ---------------------------------------------------------------------
@lru_cache(maxsize=64)
def _zone(tz: str | None) -> ZoneInfo | None:
    return ZoneInfo(tz) if tz is not None else None


@lru_cache(maxsize=8192)
def _convert_time(value: str, tz: str | None) -> str | None:
    parts = value.split()
    if len(parts) != 5:
        return None
    _weekday, month, day, clock, year = parts
    try:
        hour, minute, second = (int(x) for x in clock.split(":"))
        local = datetime(int(year), _MONTHS[month], int(day), hour, minute, second)
    except (KeyError, ValueError):
        return None
    zone = _zone(tz)
    # A naive datetime's astimezone() reads it as this machine's local time.
    aware = local.replace(tzinfo=zone) if zone is not None else local.astimezone()
    return aware.astimezone(UTC).isoformat()


def parse_pbs_time(value: Any, tz: str | None = None) -> str | None:
    """A PBS time (``"Sat Nov 21 14:40:20 2026"`` in the server's local time, or
    seconds since the epoch) as UTC ISO-8601 with offset; None if absent or
    unparseable.  Text times are cached: thousands of jobs share a few."""
    if isinstance(value, str):
        return _convert_time(value, tz)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return epoch_iso(value)
    return None


def _flag(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


# Jobs ------------------------------------------------------------------------------
def job_state(native: Native) -> str:
    """The normalised state of a native job record (see the module's table)."""
    letter = native.get("job_state")
    if not isinstance(letter, str):
        raise BadRecord(f"job_state missing or not a string: {letter!r:.40}")
    state = _ACTIVE_STATES.get(letter)
    if state is not None:
        return state
    if letter not in _FINISHED_STATES:
        return UNKNOWN
    substate = parse_int(native.get("substate"))
    if substate == SUBSTATE_TERMINATED:
        return CANCELLED
    if substate == SUBSTATE_FAILED:
        return FAILED
    exit_status = parse_int(native.get("Exit_status"))
    if exit_status is None:
        return CANCELLED
    return COMPLETED if exit_status == 0 else FAILED


def _owner(native: Native) -> str:
    owner = native.get("Job_Owner")
    user = owner.partition("@")[0] if isinstance(owner, str) else None
    if not user:
        euser = native.get("euser")
        user = euser if isinstance(euser, str) else None
    if not user:
        raise BadRecord(f"no owner (Job_Owner={owner!r:.80})")
    return check_object_id(user, "job owner")


def _held_reason(native: Native) -> str:
    hold_types = native.get("Hold_Types")
    if not isinstance(hold_types, str) or not hold_types or hold_types == "n":
        return "held"
    if not set(hold_types) <= _HOLD_TYPES.keys():
        return f"held (Hold_Types={hold_types})"
    names = ", ".join(_HOLD_TYPES[letter] for letter in hold_types)
    return f"held by {names} (Hold_Types={hold_types})"


def _reason(state: str, native: Native, comment: str | None, tz: str | None) -> str | None:
    """Why the job is where it is, in words.

    * queued, held, waiting: the scheduler's comment ("Not Running: ...",
      "Can Never Run: ..."); a held job without one gets "held by user
      (Hold_Types=u)"; a waiting job with an Execution_Time gets "waiting until
      <UTC time>".
    * terminal: PBS appends how a job ended to its comment ("Job run at ... and
      finished", "... and exceeded resource walltime", "... and terminated by
      bob@vm"); the part after the last " and " is the reason.
    * anything else: None.
    """
    if state == WAITING:
        until = parse_pbs_time(native.get("Execution_Time"), tz)
        if until is not None:
            return f"waiting until {until}"
        return comment
    if state == HELD:
        return comment or _held_reason(native)
    if state == QUEUED:
        return comment
    if state in TERMINAL and comment and " and " in comment:
        return comment.rpartition(" and ")[2].strip() or None
    return None


def _allocated(exec_host: Any) -> list[str]:
    """Host names from ``exec_host`` ("vm/1+n2/0*2" -> ["vm", "n2"]), unique, in order."""
    if not isinstance(exec_host, str) or not exec_host:
        return []
    hosts: dict[str, None] = {}
    for chunk in exec_host.split("+"):
        host = chunk.partition("/")[0].strip()
        if host:
            hosts[host] = None
    return list(hosts)


def _array_fields(job_id: str, native: Native) -> tuple[str | None, int | None]:
    """Parent id and index of an array subjob.

    OpenPBS prints ``array_id``/``array_index`` only for subjobs that have run;
    queued subjobs are synthesised from the parent without them, so the id
    (``2[3].vm`` -> ``2[].vm``, 3) is the fallback.
    """
    parent = native.get("array_id")
    index = parse_int(native.get("array_index"))
    if isinstance(parent, str) and parent and index is not None:
        return parent, index
    match = _SUBJOB_ID.match(job_id)
    if match is None:
        return None, None
    return f"{match[1]}[]{match[3]}", int(match[2])


def normalise_job(
    job_id: str, native: Native, *, scheduler: str = "pbs", tz: str | None = None
) -> Record:
    """One job of ``qstat -f -F json`` as a normalised record.

    ``start_time`` and ``exit_status`` are left out (None) while a job is
    queued, held or waiting: OpenPBS shows queued subjobs with the ``stime`` and
    ``Exit_status`` of their array parent.  ``allocated`` comes from
    ``exec_host`` and is kept after the job ends (where it ran).  ``native`` is
    the record itself, not a copy.
    """
    check_object_id(job_id, "job id")
    check_record(native, "job")
    state = job_state(native)
    user = _owner(native)
    comment = text_field(native, "comment")
    resource_list = mapping_field(native, "Resource_List")
    started = state not in _NOT_STARTED
    end_time = parse_pbs_time(native.get("obittime"), tz)
    if end_time is None and state in TERMINAL:
        end_time = parse_pbs_time(native.get("mtime"), tz)
    array_parent, array_index = _array_fields(job_id, native)
    return {
        "id": job_id,
        "scheduler": scheduler,
        "user": user,
        "group": text_field(native, "egroup"),
        "account": text_field(native, "Account_Name") or text_field(native, "project"),
        "name": text_field(native, "Job_Name"),
        "queue": text_field(native, "queue"),
        "state": state,
        "native_state": native["job_state"],
        "reason": _reason(state, native, comment, tz),
        "comment": comment,
        "submit_time": parse_pbs_time(native.get("ctime"), tz),
        "start_time": parse_pbs_time(native.get("stime"), tz) if started else None,
        "end_time": end_time,
        "exit_status": (
            parse_int(native.get("Exit_status")) if state in TERMINAL or state == EXITING else None
        ),
        "requested": {
            "ncpus": resource_list.get("ncpus"),
            "nodes": resource_list.get("nodect"),
            "mem": resource_list.get("mem"),
            "walltime": resource_list.get("walltime"),
            "select": resource_list.get("select"),
        },
        "allocated": _allocated(native.get("exec_host")),
        "resources_used": mapping_field(native, "resources_used"),
        "array_parent": array_parent,
        "array_index": array_index,
        "priority": parse_int(native.get("Priority")),
        "native": native,
    }


# Nodes -----------------------------------------------------------------------------
def node_state(native_state: str) -> str:
    """``"down,offline"`` -> ``"down"``: down beats offline beats busy beats free."""
    words = {w.strip() for w in native_state.split(",")}
    if words & _NODE_DOWN_WORDS:
        return NODE_DOWN
    if "offline" in words:
        return NODE_OFFLINE
    if words & _NODE_BUSY_WORDS:
        return NODE_BUSY
    if "free" in words:
        return NODE_FREE
    return UNKNOWN


def _node_jobs(value: Any) -> list[str]:
    """The ``jobs`` of a node: a list of ids in 23.x JSON; older servers print
    ``"1.vm/0, 1.vm/1"``.  The ``/slot`` suffix is dropped, duplicates too."""
    if value is None:
        return []
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        raise BadRecord(f"jobs is a {type(value).__name__}, expected a list")
    jobs: dict[str, None] = {}
    for item in items:
        if not isinstance(item, str):
            raise BadRecord(f"jobs holds a {type(item).__name__}: {item!r:.40}")
        job_id = item.strip().partition("/")[0]
        if job_id:
            jobs[job_id] = None
    return list(jobs)


def normalise_node(
    name: str, native: Native, *, scheduler: str = "pbs", tz: str | None = None
) -> Record:
    """One node of ``pbsnodes -av -F json`` as a normalised record."""
    check_object_id(name, "node name")
    check_record(native, "node")
    native_state = native.get("state")
    if not isinstance(native_state, str):
        raise BadRecord(f"node state missing or not a string: {native_state!r:.40}")
    return {
        "id": name,
        "scheduler": scheduler,
        "state": node_state(native_state),
        "native_state": native_state,
        "reason": text_field(native, "comment"),
        "jobs": _node_jobs(native.get("jobs")),
        "resources": {
            "available": mapping_field(native, "resources_available"),
            "assigned": mapping_field(native, "resources_assigned"),
        },
        "native": native,
    }


# Queues ----------------------------------------------------------------------------
def _state_count(value: Any) -> dict[str, int]:
    """``"Transit:0 Queued:7 Held:1 "`` -> ``{"transit": 0, "queued": 7, "held": 1}``."""
    counts: dict[str, int] = {}
    if not isinstance(value, str):
        return counts
    for token in value.split():
        key, sep, number = token.partition(":")
        count = parse_int(number) if sep else None
        if key and count is not None:
            counts[key.lower()] = count
    return counts


def normalise_queue(
    name: str, native: Native, *, scheduler: str = "pbs", tz: str | None = None
) -> Record:
    """One queue of ``qstat -Q -f -F json`` as a normalised record.

    State: ``open`` (enabled and started), ``stopped`` (enabled: accepts jobs
    but runs none, e.g. a reservation queue before its start), ``closed`` (not
    enabled: refuses new jobs)."""
    check_object_id(name, "queue name")
    check_record(native, "queue")
    enabled = _flag(native.get("enabled"))
    started = _flag(native.get("started"))
    state = queue_state(enabled, started)
    counts = _state_count(native.get("state_count"))
    total = parse_int(native.get("total_jobs"))
    if total is not None:
        counts["total"] = total
    resources = {
        label: mapping_field(native, key)
        for label, key in (
            ("available", "resources_available"),
            ("assigned", "resources_assigned"),
            ("max", "resources_max"),
        )
        if key in native
    }
    return {
        "id": name,
        "scheduler": scheduler,
        "state": state,
        "native_state": f"enabled={enabled} started={started}",
        "counts": counts,
        "resources": resources,
        "native": native,
    }


# The probe -------------------------------------------------------------------------
QSELECT_TIME = "%Y%m%d%H%M.%S"  # qselect -t m.gt.[[CC]YY]MMDDhhmm[.SS]
_QSELECT_ID = re.compile(r"^[0-9]+(?:\[[0-9]*\])?(?:\.\S+)?$")


def qselect_time(seconds: float, tz: str | None = None) -> str:
    """Epoch seconds as qselect's time operand, in the server's zone ``tz``
    (None: this machine's), whole seconds rounded down."""
    return datetime.fromtimestamp(int(seconds), _zone(tz)).strftime(QSELECT_TIME)


def parse_qselect(raw: bytes | str) -> list[str]:
    """``qselect`` -> the job ids it printed, one a line (none: nothing
    matched, as ``tests/fixtures/pbs/probe/qselect-empty.txt``).  A line
    that is not a job id (``1149.vm``, ``1154[].vm``, ``1154[2].vm``) raises
    :class:`StatError`: a garbled probe changes nothing."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    ids: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if not _QSELECT_ID.match(line):
            raise StatError(f"qselect printed a line that is not a job id: {line[:80]!r}")
        ids.append(line)
    return ids


# The backend -----------------------------------------------------------------------
class PBSBackend(CommandBackend):
    """PBS Pro / OpenPBS through its commands.

    ``prefix``: a command prefix such as ``"ssh head1"`` (a string is split with
    shlex).  When the prefix runs ``ssh``, the command's words are shell-quoted,
    because ssh hands them to a remote shell that would glob ``2[1].vm``
    (:class:`~collector.backends.common.CommandBackend`).
    ``subjobs``: also stat array subjobs (``-t``).  ``tz``: the server's time
    zone for the times qstat prints (None = this machine's).  ``history_batch``:
    job ids per ``qstat -x`` call.  ``grouped``: pass ``-E`` to ``qstat`` with job
    ids (one server request for all of them; see :meth:`history`); turn it off
    only for a server whose qstat lacks ``-E``.  ``throttle``: the seconds qstat
    sleeps when the same user ran it earlier in the same wall-clock second
    (0.2 on OpenPBS 23.06); calls are planned around it (:mod:`.pacer`).

    The probe (:meth:`probe`): ``qselect -x -t m.gt.T``, the jobs whose ``mtime``
    moved after ``T``, finished ones included.  ``qselect``: its command.
    ``overlap``: seconds by which each probe's window reaches back into the
    last one's, for mtime's whole seconds and the difference between the
    clocks of this host and the server.  ``clock``: this host's time.
    """

    def __init__(
        self,
        *,
        prefix: str | Sequence[str] = (),
        qstat: str = "qstat",
        pbsnodes: str = "pbsnodes",
        timeout: float = 60.0,
        subjobs: bool = True,
        tz: str | None = None,
        scheduler: str = "pbs",
        history_batch: int = 2000,
        grouped: bool = True,
        throttle: float = 0.2,
        qselect: str = "qselect",
        overlap: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(prefix=prefix, timeout=timeout)
        self.qstat = qstat
        self.qselect = qselect
        if overlap < 1:
            raise ValueError("overlap must be at least 1 s (mtime has whole seconds)")
        self.overlap = float(overlap)
        self.clock = clock
        self.pbsnodes = pbsnodes
        self.subjobs = bool(subjobs)
        if tz is not None:
            _zone(tz)  # an unknown zone fails here, not at the first job
        self.tz = tz
        self.scheduler = scheduler
        if history_batch < 1:
            raise ValueError("history_batch must be at least 1")
        self.history_batch = int(history_batch)
        self.grouped = bool(grouped)
        self.pacer = SameSecondPacer(throttle)

    def __repr__(self) -> str:
        return f"PBSBackend({self.qstat!r}{self._via()})"

    # Running (command, _run and _run_full: CommandBackend) ---------------------
    def _qstat_jobs_argv(self, *extra: str) -> list[str]:
        return [self.qstat, *extra, "-f", "-F", "json", *(("-t",) if self.subjobs else ())]

    def _qstat(self, argv: list[str]) -> bytes:
        with self.pacer.call():
            return self._run(argv)

    # Stats ---------------------------------------------------------------------
    def stat_jobs(self) -> dict[str, Native]:
        return parse_qstat_jobs(self._qstat(self._qstat_jobs_argv()))

    def probe(self, since: float | None) -> Probe:
        """The cheap probe: ``qselect -x -t m.gt.T`` with ``T = since - overlap``
        (in the server's zone, whole seconds): the jobs whose record changed
        after T, live or finished (``-x``), array parents but not their
        subjobs (``tests/fixtures/pbs/probe``: without ``-T`` it prints
        ``1154[].vm``; the targeted stat's ``-t`` brings the subjobs of a named
        array).  A job that was submitted, ran and ended between two probes
        is among them: its mtime moved, and ``-x`` shows it finished.  With
        ``since`` None no command runs: it only says where the next probe
        starts.  On a real OpenPBS 23.06 with 1,000 jobs one ``qselect`` took
        18 ms, against 181 ms for ``qstat -f -F json`` (issue 10).

        A change that does not move ``mtime``, or a clock skew past the
        overlap, is left to the next full stat (the reconciliation)."""
        until = self.clock()
        if since is None:
            return Probe(until=until)
        argv = [self.qselect, "-x", "-t", f"m.gt.{qselect_time(since - self.overlap, self.tz)}"]
        try:
            raw = self._run(argv)
        except CommandNotFound as exc:
            raise ProbeUnavailable(str(exc)) from exc
        return Probe(named=dict.fromkeys(parse_qselect(raw), ""), until=until)

    def stat_nodes(self) -> dict[str, Native]:
        return parse_pbsnodes(self._run([self.pbsnodes, "-av", "-F", "json"]))

    def stat_queues(self) -> dict[str, Native]:
        return parse_qstat_queues(self._qstat([self.qstat, "-Q", "-f", "-F", "json"]))

    def history(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """Final records of jobs, from ``qstat -E -x -f -F json -t ids...``, for the
        ids the server still knows.  Ids it has forgotten are absent.

        ``-E`` makes qstat send one request for all the ids.  Without it qstat
        opens one server connection per id, each authenticated through
        ``pbs_iff`` on a privileged port: on OpenPBS 23.06 1,000 ids took
        88-117 s (the ports ran out past ~400 and each retry waited 1 s), against
        0.23 s with ``-E`` (issue 11).  With ``-E`` an unknown id is left out
        silently (exit status 0); without it qstat says "Unknown Job Id" and
        exits 153 (``tests/fixtures/pbs/probe``).

        Some OpenPBS builds print only the first of several jobs in JSON
        (openpbs/openpbs#2672).  When several ids were asked and exactly one
        came back, the others are asked for again (as long as each call brings
        news), so a job is never declared vanished because of that bug; when two
        or more came back the server is not affected, and the missing ids are
        unknown: one call answers for all.
        """
        wanted = _plausible_ids(job_ids)
        found: dict[str, Native] = {}
        for start in range(0, len(wanted), self.history_batch):
            pending = wanted[start : start + self.history_batch]
            while pending:
                records, unknown = self._history_once(pending)
                news = {job_id: records[job_id] for job_id in pending if job_id in records}
                found.update(news)
                if len(news) != 1 or len(pending) == 1:
                    break
                pending = [j for j in pending if j not in news and j not in unknown]
        return found

    def stat_some(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """The current record of each of these jobs, live or finished (the
        targeted stat of a probe cycle, and follow mode's refresh): ``qstat -x``
        shows both, so it is the same query as :meth:`history`, one ``qstat
        -E`` for all the ids (0.23 s for 1,000 ids on OpenPBS 23.06, against
        88-117 s without ``-E``: docs/performance.md)."""
        return self.history(job_ids)

    def _history_once(self, job_ids: Sequence[str]) -> tuple[dict[str, Native], set[str]]:
        """One ``qstat [-E] -x -f -F json [-t] ids...``: the records printed and the
        ids qstat reported unknown (only without ``-E``).  qstat exits non-zero
        (153) when some ids are unknown while still printing the others; that is
        not a failure, any other complaint on stderr is."""
        argv = [*self._qstat_jobs_argv(*(("-E",) if self.grouped else ()), "-x"), *job_ids]
        with self.pacer.call():
            returncode, out, err = self._run_full(argv)
        unknown: set[str] = set()
        if returncode != 0:
            lines = [line for line in err.splitlines() if line.strip()]
            matches = [_UNKNOWN_JOB.match(line) for line in lines]
            if not lines or not all(matches):
                raise StatError(f"qstat exited with status {returncode}: {first_line(err)}")
            unknown = {m[1].decode(errors="replace") for m in matches if m is not None}
            if not out.strip():
                return {}, unknown
        return parse_qstat_jobs(out), unknown

    # Records sent by the server hook (follow mode) ----------------------------
    def poked_reads(self) -> PokedReads:
        """The jobobit hook's poke may carry the job's final record."""
        return PokedReads(carried=self.poked_record)

    def poked_record(self, job_id: str, raw: bytes) -> Native | None:
        """The final record the jobobit hook sent with its poke
        (``deploy/pbs/jobtap_poke_hook.py``: the job as ``qstat -x -f -F
        json`` prints it once the server moved it to history), if it is
        complete enough to be the job's final: see :func:`final_from_hook`."""
        return final_from_hook(job_id, raw, self.tz)

    # Normalising ---------------------------------------------------------------
    def normalise_job(self, job_id: str, native: Native) -> Record:
        return normalise_job(job_id, native, scheduler=self.scheduler, tz=self.tz)

    def normalise_node(self, name: str, native: Native) -> Record:
        return normalise_node(name, native, scheduler=self.scheduler, tz=self.tz)

    def normalise_queue(self, name: str, native: Native) -> Record:
        return normalise_queue(name, native, scheduler=self.scheduler, tz=self.tz)


HOOK_FINAL_SUBSTATES = frozenset({SUBSTATE_TERMINATED, 92, SUBSTATE_FAILED})


def final_from_hook(job_id: str, raw: bytes | str, tz: str | None = None) -> Native | None:
    """A job's record sent by the jobobit hook, if it can be the job's final
    without a ``qstat``: a JSON object, ended (``job_state`` F, or X for a
    subjob) with the substate that says how (91 deleted, 92 finished, 93
    failed), an ``Exit_status`` unless it was
    deleted, and the times a final carries (``ctime``, ``obittime``,
    ``mtime``, ``history_timestamp``).  Anything else (None) is asked of
    qstat, as a record-less poke is."""
    try:
        native = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(native, dict):
        return None
    if native.get("job_state") not in _FINISHED_STATES:
        return None
    substate = native.get("substate")
    if substate not in HOOK_FINAL_SUBSTATES or isinstance(substate, bool):
        return None
    status = native.get("Exit_status")
    if substate != SUBSTATE_TERMINATED and (
        not isinstance(status, int) or isinstance(status, bool)
    ):
        return None
    if not isinstance(native.get("history_timestamp"), int):
        return None
    if any(parse_pbs_time(native.get(t), tz) is None for t in ("ctime", "obittime", "mtime")):
        return None
    return native


def _plausible_ids(job_ids: Iterable[str]) -> list[str]:
    """The ids that may go on a qstat command line, each once, in order: anything
    that is not a plausible id (or could pass for an option) is left out."""
    wanted: dict[str, None] = {}
    for job_id in job_ids:
        if not isinstance(job_id, str) or job_id in wanted or job_id.startswith("-"):
            continue
        try:
            check_object_id(job_id)
        except BadRecord:
            continue
        wanted[job_id] = None
    return list(wanted)
