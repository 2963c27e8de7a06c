"""Runs the PBS server hook (deploy/pbs/jobtap_poke_hook.py) the way
pbs_server's embedded Python does, for tests/backends/test_pbs_hook.py.

pbs_server executes a hook script with its own ``pbs`` module, which exists
nowhere else.  This gives the script the part of that module it uses, as the
PBS Professional Hooks Guide describes it: ``pbs.event()`` (here an event whose
``job.id`` is the id given, or ``None`` as in a queuejob event before the server
numbered the job), ``event.accept()``, ``pbs.hook_config_filename`` (the path of
the hook's configuration file), ``pbs.logmsg()`` and ``pbs.LOG_DEBUG``.

Usage: ``python pbs_server_python.py HOOK CONFIG [JOB_ID]``.  Prints
``accepted`` once per ``event.accept()``.
"""

from __future__ import annotations

import runpy
import sys
import types


def main(hook: str, config: str, job_id: str | None = None) -> None:
    event = types.SimpleNamespace(
        job=types.SimpleNamespace(id=job_id), accept=lambda: print("accepted", flush=True)
    )
    sys.modules["pbs"] = types.SimpleNamespace(  # type: ignore[assignment]
        event=lambda: event, hook_config_filename=config, logmsg=lambda *a: None, LOG_DEBUG=4
    )
    runpy.run_path(hook)


if __name__ == "__main__":
    main(*sys.argv[1:])
