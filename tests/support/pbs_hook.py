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

import json
import runpy
import sys
import types
from pathlib import Path

from tests.support.paths import ROOT

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
