"""Running the PBS hook (deploy/pbs/jobtap_poke_hook.py) outside PBS.

PBS runs a hook inside its own Python (pbs_server's for server events, a
``pbs_python`` process on the execution host for ``execjob_*`` events) with a
``pbs`` module that is not available here.  :func:`fake_pbs` builds the part
of that module the hook uses, as the PBS Professional hooks guide describes it:
``pbs.event()`` (``.type``, compared with the event constants such as
``pbs.EXECJOB_EPILOGUE`` or ``pbs.JOBOBIT``; ``.job.id``; ``.accept()``),
``pbs.hook_config_filename`` (the imported configuration file) and
``pbs.logmsg(level, text)``.
"""

from __future__ import annotations

import functools
import json
import runpy
import sys
import time
import types
from pathlib import Path

from sim.rig.paths import ROOT

HOOK = ROOT / "deploy" / "pbs" / "jobtap_poke_hook.py"
EVENT_NAMES = ("RUNJOB", "MODIFYJOB", "JOBOBIT", "EXECJOB_EPILOGUE", "EXECJOB_END")


class HookRun:
    """What the hook did: accepted the event, logged these messages."""

    def __init__(self) -> None:
        self.accepted: list[bool] = []
        self.logged: list[str] = []


def fake_pbs(
    config: Path, event_name: str | None, job_id: str | None
) -> tuple[types.ModuleType, HookRun]:
    run = HookRun()
    pbs = types.ModuleType("pbs")
    for i, name in enumerate(EVENT_NAMES):
        setattr(pbs, name, 1 << i)
    event = types.SimpleNamespace(
        type=getattr(pbs, event_name) if event_name else None,
        job=types.SimpleNamespace(id=job_id),
        accept=lambda: run.accepted.append(True),
    )
    pbs.event = lambda: event
    pbs.hook_config_filename = str(config)
    pbs.LOG_DEBUG = 4
    pbs.logmsg = lambda level, text: run.logged.append(text)
    return pbs, run


def run_hook(
    config: dict,
    path: Path,
    event_name: str | None,
    job_id: str | None,
    job: object | None = None,
) -> HookRun:
    """Run the hook once for one event, with ``config`` as its imported JSON.
    ``job``: the event's job object (its attributes as pbs.event().job holds
    them); by default one with only ``id``."""
    path.write_text(json.dumps(config))
    pbs, run = fake_pbs(path, event_name, job_id)
    if job is not None:
        job.id = job_id  # type: ignore[attr-defined]
        pbs.event().job = job
    _run(pbs)
    return run


def _run(pbs: types.ModuleType) -> dict:
    saved = sys.modules.get("pbs")
    sys.modules["pbs"] = pbs
    try:
        return runpy.run_path(str(HOOK))
    finally:
        if saved is None:
            sys.modules.pop("pbs", None)
        else:
            sys.modules["pbs"] = saved


def hook_namespace() -> dict:
    """The hook's functions and constants (``final_record``, ``job_record``...),
    from one run for an event without a job (which pokes nothing)."""
    pbs, _run_ = fake_pbs(Path("/nonexistent/hook.json"), None, None)
    return _run(pbs)


# -- A job as the server holds it while the hook runs ----------------------------------
# What tests/backends/test_pbs_hook_record.py and bench/pbs_rig.py build from a
# qstat capture: pbs.event().job inside the server (OpenPBS
# src/lib/Libpython/pbs_python_svr_internal.c, src/modules/python/pbs/v1/_base_types.py).

STATES = {
    "T": 0,
    "Q": 1,
    "H": 2,
    "W": 3,
    "R": 4,
    "E": 5,
    "X": 6,
    "B": 7,
    "M": 8,
    "F": 9,
    "S": 400,
    "U": 410,
}  # pbs.JOB_STATE_* (job.h, module_pbs_v1.c)
ENDINGS = (" and finished", " and failed", " and exceeded resource ")


@functools.cache
def _hook_times() -> frozenset[str]:
    """The attributes the hook reads as epoch seconds (its ``TIMES``)."""
    return frozenset(hook_namespace()["TIMES"])


class Resource:
    """pbs.pbs_resource: ``keys()`` (in the server's resource table's order,
    not the listing's) and each resource as an attribute: durations and sizes
    print as their text (pbs.duration keeps the text it was made of), numbers
    are ints."""

    def __init__(self, values: dict) -> None:
        self._values = values
        for key, value in values.items():
            number = isinstance(value, int | float) and not isinstance(value, bool)
            setattr(self, key, value if number else text(value))  # -l software=true: "true"

    def keys(self) -> list[str]:
        return sorted(self._values, reverse=True)


class Queue:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


def epoch(text: str) -> int:
    return int(time.mktime(time.strptime(text, "%a %b %d %H:%M:%S %Y")))


def xml_arguments(text: str) -> str:
    return "".join(f"<jsdl-hpcpa:Argument>{a}</jsdl-hpcpa:Argument>" for a in text.split(" "))


def text(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def pbs_job(native: dict):
    """The job as pbs.event().job holds it, from its qstat record."""
    job = type("job", (), {})()
    for name, value in native.items():
        if name in _hook_times():
            value = epoch(value)
        elif name == "job_state":
            value = STATES[value]
        elif name == "Variable_List":
            value = {k: text(v) for k, v in value.items()}
        elif isinstance(value, dict):
            value = Resource(value)
        elif name == "queue":
            value = Queue(value)
        elif name == "Submit_arguments":
            value = xml_arguments(value)
        elif value in ("True", "False"):
            value = value == "True"
        elif name in ("array_index", "Job_Name"):
            value = text(value)
        setattr(job, name, value)
    return job


def at_jobobit(native: dict) -> dict:
    """The record of a job as it stands while jobobit runs: exiting, before
    the history step (state, substate, comment ending, history_timestamp and
    mtime are not set yet)."""
    before = dict(native, job_state="E", substate=51)
    before.pop("history_timestamp", None)
    before["mtime"] = native["stime"] if "stime" in native else native["ctime"]
    comment = native.get("comment")
    if isinstance(comment, str) and " and terminated" not in comment:
        for ending in ENDINGS:
            if ending in comment:
                before["comment"] = comment[: comment.rindex(ending)]
    return before
