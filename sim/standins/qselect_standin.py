#!/usr/bin/env python3
"""A test-only stand-in for OpenPBS ``qselect -x [-T] -t m.gt.TIME``, the PBS
backend's probe, answering from the same server state as the qstat stand-in
(``pbs_standin.py``, control file ``JOBTAP_FAKE_PBS``).  Standard library only.

What it copies from the real qselect of OpenPBS 23.06.06, captured with the
exact commands in ``tests/fixtures/pbs/probe/README.md``:

* it prints the ids of the jobs whose ``mtime`` is after TIME, one a line, in
  job id order, and nothing at all (exit status 0) when none matches
  (``qselect-empty.txt``);
* ``-x`` adds finished jobs still in history (``qselect-x-t-m.gt.T.txt``; without
  it, ``qselect-t-m.gt.T.txt``: live jobs only);
* array parents (``1154[].vm``) are listed, their subjobs are not; ``-T``
  lists the subjobs (``1154[1].vm``...) and not the parents
  (``qselect-x-T-t-m.gt.T.txt``);
* TIME is ``[[CC]YY]MMDDhhmm[.SS]`` in the local time of the host (here: the
  control file's ``"tz"``, default UTC, the zone the tests give the backend);
  ``m.gt`` is strictly after, at mtime's whole seconds;
* what it costs (``pbs_standin.costs``, at scale 1): one server connection,
  on a privileged port like qstat's, 17 ms (``QSELECT``), plus 1 us per id it
  prints (``QSELECT_ID``): one qselect on the real server with 1,000 jobs took
  18 ms, against 181 ms for ``qstat -f -F json`` (issue 10; the split between
  the call and its ids is derived in ``pbs_standin``'s docstring); qselect is
  not throttled like qstat.  Its log line counts the ids as ``records``;
* the modes of the control file (``"modes": {"qselect": "fail"}`` etc.).

There is no server keeping ``mtime`` here, so the stand-in keeps it: a job's
mtime is when its record last changed.  A job of ``"ends"`` (or ``"appear"``)
changed at its end once that has passed (else at its submission); for the
others each call compares the job's record with the one it saw last (kept in a
state file beside the control file, ``.qselect``), and a record that differs,
or a job it has not seen, changed when the control file was last written (the
moment the test changed the server), or at the record's own ``mtime`` if that is
later: the one-host server of ``pbs_server.py`` keeps a true ``mtime`` for the
jobs it runs and never rewrites the control file, so a job that ended after the
test set the server up changed when its record says, as real qselect has it.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pbs_standin  # noqa: E402  (the folder of this script, not an installed package)


def parse_args(args: list[str]) -> tuple[bool, bool, str]:
    """(-x, -T, TIME) of ``qselect [-x] [-T] -t m.gt.TIME``."""
    history = subjobs = False
    when = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-x":
            history = True
        elif arg == "-T":
            subjobs = True
        elif arg == "-t" and i + 1 < len(args):
            spec = args[i + 1]
            if not spec.startswith("m.gt."):
                raise pbs_standin.Usage(f"the stand-in only imitates -t m.gt.TIME, not {spec!r}")
            when = spec[len("m.gt.") :]
            i += 1
        else:
            raise pbs_standin.Usage(f"unsupported argument {arg!r}")
        i += 1
    if when is None:
        raise pbs_standin.Usage("the stand-in only imitates qselect -t m.gt.TIME")
    return history, subjobs, when


def parse_time(text: str, tz: str) -> float:
    """qselect's ``[[CC]YY]MMDDhhmm[.SS]`` (here always with CC and YY)."""
    moment = datetime.strptime(text, "%Y%m%d%H%M.%S" if "." in text else "%Y%m%d%H%M")
    return moment.replace(tzinfo=ZoneInfo(tz)).timestamp()


def jobs_now(control: dict, directory: Path, stage: str, history: bool) -> dict:
    """The records ``qstat -f [-x] -t`` would print now."""
    args = ["-f", "-F", "json", "-t", *(("-x",) if history else ())]
    raw, _, _ = pbs_standin.qstat(control, directory, stage, args, "ok")
    return json.loads(raw).get("Jobs", {})


def mtimes(control: dict, jobs: dict) -> dict[str, float]:
    """When each job's record last changed (see the module docstring): its end
    or its submission (``"ends"``, ``"appear"``) when the control file gives
    them, else the last time its record was seen to differ."""
    written = os.stat(os.environ["JOBTAP_FAKE_PBS"]).st_mtime
    ends, appear = control.get("ends") or {}, control.get("appear") or {}
    now = time.time()
    path = Path(os.environ["JOBTAP_FAKE_PBS"] + ".qselect")
    known = json.loads(path.read_text()) if path.exists() else {}
    out = {}
    for job_id, record in jobs.items():
        end = ends.get(job_id)
        if end is not None and now >= float(end):
            out[job_id] = float(end)
            continue
        if job_id in appear:
            out[job_id] = float(appear[job_id])
            continue
        digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
        seen = known.get(job_id)
        if seen and seen[0] == digest:
            out[job_id] = seen[1]
        else:
            out[job_id] = max(written, record_mtime(record, control.get("tz", "UTC")))
        known[job_id] = [digest, out[job_id]]
    path.write_text(json.dumps(known))
    return out


def record_mtime(record: dict, tz: str) -> float:
    """The record's ``mtime`` as qstat prints it (``ctime()`` form), or 0."""
    try:
        moment = datetime.strptime(record["mtime"], "%a %b %d %H:%M:%S %Y")
    except (KeyError, TypeError, ValueError):
        return 0.0
    return moment.replace(tzinfo=ZoneInfo(tz)).timestamp()


def order(job_id: str) -> tuple[int, int]:
    number, _, rest = job_id.partition("[")
    index = rest.partition("]")[0]
    return int(number.partition(".")[0]), int(index) if index.isdigit() else -1


def select(control: dict, args: list[str]) -> bytes:
    history, subjobs, when = parse_args(args)
    directory = Path(control["dir"])
    stage = control.get("stage", "00-empty")
    switch = control.get("switch")
    if switch and time.time() >= float(switch["at"]):
        stage = switch["stage"]
    jobs = jobs_now(control, directory, stage, history)
    after = parse_time(when, control.get("tz", "UTC"))
    changed = mtimes(control, jobs)
    ids = []
    for job_id in jobs:
        is_subjob = "[" in job_id and "[]" not in job_id
        is_parent = "[]" in job_id
        if (is_subjob and not subjobs) or (is_parent and subjobs):
            continue
        if int(changed[job_id]) > after:
            ids.append(job_id)
    return "".join(f"{job_id}\n" for job_id in sorted(ids, key=order)).encode()


def main(argv: list[str]) -> int:
    args = argv[1:]
    try:
        control = pbs_standin.load_control()
        modes = control.get("modes", {})
        mode = modes.get("qselect", control.get("mode", "ok"))
        if mode == "fail":
            return pbs_standin.fail("qselect: cannot connect to server vm (errno=15010)", 1)
        if mode == "hang":
            time.sleep(60)
            return 0
        start = time.time()
        spent = pbs_standin.costs(control, "qselect", args, now=start)
        pbs_standin.settle(start, spent)
        out = select(control, args)
        pbs_standin.add_records(control, "qselect", spent, out)
        pbs_standin.log_call(control, "qselect", args, spent)
        pbs_standin.settle(start, spent)
    except (pbs_standin.Usage, OSError, KeyError, ValueError) as exc:
        return pbs_standin.fail(f"qselect_standin: {exc}")
    if mode == "garbage":
        out = out[: len(out) // 2] + b"\n\x00*** qselect: Segmentation fault ***\n"
    sys.stdout.buffer.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
