"""The generations of Slurm's JSON: the one place where releases differ.

What ``squeue``/``sacct``/``scontrol --json`` print is written by a plugin whose
version the document names in ``meta`` (``openapi/v0.0.38`` on 22.05,
``data_parser/v0.0.42`` on 24.11).  Each release writes one by default and its
``slurmrestd`` serves a few (:data:`FORMATS`).  For what jobtap reads they fall
into three generations, each a class below with the same methods:

==========  ============  ===============================  ==========================
generation  versions      numbers, states                  exit codes
==========  ============  ===============================  ==========================
Plain       v0.0.38       ``5``; ``"RUNNING"``             squeue: a wait status;
            (22.05)                                        sacct: ``{"status":
                                                           "SUCCESS", "return_code":
                                                           0}`` for every plain exit
NoVal       v0.0.39       ``{"set": true, "infinite":      as Plain, the wait status
            (23.02)       false, "number": 5}``;           as a number object
                          ``"RUNNING"``
Flags       v0.0.40-44    number objects; states as flag   ``{"status": ["ERROR"],
            (23.11-25.11) lists, ``["RUNNING",             "return_code": {number},
                          "COMPLETING"]``; a job's nodes   "signal": {"id": {number},
                          ``job_resources.nodes.list``     "name": "TERM"}}``, right
                          (v0.0.41+)                       for every exit
==========  ============  ===============================  ==========================

The normalisers (:mod:`.normalise`) read every field through the generation
of the record at hand (:func:`generation_of`), so the same job gives the same
normalised record whichever release printed it; ``native`` stays the record as
printed.  A document written by a version this module does not know is
refused as a whole (:class:`UnknownFormat`): jobtap ships nothing it may have
misread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..base import StatError
from ..common import parse_int
from .values import exit_status_from_wait

__all__ = [
    "FORMATS",
    "FLAGS",
    "NOVAL",
    "PLAIN",
    "Format",
    "Generation",
    "UnknownFormat",
    "document_format",
    "generation_of",
    "node_generation",
    "release_of",
    "job_state_word",
]


class UnknownFormat(StatError):
    """A document written by a version of Slurm's JSON that jobtap does not know."""


# job_state_string() of Slurm: the flag that is printed instead of the base state
# when it is set, in this order; then the base state.  22.05's JSON prints this
# one word, later releases the base state and every flag.
_JOB_FLAG_ORDER = (
    "COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
    "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING",
)  # fmt: skip
_JOB_BASES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
     "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"}
)  # fmt: skip
_NODE_BASES = frozenset({"IDLE", "DOWN", "ALLOCATED", "ERROR", "MIXED", "FUTURE", "UNKNOWN", "END"})


def job_state_word(value: Any) -> str | None:
    """The one word Slurm's ``job_state_string()`` gives a job state, from its
    text (``"RUNNING"``, sacct's ``"CANCELLED by 0"``) or its flag list
    (``["COMPLETED", "COMPLETING"]`` -> ``"COMPLETING"``); None if neither."""
    if isinstance(value, str):
        words = value.split()
        return words[0].upper() if words else None
    if not isinstance(value, list) or not value:
        return None
    names = {v.upper() for v in value if isinstance(v, str)}
    for flag in _JOB_FLAG_ORDER:
        if flag in names:
            return flag
    for name in (v.upper() for v in value if isinstance(v, str)):
        if name in _JOB_BASES:
            return name
    return None


class Generation:
    """How one generation of the JSON writes the values jobtap reads.  This
    class is the first one, v0.0.38 (:data:`PLAIN`); the others override what
    changed."""

    name = "v0.0.38"
    # sacct's JSON exit code is right for every exit (not only for signals).
    sacct_exit_trusted = False

    def number(self, value: Any) -> int | None:
        """A count, id, time or limit; None when unset (and, from v0.0.39, infinite)."""
        return parse_int(value)

    def as_number(self, value: int) -> Any:
        """``value`` written as this generation writes a number."""
        return value

    def job_word(self, state: Any) -> str | None:
        """The job's state as one word (see :func:`job_state_word`)."""
        return job_state_word(state)

    def squeue_exit(self, value: Any) -> int | None:
        """squeue's ``exit_code`` as jobtap's exit status (256 + N for signal N)."""
        return exit_status_from_wait(self.number(value))

    def sacct_exit(self, value: Any) -> int | None:
        """sacct's JSON ``exit_code`` object: ``{"status": "SIGNALED", "signal":
        {"signal_id": 9}}`` -> 265; ``return_code`` otherwise; None while PENDING."""
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

    def job_nodes(self, native: dict[str, Any]) -> Any:
        """The host list of a squeue record: its allocation, else ``nodes``."""
        resources = native.get("job_resources")
        nodes = resources.get("nodes") if isinstance(resources, dict) else None
        return nodes if isinstance(nodes, str) and nodes else native.get("nodes")

    def node_state(self, native: dict[str, Any]) -> tuple[Any, list[str]]:
        """A node's base state and its flags: ``state`` and ``state_flags``."""
        flags = native.get("state_flags")
        words = [f.upper() for f in flags if isinstance(f, str)] if isinstance(flags, list) else []
        return native.get("state"), words

    def text_list(self, value: Any) -> str | None:
        """A comma-separated list that 22.05 prints as text (``"a,b"``) and later
        releases as a JSON list (``["a", "b"]``): the text; None when empty."""
        if isinstance(value, list):
            value = ",".join(v for v in value if isinstance(v, str))
        return value if isinstance(value, str) and value else None

    def is_batch_step(self, step: Any) -> bool:
        """Whether an entry of a sacct record's ``steps`` is the batch script's."""
        if not isinstance(step, dict):
            return False
        ident = step.get("step")
        ident = ident.get("id") if isinstance(ident, dict) else None
        return ident == "batch" or (isinstance(ident, str) and ident.endswith(".batch"))


class _NoVal(Generation):
    """v0.0.39 (23.02): numbers as ``{"set", "infinite", "number"}``."""

    name = "v0.0.39"

    def number(self, value: Any) -> int | None:
        if isinstance(value, dict):
            if not value.get("set") or value.get("infinite"):
                return None
            return parse_int(value.get("number"))
        return parse_int(value)

    def as_number(self, value: int) -> Any:
        return {"set": True, "infinite": False, "number": value}


class _Flags(_NoVal):
    """v0.0.40 to v0.0.44 (23.11 to 25.11): states as flag lists, exit codes
    as verbose objects, a job's allocation as an object (v0.0.41+)."""

    name = "v0.0.40"
    sacct_exit_trusted = True

    def squeue_exit(self, value: Any) -> int | None:
        return self.sacct_exit(value)

    def sacct_exit(self, value: Any) -> int | None:
        """``{"status": ["SIGNALED"], "signal": {"id": {number 15}}}`` -> 271;
        ``{"status": ["ERROR"], "return_code": {number 3}}`` -> 3; None while
        PENDING or INVALID."""
        if not isinstance(value, dict):
            return None
        status = value.get("status")
        words = {status} if isinstance(status, str) else set(status or ())
        signal = value.get("signal")
        signal_id = self.number(signal.get("id")) if isinstance(signal, dict) else None
        if words & {"SIGNALED", "CORE_DUMPED"} and signal_id:
            return 256 + signal_id
        if words & {"PENDING", "INVALID"} or not words:
            return None
        return self.number(value.get("return_code"))

    def job_nodes(self, native: dict[str, Any]) -> Any:
        resources = native.get("job_resources")
        nodes = resources.get("nodes") if isinstance(resources, dict) else None
        if isinstance(nodes, dict):  # v0.0.41+: {"count", "select_type", "list", ...}
            nodes = nodes.get("list")
        return nodes if isinstance(nodes, str) and nodes else native.get("nodes")

    def node_state(self, native: dict[str, Any]) -> tuple[Any, list[str]]:
        """``state`` is one list: the base state (IDLE, MIXED...) and the flags."""
        state = native.get("state")
        if not isinstance(state, list):
            return state, []
        words = [s.upper() for s in state if isinstance(s, str)]
        bases = [w for w in words if w in _NODE_BASES]
        base = bases[0] if bases else (words[0] if words else None)
        return base, [w for w in words if w != base]


PLAIN = Generation()
NOVAL = _NoVal()
FLAGS = _Flags()


@dataclass(frozen=True)
class Format:
    """What one version of the JSON means for the backend."""

    version: str  # "v0.0.42"
    releases: str  # the Slurm releases that print it by default
    generation: Generation
    # The node listing: 22.05's ``sinfo --json`` lists nodes; later ones group
    # them by partition and state, while ``scontrol show nodes --json`` lists them.
    nodes_argv: tuple[str, ...]
    # Node keys that change at every listing without meaning anything to a reader.
    volatile_node_keys: tuple[str, ...]
    # slurmrestd's arguments that make it write this version (inetd mode).
    rest_argv: tuple[str, ...]
    # ``squeue --only-job-state`` (REQUEST_JOB_STATE): from 23.11, the release
    # that also brought v0.0.40 (listing.STATE_PROBE_ARGV).
    state_probe: bool = False
    # From v0.0.40 slurmrestd's ``GET /slurm/VERSION/job/N`` takes the show
    # flags of ``squeue --json --local`` (ALL, DETAIL, LOCAL: rest_query).
    # Without LOCAL, slurm_load_job() first asks slurmctld whether it is in a
    # federation (REQUEST_FED_INFO, a fifth of a single read's cost on 24.11:
    # docs/performance.md).
    rest_local: bool = False
    # From 24.05 ``squeue --json`` applies squeue's filters (``--jobs``) to what
    # it prints (SchedMD's ff14834caa, "Fix squeue --json not using filtering
    # options"); before, it prints every job whatever they say.  slurmctld
    # packs every job either way (REQUEST_JOB_INFO): what the filter saves is
    # squeue's JSON and the collector's parsing of it.
    json_filters: bool = False

    @property
    def rest_query(self) -> str:
        """What follows ``GET /slurm/VERSION/job/N``."""
        return LOCAL_SHOW_FLAGS if self.rest_local else ""


LOCAL_SHOW_FLAGS = "?flags=ALL&flags=DETAIL&flags=LOCAL"
_SINFO = ("sinfo", "--json")
_SCONTROL_NODES = ("scontrol", "show", "nodes", "--json")


def _modern(version: str, releases: str, generation: Generation, *, filters: bool) -> Format:
    return Format(version, releases, generation, _SCONTROL_NODES, ("cpu_load", "free_mem"),
                  ("-s", "openapi/slurmctld", "-d", f"data_parser/{version}"),
                  state_probe=True, rest_local=True, json_filters=filters)  # fmt: skip


FORMATS: dict[str, Format] = {
    "v0.0.38": Format(
        "v0.0.38", "22.05", PLAIN, _SINFO, ("cpu_load", "free_memory"), ("-s", "openapi/v0.0.38")
    ),  # fmt: skip
    "v0.0.39": Format(
        "v0.0.39",
        "23.02",
        NOVAL,
        _SCONTROL_NODES,
        ("cpu_load", "free_mem"),
        ("-s", "openapi/v0.0.39"),
    ),  # fmt: skip
    "v0.0.40": _modern("v0.0.40", "23.11", FLAGS, filters=False),
    "v0.0.41": _modern("v0.0.41", "24.05", FLAGS, filters=True),
    "v0.0.42": _modern("v0.0.42", "24.11", FLAGS, filters=True),
    "v0.0.43": _modern("v0.0.43", "25.05", FLAGS, filters=True),
    "v0.0.44": _modern("v0.0.44", "25.11", FLAGS, filters=True),
}
_VERSION = re.compile(r"v\d+\.\d+\.\d+")


def document_format(doc: dict[str, Any], command: str) -> Format:
    """The format a loaded document was written in, from its ``meta``: 22.05's
    ``meta.plugin.type`` (``openapi/v0.0.38``), 23.02's ``meta.plugins.data_parser``
    (``data_parser/v0.0.39``), later ``meta.plugin.data_parser``.  A document
    that names a version jobtap does not know raises :class:`UnknownFormat`
    naming it; one that names none is read as 22.05's (its ``meta`` is the only
    one without ``data_parser``)."""
    meta = doc.get("meta")
    named = None
    for holder in ("plugin", "plugins"):  # 23.02 says "plugins"
        plugin = meta.get(holder) if isinstance(meta, dict) else None
        if not isinstance(plugin, dict):
            continue
        for key in ("data_parser", "type"):
            value = plugin.get(key)
            match = _VERSION.search(value) if isinstance(value, str) else None
            if match:
                named = named or match[0]
    if named is None:
        return FORMATS["v0.0.38"]
    if named not in FORMATS:
        known = f"{min(FORMATS)} to {max(FORMATS)}"
        raise UnknownFormat(
            f"{command} wrote its JSON with data_parser {named}, which this jobtap does not"
            f" know (it reads {known}): a newer jobtap reads it"
        )
    return FORMATS[named]


def release_of(doc: dict[str, Any]) -> str | None:
    """The Slurm release that wrote a document (``"24.11.5"``), from its ``meta``:
    ``meta.slurm.release``, 22.05's ``meta.Slurm.release``; None if it says none."""
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        return None
    for key in ("slurm", "Slurm"):
        slurm = meta.get(key)
        release = slurm.get("release") if isinstance(slurm, dict) else None
        if isinstance(release, str) and release:
            return release
    return None


def node_generation(native: dict[str, Any]) -> Generation:
    """The generation that wrote a node record: its ``state`` a list from
    v0.0.39 on (read as :data:`FLAGS`), text on 22.05."""
    return FLAGS if isinstance(native.get("state"), list) else PLAIN


def generation_of(native: dict[str, Any]) -> Generation:
    """The generation that wrote a job record (squeue's or sacct's), from its
    shape: a flag list for a state is :data:`FLAGS`, number objects
    :data:`NOVAL`, plain numbers :data:`PLAIN`."""
    state = native.get("job_state")
    if state is None:
        holder = native.get("state")
        state = holder.get("current") if isinstance(holder, dict) else None
    if isinstance(state, list):
        return FLAGS
    for key in ("priority", "time_limit", "submit_time", "array_job_id"):
        if isinstance(native.get(key), dict):
            return NOVAL
    time = native.get("time")
    if isinstance(time, dict) and isinstance(time.get("limit"), dict):
        return NOVAL
    return PLAIN
