"""Rendering: the simulated server's records and documents, as OpenPBS prints them.

A job's record is built when it is submitted (:func:`job_record`, from the
:class:`Qsub` the model drew) and then kept up to date by the model, which
changes its state keys as the job moves; a subjob gets its own record when it
starts (:func:`subjob_record`) and is shown as a copy of its parent before
(:func:`placeholder_record`).  Nodes and queues are rendered when asked
(:func:`node_record`, :func:`queue_record`).  The documents are the whole
output of ``qstat -f -F json``, ``pbsnodes -av -F json`` and
``qstat -Q -f -F json`` (see ``tests/fixtures/pbs/``), so that whatever parses
a real server parses the simulation unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from jobtap.sim.pbs import (
    PBS_VERSION,
    SUB_HELD,
    SUB_QUEUED,
    SUB_RUNNING,
    SUB_WAITING,
    hms,
    pbs_time,
)

__all__ = [
    "STATE_COUNT_KEY",
    "NodeView",
    "Qsub",
    "copy_record",
    "document",
    "environment",
    "job_record",
    "new_state_count",
    "node_record",
    "placeholder_record",
    "qstat_document",
    "queue_record",
    "resources_used",
    "subjob_record",
]

# Keys of a parent's record that a not-yet-started subjob does not show.
_PLACEHOLDER_DROP = frozenset(
    {
        "array",
        "array_state_count",
        "array_indices_submitted",
        "array_indices_remaining",
        "project",
        "Submit_Host",
    }
)
# Keys a started subjob copies from its parent.
_SUBJOB_KEYS = (
    "Job_Name", "Job_Owner", "queue", "server", "ctime", "Join_Path", "Keep_Files",
    "Mail_Points", "Priority", "qtime", "Rerunable", "Resource_List", "schedselect",
    "Variable_List", "euser", "egroup", "queue_rank", "queue_type", "etime",
)  # fmt: skip
# The only nested values of a job record (flat dicts of scalars).
_NESTED = ("Resource_List", "resources_used", "Variable_List")

# A queue's state_count: its keys in qstat's order, and the key of each job_state.
_STATE_COUNT_KEYS = ("Transit", "Queued", "Held", "Waiting", "Running", "Exiting", "Begun")
STATE_COUNT_KEY = {
    "Q": "Queued",
    "H": "Held",
    "W": "Waiting",
    "R": "Running",
    "E": "Exiting",
    "B": "Begun",
}  # any other job_state counts as "Transit"


# Documents -----------------------------------------------------------------------------
def document(now: float, server: str, section: str, body: dict[str, Any]) -> bytes:
    """A whole ``-F json`` document: the header, then ``section``."""
    return orjson.dumps(
        {
            "timestamp": int(now),
            "pbs_version": PBS_VERSION,
            "pbs_server": server,
            section: body,
        }
    )


def qstat_document(now: float, server: str, jobs: Mapping[str, dict[str, Any]]) -> bytes:
    """``qstat -f -F json``: as :func:`document`, but qstat prints no ``Jobs``
    at all when there is none."""
    doc: dict[str, Any] = {
        "timestamp": int(now),
        "pbs_version": PBS_VERSION,
        "pbs_server": server,
    }
    if jobs:
        doc["Jobs"] = jobs
    return orjson.dumps(doc)


def copy_record(native: dict[str, Any]) -> dict[str, Any]:
    """A copy that shares nothing mutable with ``native`` (its only nested
    values are flat dicts of scalars)."""
    out = native.copy()
    for key in _NESTED:
        value = out.get(key)
        if value is not None:
            out[key] = value.copy()
    return out


# Jobs ----------------------------------------------------------------------------------
@dataclass(slots=True)
class Qsub:
    """What one ``qsub`` asked for: the model draws it, :func:`job_record`
    renders it.  ``indices`` is empty for a job, the subjob indices for an
    array; ``exec_at`` is the ``-a`` time of a waiting job (0: none)."""

    num: int
    user: str
    group: str
    host: str
    ctime: float
    name: str
    queue: str
    ncpus: int
    nodect: int
    walltime: int
    mem_gb: int
    priority: int
    account: str | None
    held: bool
    waiting: bool
    never: bool
    indices: list[int]
    exec_at: int

    @property
    def is_array(self) -> bool:
        return bool(self.indices)

    @property
    def step(self) -> int:
        """The step between an array's indices (1 for a job)."""
        return self.indices[1] - self.indices[0] if self.indices else 1

    @property
    def select(self) -> str:
        chunk = self.ncpus // self.nodect
        return f"{self.nodect}:ncpus={chunk}" + (f":mem={self.mem_gb}gb" if self.mem_gb else "")

    @property
    def array_spec(self) -> str:
        """``-J``'s argument: ``1-8`` or ``0-20:5``."""
        first, last, step = self.indices[0], self.indices[-1], self.step
        return f"{first}-{last}" + (f":{step}" if step != 1 else "")


def _resource_list(q: Qsub) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if q.mem_gb:
        resources["mem"] = f"{q.mem_gb * q.nodect}gb"
    resources["ncpus"] = q.ncpus
    resources["nodect"] = q.nodect
    resources["place"] = "scatter:excl" if q.nodect > 1 else ("pack" if q.ncpus == 1 else "free")
    resources["select"] = q.select
    resources["walltime"] = hms(q.walltime)
    return resources


def _submit_arguments(q: Qsub) -> str:
    args = [f"-N {q.name}"]
    if q.held:
        args.insert(0, "-h")
    if q.account:
        args.append(f"-A {q.account}")
    if q.priority:
        args.append(f"-p {q.priority}")
    if q.is_array:
        args.append(f"-J {q.array_spec}")
    args.append(f"-l select={q.select}")
    args.append(f"-l walltime={hms(q.walltime)}")
    if q.waiting:
        args.append("-a " + time.strftime("%H%M", time.gmtime(q.exec_at)))
    return " ".join(args)


def environment(user: str, queue: str, host: str) -> dict[str, str]:
    """A job's Variable_List."""
    return {
        "PBS_O_HOME": f"/home/{user}",
        "PBS_O_LOGNAME": user,
        "PBS_O_PATH": "/opt/pbs/bin:/usr/local/bin:/usr/bin:/bin",
        "PBS_O_MAIL": f"/var/mail/{user}",
        "PBS_O_SHELL": "/bin/bash",
        "PBS_O_WORKDIR": f"/home/{user}/work",
        "PBS_O_SYSTEM": "Linux",
        "PBS_O_QUEUE": queue,
        "PBS_O_HOST": host,
    }


def job_record(q: Qsub, server: str, variables: dict[str, str]) -> dict[str, Any]:
    """The record of a job (or an array's parent) just submitted: Q, H (``-h``)
    or W (``-a``).  ``variables`` (its Variable_List) is shared, not copied."""
    held, waiting, host, name = q.held, q.waiting, q.host, q.name
    t = pbs_time(int(q.ctime))
    home = f"/home/{q.user}/work"
    suffix = f"{q.num}.^array_index^" if q.is_array else str(q.num)
    native: dict[str, Any] = {
        "Job_Name": name,
        "Job_Owner": f"{q.user}@{host}",
        "job_state": "H" if held else "W" if waiting else "Q",
        "queue": q.queue,
        "server": server,
    }
    if q.account:
        native["Account_Name"] = q.account
    native["Checkpoint"] = "u"
    native["ctime"] = t
    native["Error_Path"] = f"{host}:{home}/{name}.e{suffix}"
    if waiting:
        native["Execution_Time"] = pbs_time(q.exec_at)
    native.update(
        {
            "Hold_Types": "u" if held else "n",
            "Join_Path": "n",
            "Keep_Files": "n",
            "Mail_Points": "a",
            "mtime": t,
            "Output_Path": f"{host}:{home}/{name}.o{suffix}",
            "Priority": q.priority,
            "qtime": t,
            "Rerunable": "True",
            "Resource_List": _resource_list(q),
            "schedselect": q.select,
            "substate": SUB_HELD if held else SUB_WAITING if waiting else SUB_QUEUED,
            "Variable_List": variables,
            "euser": q.user,
            "egroup": q.group,
            "queue_rank": int(q.ctime * 1_000_000) + q.num % 1_000_000,
            "queue_type": "E",
            "etime": t,
            "Submit_arguments": _submit_arguments(q),
        }
    )
    if q.is_array:
        native["array"] = "True"
        native["array_indices_submitted"] = q.array_spec
    native["project"] = "_pbs_project_default"
    native["Submit_Host"] = host
    return native


def placeholder_record(parent: dict[str, Any]) -> dict[str, Any]:
    """What ``qstat -t`` shows for a subjob that has not started: a copy of
    its parent's record, queued, without the array's own keys."""
    base = {k: v for k, v in parent.items() if k not in _PLACEHOLDER_DROP}
    base["job_state"] = "Q"
    base["substate"] = SUB_QUEUED
    return base


def subjob_record(
    parent: dict[str, Any], *, array_id: str, user: str, host: str, num: int, index: int, now: float
) -> dict[str, Any]:
    """A subjob's own record, made when it starts (running)."""
    native: dict[str, Any] = {key: parent[key] for key in _SUBJOB_KEYS}
    home = f"/home/{user}/work"
    name = native["Job_Name"]
    native["job_state"] = "R"
    native["substate"] = SUB_RUNNING
    native["Error_Path"] = f"{host}:{home}/{name}.e{num}.{index}"
    native["Output_Path"] = f"{host}:{home}/{name}.o{num}.{index}"
    native["queue_rank"] = int(now * 1_000_000) + index
    native["array_id"] = array_id
    native["array_index"] = index
    native["project"] = "_pbs_project_default"
    native["Submit_Host"] = host
    return native


def resources_used(elapsed: float, eff: float, ncpus: int, mem_kb: int) -> dict[str, Any]:
    """What the MoM reports after ``elapsed`` seconds at cpu efficiency ``eff``."""
    return {
        "cpupercent": int(eff * 100 * ncpus) if elapsed > 0 else 0,
        "cput": hms(elapsed * eff * ncpus),
        "mem": f"{mem_kb}kb",
        "ncpus": ncpus,
        "vmem": f"{mem_kb + 10380 if mem_kb else 0}kb",
        "walltime": hms(elapsed),
    }


# Nodes and queues ----------------------------------------------------------------------
class NodeView(Protocol):
    """What :func:`node_record` reads of a node."""

    name: str
    ncpus: int
    mem_kb: int
    free: int
    mem_used_kb: int
    jobs: dict[str, int]
    state: str
    comment: str | None
    last_change: int
    last_used: int


def node_record(node: NodeView) -> dict[str, Any]:
    """A node as ``pbsnodes -av`` shows it (a fresh dict)."""
    native: dict[str, Any] = {
        "Mom": node.name,
        "Port": 15002,
        "pbs_version": PBS_VERSION,
        "ntype": "PBS",
        "state": node.state,
        "pcpus": node.ncpus,
    }
    if node.jobs:
        native["jobs"] = list(node.jobs)
    native["resources_available"] = {
        "arch": "linux",
        "host": node.name,
        "mem": f"{node.mem_kb}kb",
        "ncpus": node.ncpus,
        "vnode": node.name,
    }
    assigned: dict[str, Any] = {}
    if node.jobs:
        if node.mem_used_kb:
            assigned["mem"] = f"{node.mem_used_kb}kb"
        assigned["ncpus"] = node.ncpus - node.free
    native["resources_assigned"] = assigned
    if node.comment is not None:
        native["comment"] = node.comment
    native["resv_enable"] = "True"
    native["sharing"] = "default_shared"
    native["license"] = "l"
    native["last_state_change_time"] = node.last_change
    if node.last_used:
        native["last_used_time"] = node.last_used
    return native


def new_state_count() -> dict[str, int]:
    """A queue's job counts by state, all zero, in qstat's order."""
    return dict.fromkeys(_STATE_COUNT_KEYS, 0)


def queue_record(
    name: str, state_count: dict[str, int], ncpus: int, nodect: int, cpus_per_node: int
) -> dict[str, Any]:
    """``workq`` or ``bigq`` as ``qstat -Q -f`` shows it; ``ncpus`` and
    ``nodect`` are what its running jobs hold."""
    native: dict[str, Any] = {"queue_type": "Execution", "total_jobs": sum(state_count.values())}
    native["state_count"] = "".join(f"{k}:{v} " for k, v in state_count.items())
    if name == "bigq":
        native["resources_max"] = {"walltime": "12:00:00"}
        native["resources_min"] = {"nodect": 2}
    else:
        native["resources_max"] = {"ncpus": cpus_per_node * 2}
    native["resources_default"] = {"walltime": "01:00:00"}
    native["resources_assigned"] = {"ncpus": ncpus, "nodect": nodect}
    native["enabled"] = "True"
    native["started"] = "True"
    return native
