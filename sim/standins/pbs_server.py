#!/usr/bin/env python3
"""A test-only one-host OpenPBS server behind the ``qsub`` and ``qdel`` stand-ins
(``sim/standins/bin``): jobs submitted with ``qsub`` really run (their batch script,
with bash) and go Q -> R -> F, and ``qdel`` deletes them; after every change the
server writes what real ``qstat -f -F json`` and ``qstat -f -F json -x`` would print
as a stage of the ``qstat`` stand-in (``pbs_standin.py``), which serves it.
Standard library only.

What it copies from the real OpenPBS 23.06.06 of ``tests/fixtures/pbs``:

* job records: each one is a copy of a captured record in the same state (queued
  ``3.vm`` and running ``1.vm`` of ``10-busy``; of ``80-final``: finished ``0.vm``,
  failed ``3.vm``, deleted while running ``1.vm``, deleted while queued ``9.vm``)
  with the id, name, owner, times, session, ``Exit_status``, ``substate`` and
  ``comment`` of the new job.  Times are printed as PBS prints them (``ctime()``:
  ``Sat Nov 21 14:40:20 2026``), in UTC (run the collector with ``--tz UTC``).
* ``qsub SCRIPT`` prints the new id (``N.vm``) and exits 0; the script's ``#PBS``
  directives ``-N``, ``-o``, ``-e``, ``-q`` are read.  The job starts at once (an idle
  server's scheduler) with ``PBS_JOBID``, ``PBS_NODEFILE``, ``PBS_O_WORKDIR`` set, in
  the submitter's home directory, and finishes with ``Exit_status`` = the script's
  exit status (substate 92 "finished" for 0, 93 "failed" otherwise).  Finished jobs
  leave ``qstat -f`` and stay in ``qstat -x`` (job history on).
* ``qdel ID``: a queued job ends at once (F, substate 91, no ``Exit_status``); a
  running one gets SIGTERM and ends as F, substate 91, ``Exit_status`` 271 (256 +
  the signal), "terminated by USER@vm".  Errors as real qdel prints them: ``qdel:
  Unknown Job Id ID`` (exit 153, PBSE_UNKJOBID 15001 mod 256) and ``qdel: Job has
  finished ID`` (exit 35, PBSE_HISTJOBID 15139 mod 256).

The server lives in the control file's ``dir`` (``$JOBTAP_FAKE_PBS``, as for the
``qstat`` stand-in), made by :func:`init`; ``server.json`` holds its jobs and
record templates, changed under ``flock`` and rewritten atomically.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import getpass
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

SERVER = "vm"
VERSION = "23.06.06"
LIVE_STAGE = "50-live"
UNKNOWN_EXIT = 153  # PBSE_UNKJOBID 15001 % 256
FINISHED_EXIT = 35  # PBSE_HISTJOBID 15139 % 256
TEMPLATES = {  # state -> (capture stage, job id)
    "Q": ("10-busy", "3.vm"),
    "R": ("10-busy", "1.vm"),
    "finished": ("80-final", "0.vm"),
    "failed": ("80-final", "3.vm"),
    "deleted-running": ("80-final", "1.vm"),
    "deleted-queued": ("80-final", "9.vm"),
}
# Fields a record only has once the job ran / ended (dropped from other states' copies).
RUN_FIELDS = ("exec_host", "exec_vnode", "stime", "session_id", "resources_used", "run_count")


def init(directory: Path, fixtures: Path, first_id: int = 0) -> None:
    """Make an empty server in ``directory`` from the captures in ``fixtures``."""
    directory.mkdir(parents=True, exist_ok=True)
    docs: dict[str, dict] = {}
    templates = {}
    for state, (stage, job_id) in TEMPLATES.items():
        name = f"{stage}.qstat-f-x.json"
        docs.setdefault(name, json.loads((fixtures / name).read_text()))
        templates[state] = docs[name]["Jobs"][job_id]
    for suffix in ("pbsnodes-av.json", "qstat-Q-f.json"):
        shutil.copyfile(fixtures / f"10-busy.{suffix}", directory / f"10-busy.{suffix}")
    state = {"next": first_id, "jobs": {}, "templates": templates}
    _save(directory, state)


def control() -> dict:
    with open(os.environ["JOBTAP_FAKE_PBS"], encoding="utf-8") as fh:
        return json.load(fh)


@contextlib.contextmanager
def server(directory: Path) -> Iterator[dict]:
    """The server's state, locked; saved (and rendered for qstat) on the way out."""
    with open(directory / "server.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = json.loads((directory / "server.json").read_text())
        yield state
        _save(directory, state)


def _write(path: Path, data: str) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(data)
    os.replace(tmp, path)


def _save(directory: Path, state: dict) -> None:
    _write(directory / "server.json", json.dumps(state))
    envelope = {"timestamp": int(time.time()), "pbs_version": VERSION, "pbs_server": SERVER}
    records = {jid: render(state["templates"], job) for jid, job in state["jobs"].items()}
    live = {jid: rec for jid, rec in records.items() if rec["job_state"] != "F"}
    for suffix, jobs in (("qstat-f.json", live), ("qstat-f-x.json", records)):
        doc = dict(envelope, **({"Jobs": jobs} if jobs else {}))
        _write(directory / f"{LIVE_STAGE}.{suffix}", json.dumps(doc, indent="\t") + "\n")


def pbs_time(t: float) -> str:
    return time.asctime(time.gmtime(t))  # ctime() form, as qstat prints


def _short(t: float) -> str:
    return time.strftime("%a %b %d at %H:%M", time.gmtime(t))  # as in PBS comments


def render(templates: dict, job: dict) -> dict:
    """The ``qstat -f -F json`` record of ``job``: a captured record in its state."""
    rec = copy.deepcopy(templates[job["template"]])
    if job["template"] in ("Q", "deleted-queued"):
        for name in RUN_FIELDS + ("obittime", "Exit_status"):
            rec.pop(name, None)
    user = job["user"]
    rec.update(
        Job_Name=job["name"],
        Job_Owner=f"{user}@{SERVER}",
        euser=user,
        egroup=user,
        hashname=job["id"],
        queue=job["queue"],
        ctime=pbs_time(job["ctime"]),
        qtime=pbs_time(job["ctime"]),
        etime=pbs_time(job["ctime"]),
        mtime=pbs_time(job["mtime"]),
        jobdir=job["home"],
        Output_Path=f"{SERVER}:{job['output']}",
        Error_Path=f"{SERVER}:{job['error']}",
    )
    if job.get("stime") is not None:
        rec["stime"] = pbs_time(job["stime"])
        rec["session_id"] = job["session"]
        ran = f"Job run at {_short(job['stime'])} on (vm:ncpus=1)"
        rec["comment"] = ran
    if job["template"] not in ("Q", "R"):
        rec["obittime"] = pbs_time(job["mtime"])
        rec["history_timestamp"] = int(job["mtime"])
        if job.get("exit") is not None:
            rec["Exit_status"] = job["exit"]
        rec["comment"] = {
            "finished": f"{rec.get('comment')} and finished",
            "failed": f"{rec.get('comment')} and failed",
            "deleted-running": f"{rec.get('comment')} and terminated by {job.get('deleter')}",
            "deleted-queued": "Not Running: Job deleted before it ran and terminated",
        }[job["template"]]
    return rec


# qsub ------------------------------------------------------------------------------
def directives(script: Path) -> dict[str, str]:
    """``#PBS -X value`` lines (also ``-X=value``, as PSI/J writes ``-N``)."""
    out: dict[str, str] = {}
    for line in script.read_text(errors="replace").splitlines():
        if not line.startswith("#PBS"):
            continue
        words = line[4:].strip().split(None, 1)
        if words and words[0].startswith("-") and len(words[0]) >= 2:
            option, value = words[0][:2], words[0][2:].lstrip("=")
            value = (value or (words[1] if len(words) > 1 else "")).strip().strip('"')
            out[option[1]] = value
    return out


def qsub(args: list[str]) -> int:
    scripts = [a for a in args if not a.startswith("-")]
    if len(scripts) != 1:
        sys.stderr.write("usage: qsub [options] script (the stand-in takes a script file)\n")
        return 2
    script = Path(scripts[0])
    if not script.is_file():
        sys.stderr.write("qsub: script file:: No such file or directory\n")
        return 1
    opts = directives(script)
    directory = Path(control()["dir"])
    now = time.time()
    home = os.path.expanduser("~")
    with server(directory) as state:
        job_id = f"{state['next']}.{SERVER}"
        state["next"] += 1
        state["jobs"][job_id] = {
            "id": job_id, "template": "Q", "name": opts.get("N") or script.name[:15],
            "user": getpass.getuser(), "queue": opts.get("q") or "workq", "ctime": now,
            "mtime": now, "home": home, "script": str(script.resolve()),
            "output": opts.get("o") or f"{home}/{script.name}.o{job_id.split('.')[0]}",
            "error": opts.get("e") or f"{home}/{script.name}.e{job_id.split('.')[0]}",
            "workdir": os.getcwd(),
        }  # fmt: skip
    # the job's "mom": detached, so that qsub returns at once like the real one
    subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "run", str(directory), job_id],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, env=os.environ.copy(),
    )  # fmt: skip
    print(job_id)
    return 0


def run(directory: Path, job_id: str) -> int:
    """Run one job: Q -> R, the script, then F (or what qdel made of it)."""
    nodefile = directory / f"{job_id}.nodes"
    nodefile.write_text(socket.gethostname() + "\n")
    with server(directory) as state:
        job = state["jobs"][job_id]
        if job["template"] != "Q":
            return 0  # deleted before it started
        job.update(template="R", stime=time.time(), mtime=time.time(), session=os.getpid())
        output, error = job["output"], job["error"]
        env = dict(
            os.environ, PBS_JOBID=job_id, PBS_NODEFILE=str(nodefile),
            PBS_O_WORKDIR=job["workdir"], PBS_JOBNAME=job["name"], PBS_QUEUE=job["queue"],
        )  # fmt: skip
        with open(output, "ab") as out, open(error, "ab") as err:
            proc = subprocess.Popen(
                ["/bin/bash", job["script"]], cwd=job["home"], env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
            )  # fmt: skip
        job["pgid"] = proc.pid
    status = proc.wait()
    with server(directory) as state:
        job = state["jobs"][job_id]
        job["mtime"] = time.time()
        if job.get("deleter"):
            job.update(template="deleted-running", exit=256 + signal.SIGTERM)
        else:
            code = status if status >= 0 else 256 - status
            job.update(template="finished" if code == 0 else "failed", exit=code)
    nodefile.unlink(missing_ok=True)
    return 0


def qdel(args: list[str]) -> int:
    ids = [a for a in args if not a.startswith("-")]
    directory = Path(control()["dir"])
    status = 0
    with server(directory) as state:
        for job_id in ids:
            job = state["jobs"].get(job_id)
            if job is None:
                sys.stderr.write(f"qdel: Unknown Job Id {job_id}\n")
                status = UNKNOWN_EXIT
            elif job["template"] not in ("Q", "R"):
                sys.stderr.write(f"qdel: Job has finished {job_id}\n")
                status = FINISHED_EXIT
            elif job["template"] == "Q":
                job.update(template="deleted-queued", mtime=time.time())
            else:
                job["deleter"] = f"{getpass.getuser()}@{SERVER}"
                with contextlib.suppress(ProcessLookupError, KeyError):
                    os.killpg(job["pgid"], signal.SIGTERM)
    return status


def main(argv: list[str]) -> int:
    command, args = argv[1], argv[2:]
    if command == "qsub":
        return qsub(args)
    if command == "qdel":
        return qdel(args)
    if command == "run":
        return run(Path(args[0]), args[1])
    sys.stderr.write(f"pbs_server: unknown command {command!r}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
