#!/usr/bin/env python3
"""A test-only stand-in for OpenPBS ``qstat`` and ``pbsnodes`` that replays real
captured output (``tests/fixtures/pbs``), so the PBS backend can be tested
end to end without a server.

Run as ``pbs_standin.py qstat ARGS...`` / ``pbs_standin.py pbsnodes ARGS...``
(what ``sim/standins/bin/qstat`` and ``sim/standins/bin/pbsnodes`` do), or through
a link named ``qstat`` or ``pbsnodes``.  Standard library only.

The environment variable ``JOBTAP_FAKE_PBS`` names a JSON control file, read
again on every call so that a test can change it between cycles::

    {"dir": "/path/to/fixtures/pbs", "stage": "10-busy", "mode": "ok"}

Optional keys: ``"file"``: a file (``.gz`` allowed) printed for ``qstat -f``
instead of the stage's; ``"modes"``: ``{"pbsnodes": "fail"}`` to give one
program a mode of its own (``"qstat-x"`` names history look-ups, ``qstat -x``).

Modes:

* ``ok``: print the stage's file.  ``qstat -f -F json [-t] [-x] [ids...]`` prints
  ``STAGE.qstat[-t]-f[-x].json`` (without ``-t`` when the stage has no such
  file); with ids only those jobs (with ``-t``, an array id brings its subjobs),
  and each unknown id gives ``qstat: Unknown Job Id ID`` on stderr and exit
  status 153 at the end, like the real qstat.  ``qstat -Q -f -F json`` prints
  ``STAGE.qstat-Q-f.json`` or that of the nearest earlier stage that has one;
  ``pbsnodes -av -F json`` prints ``STAGE.pbsnodes-av.json`` (same fallback).
* ``fail``: "cannot connect to server" on stderr, exit status 1.
* ``garbage``: the first half of the output, then junk, exit status 0.
* ``hang``: sleep 60 s.
* ``empty``: the envelope of an empty server (no Jobs, nodes or Queue key).
* ``first-only``: like ``ok``, but with several ids only the first known job is
  printed (the JSON bug of openpbs/openpbs#2672).

``-E`` (``qstat -E -x -f -F json -t ids...``): one request for all the ids;
unknown ids are left out silently and the exit status is 0, as the real qstat
does (``tests/fixtures/pbs/probe/qstat-E-x-f-json-t.ids.json``, rc=0, empty
stderr, for ``99999.vm`` unknown; without ``-E``: ``qstat-x-f-json-t.ids-noE.*``,
rc=153 and "qstat: Unknown Job Id 99999.vm").

Other control keys: ``"history_file"``: a file (``.gz`` allowed) that ``qstat
-x`` with ids selects from instead of the stage's; ``"switch": {"at": EPOCH,
"stage": NAME}``: from that wall-clock time on, the stage is NAME (a job
ending on the server at a known moment); ``"ends": {ID: EPOCH}`` (with
``"file"`` and ``"history_file"``): each job is live until its end, then
finished, one by one (``"appear": {ID: EPOCH}``: unknown before that, as a job
not submitted yet); ``"log"``: a file that gets one JSON line per call
(program, arguments and what it cost: see the end).

Costs (``"costs"``: ``{"scale": S}``, default 1 = real time; ``false`` = none).
There is no server here, so the costs copy what a real OpenPBS 23.06.06 showed
(issues 10 and 11, ``tests/fixtures/pbs/README.md``); each is multiplied by S:

* qstat sleeps 200 ms (``THROTTLE``) when the same user (uid) ran qstat earlier
  in the same wall-clock second (measured: ``qstat -f -F json`` of 1,000 jobs,
  back to back, 181 ms -> 401 ms; here 205 ms -> 405 ms).  This is the client
  waiting, not the server at work.
* Every qstat or pbsnodes server connection is authenticated through ``pbs_iff``
  on a privileged port: 35 ms each (``CONNECT``: a 200-id qstat without ``-E``
  took 7 s on a quiet server, 35 ms an id).  Without ``-E`` qstat opens one
  connection per job id; with ``-E``, or without ids, one.  pbsnodes opens one.
* Each job record qstat prints costs 0.17 ms (``RECORD``): ``qstat -f -F json``
  of 1,000 jobs took 181 ms, ``qstat -E -x -f -F json -t`` of 1,000 ids 0.23 s;
  less the connection, 146 and 195 us a record; the model takes their mean, so
  it prices those two calls at 205 ms each (+13 %, -11 %).  The records are
  counted in what the call prints (``"Jobs"``, subjobs included).  The same
  server's median for 5,000 queued jobs, 0.29 s (``tests/fixtures/pbs/
  README.md``), is 51 us a record (``RECORD_AT_5000``): the real cost grows less
  than linearly, or the two were measured in other server states, and the model
  prices large listings on the slow side (5,000 jobs: 0.885 s, 3x the real
  0.29 s; 2,000: 0.375 s).  Queue (``-Q``) and node records are not priced: no
  measurement.
* qselect: one connection at 17 ms (``QSELECT``) plus 1 us per id it prints
  (``QSELECT_ID``); measured: 18 ms for one qselect on a server with 1,000 jobs
  (issue 10).  That one figure cannot tell the call from its ids: an id line
  (about 9 bytes) is 1/150 of a job record (1,350 bytes each in
  ``bench-5000``), so an id gets 1/150 of ``RECORD``, about 1 us, and the call
  the rest of the 18 ms (1,000 ids: 17 + 1 ms).  That a whole qselect costs
  less than qstat's 35 ms a connection says the 35 ms is not the connection
  alone (it is qstat's round trip per id: connect, ``pbs_iff``, one status
  request, disconnect); the model keeps each figure for the call it was
  measured on.  Not modelled: the select walks every job the server holds,
  so a qselect on a larger server may cost more than 17 ms.
* About 400 such ports exist; a closed connection holds its port in TIME_WAIT
  for 60 s; when none is free qstat waits 1 s and tries again.  With these
  figures 1,000 ids without ``-E`` take about 130 s here (``python -m
  bench.pbs_history --ungrouped``; measured on the real server: 88-117 s, and
  7-49 s for 200 ids depending on the ports earlier calls still held): the
  model errs on the slow side.  With ``-E``, one connection (measured: 0.23 s
  for 1,000 ids; here 0.205 s).
* The state (last qstat start per uid, ports in TIME_WAIT) is kept in
  ``"state"`` (default: the control file's path + ``.state``), so it carries
  over between calls as on a real host; each test has its own.
* A call sleeps the throttle, its connections and port waits, then reads the
  server's state (the answer is what the server held once the client got
  through), then sleeps until its whole modelled time since it began is over:
  the stand-in's own work (reading, selecting, counting) counts toward it.

The log line of a call (``"log"``) holds ``start`` (when it began, epoch
seconds), ``connections``, ``throttled``, ``port_waits``, ``records`` (what
the call printed: the job records of a qstat, the ids of a qselect; 0 for
pbsnodes and ``qstat -Q``) and the seconds of each part (at scale S):
``throttle_seconds`` (qstat sleeping on the client), ``connect_seconds`` and
``record_seconds`` (the server at work), ``port_wait_seconds`` (waiting for
a free port), and their sum ``seconds``.  It is written once the answer is
known, before the call's last sleep.
"""

from __future__ import annotations

import fcntl
import gzip
import heapq
import json
import os
import re
import sys
import time
from pathlib import Path

PROGRAMS = ("qstat", "pbsnodes")
UNKNOWN_EXIT = 153  # PBSE_UNKJOBID - 15000, what qstat exits with
STAGE = re.compile(r"^(\d+-[^.]+)\.")
# Real costs at scale 1, in seconds (the module docstring says more of each source).
THROTTLE = 0.2  # qstat -f of 1,000 jobs back to back: 181 ms -> 401 ms (issue 10)
CONNECT = 0.035  # qstat of 200 ids without -E: 7 s on a quiet server (issue 11)
RECORD = 0.00017  # a job record qstat prints: mean of (181 - 35) ms / 1,000 (qstat -f
#                   of 1,000 jobs, issue 10) and (230 - 35) ms / 1,000 (qstat -E of
#                   1,000 ids, issue 11)
RECORD_AT_5000 = (0.29 - CONNECT) / 5000  # not used by the model: what the 5,000-job
#                   median (0.29 s, tests/fixtures/pbs/README.md) gives a record, 51 us
QSELECT_ID = 0.000001  # an id qselect prints: RECORD / 150, an id line (~9 bytes) being
#                   1/150 of a job record (1,350 bytes, bench-5000.qstat-f.json.gz)
QSELECT = 0.018 - 1000 * QSELECT_ID  # one qselect with 1,000 jobs: 18 ms (issue 10)
PORTS = 400  # privileged ports: 1,000 ids without -E ran out past ~400 (issue 11)
TIME_WAIT = 60.0  # Linux's TIME_WAIT of a closed connection's port
PORT_RETRY = 1.0  # qstat waits 1 s before it tries for a port again (issue 11)


class Usage(Exception):
    """Arguments the stand-in does not imitate."""


def fail(message: str, status: int = 2) -> int:
    sys.stderr.write(message + "\n")
    return status


def load_control() -> dict:
    path = os.environ.get("JOBTAP_FAKE_PBS")
    if not path:
        raise Usage("JOBTAP_FAKE_PBS is not set")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def read(path: Path) -> bytes:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as fh:
            return fh.read()
    return path.read_bytes()


def stages(directory: Path) -> list[str]:
    return sorted({m[1] for p in directory.iterdir() if (m := STAGE.match(p.name))})


def nearest(directory: Path, stage: str, suffix: str) -> Path:
    """``STAGE.suffix`` or that of the nearest earlier stage that has one."""
    for candidate in reversed([s for s in stages(directory) if s <= stage]):
        path = directory / f"{candidate}.{suffix}"
        if path.exists():
            return path
    raise Usage(f"no {suffix} for stage {stage} or earlier in {directory}")


def parse_qstat(args: list[str]) -> tuple[set[str], list[str]]:
    """Flags (letters) and operands of a qstat command line."""
    flags: set[str] = set()
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-F" or arg.startswith("-F"):
            value = arg[2:] or (args[i + 1] if i + 1 < len(args) else "")
            if value.lower() != "json":
                raise Usage(f"unsupported output format {value!r}")
            flags.add("F")
            i += 1 if arg[2:] else 2
            continue
        if arg.startswith("-") and len(arg) > 1:
            for letter in arg[1:]:
                if letter not in "ftxQE":
                    raise Usage(f"unsupported option -{letter}")
                flags.add(letter)
        else:
            operands.append(arg)
        i += 1
    if not {"f", "F"} <= flags:
        raise Usage("the stand-in only imitates qstat -f -F json")
    return flags, operands


def envelope(doc: dict) -> dict:
    return {k: doc[k] for k in ("timestamp", "pbs_version", "pbs_server") if k in doc}


def dump(doc: dict) -> bytes:
    return (json.dumps(doc, indent="\t", ensure_ascii=False) + "\n").encode()


def select_jobs(raw: bytes, ids: list[str], subjobs: bool, first_only: bool) -> tuple[bytes, list]:
    doc = json.loads(raw)
    jobs = doc.get("Jobs", {})
    out: dict = {}
    unknown: list[str] = []
    for job_id in ids:
        if job_id not in jobs:
            unknown.append(job_id)
            continue
        if first_only and out:
            continue
        out[job_id] = jobs[job_id]
        if subjobs and "[]" in job_id:
            head, _, tail = job_id.partition("[]")
            for other, record in jobs.items():
                if other != job_id and other.startswith(head + "[") and other.endswith(tail):
                    out.setdefault(other, record)
    result = envelope(doc)
    if out:
        result["Jobs"] = out
    return dump(result), unknown


def qstat(control: dict, directory: Path, stage: str, args: list[str], mode: str):
    """Return (stdout, stderr lines, exit status) of a qstat call."""
    flags, ids = parse_qstat(args)
    if "Q" in flags:
        return read(nearest(directory, stage, "qstat-Q-f.json")), [], 0
    if control.get("ends"):
        raw = ended_jobs(control, "x" in flags)
        if not ids:
            return raw, [], 0
    elif control.get("file") and not ids:
        return read(Path(control["file"])), [], 0
    x = "-x" if "x" in flags else ""
    path = directory / f"{stage}.qstat{'-t' if 't' in flags else ''}-f{x}.json"
    if not path.exists():
        path = directory / f"{stage}.qstat-f{x}.json"
    if ids and x and control.get("history_file"):
        path = Path(control["history_file"])
    if control.get("ends"):
        pass  # raw: the jobs as they stand now (above)
    elif not path.exists():
        raise Usage(f"no fixture {path.name}")
    else:
        raw = read(path)
    if not ids:
        return raw, [], 0
    out, unknown = select_jobs(raw, ids, "t" in flags, mode == "first-only")
    if "E" in flags:  # grouped: unknown ids are left out silently
        return out, [], 0
    errors = [f"qstat: Unknown Job Id {job_id}" for job_id in unknown]
    return out, errors, UNKNOWN_EXIT if unknown else 0


def ended_jobs(control: dict, history: bool) -> bytes:
    """With ``"ends": {id: EPOCH}``: each job is live (its record in ``"file"``)
    until its end, then finished (its record in ``"history_file"``), as a real
    server moves a job to history once it recorded its end: gone from ``qstat
    -f``, shown by ``qstat -x``."""
    live = json.loads(read(Path(control["file"])))
    done = json.loads(read(Path(control["history_file"]))).get("Jobs", {})
    now = time.time()
    appear = control.get("appear", {})
    jobs = {}
    for job_id, record in live.get("Jobs", {}).items():
        if job_id in appear and now < float(appear[job_id]):
            continue  # not submitted yet
        end = control["ends"].get(job_id)
        if end is None or now < float(end):
            jobs[job_id] = record
        elif history and job_id in done:
            jobs[job_id] = done[job_id]
    out = envelope(live)
    if jobs:
        out["Jobs"] = jobs
    return dump(out)


# Costs -------------------------------------------------------------------------------
def connections(program: str, args: list[str]) -> int:
    """Server connections a call opens: qstat without -E opens one per job id."""
    if program != "qstat":
        return 1
    try:
        flags, ids = parse_qstat(args)
    except Usage:
        return 1
    return len(ids) if ids and "E" not in flags else 1


class HostState:
    """What the host remembers between calls, under an exclusive lock: the start
    of the last qstat per uid, and when each port in TIME_WAIT frees up."""

    def __init__(self, path: Path) -> None:
        self.fh = open(path, "a+", encoding="utf-8")
        fcntl.flock(self.fh, fcntl.LOCK_EX)
        self.fh.seek(0)
        text = self.fh.read()
        doc = json.loads(text) if text.strip() else {}
        self.last_qstat: dict[str, float] = doc.get("last_qstat", {})
        self.ports: list[float] = doc.get("ports", [])

    def close(self) -> None:
        self.fh.seek(0)
        self.fh.truncate()
        json.dump({"last_qstat": self.last_qstat, "ports": self.ports}, self.fh)
        self.fh.flush()
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def count_records(program: str, out: bytes) -> int:
    """What a call printed that its size term prices: a qstat's job records
    (``"Jobs"``, subjobs included; none for ``-Q``), a qselect's ids."""
    if program == "qselect":
        return sum(1 for line in out.splitlines() if line.strip())
    if program != "qstat":
        return 0
    try:
        jobs = json.loads(out).get("Jobs")
    except ValueError:
        return 0
    return len(jobs) if isinstance(jobs, dict) else 0


def accounted(control: dict) -> bool:
    """Whether a call's costs are worked out (priced or at least logged)."""
    return control.get("costs", {}) is not False or bool(control.get("log"))


def prices(program: str) -> tuple[float, float]:
    """(seconds per connection, seconds per record printed) at scale 1."""
    if program == "qselect":
        return QSELECT, QSELECT_ID
    return CONNECT, RECORD if program == "qstat" else 0.0


def costs(control: dict, program: str, args: list[str], now: float | None = None) -> dict:
    """Work out what a call that began at ``now`` (default: now) costs before
    the server answers (the throttle, its connections, waits for ports), on the
    host's state; return it by part (the caller sleeps until ``now + seconds``,
    then adds what the answer costs with :func:`add_records`)."""
    settings = control.get("costs", {})
    n = connections(program, args)
    now = time.time() if now is None else now
    spent = {"start": now, "connections": n, "throttled": False, "port_waits": 0, "records": 0,
             "throttle_seconds": 0.0, "connect_seconds": 0.0, "port_wait_seconds": 0.0,
             "record_seconds": 0.0, "seconds": 0.0}  # fmt: skip
    if settings is False:
        return spent
    scale = float((settings or {}).get("scale", 1.0))
    default_state = os.environ["JOBTAP_FAKE_PBS"] + ".state"
    state = HostState(Path(control.get("state", default_state)))
    try:
        throttled = False
        if program == "qstat":
            uid = str(os.getuid())
            last = state.last_qstat.get(uid)
            throttled = last is not None and int(last) == int(now)
            state.last_qstat[uid] = now
        t = now + (THROTTLE * scale if throttled else 0.0)
        busy = [p for p in state.ports if p > now]  # ports still in TIME_WAIT
        heapq.heapify(busy)
        waits = 0
        for _ in range(n):
            while busy and busy[0] <= t:
                heapq.heappop(busy)
            while len(busy) >= PORTS:  # none free: wait and try again
                t += PORT_RETRY * scale
                waits += 1
                while busy and busy[0] <= t:
                    heapq.heappop(busy)
            t += prices(program)[0] * scale
            heapq.heappush(busy, t + TIME_WAIT * scale)
        state.ports = busy
    finally:
        state.close()
    spent.update(
        throttled=throttled,
        port_waits=waits,
        throttle_seconds=THROTTLE * scale if throttled else 0.0,
        connect_seconds=n * prices(program)[0] * scale,
        port_wait_seconds=waits * PORT_RETRY * scale,
    )
    # t - now, added up from its parts (the difference of two epochs is off by ~1e-7)
    spent["seconds"] = sum(spent[p] for p in ("throttle_seconds", "connect_seconds",
                                               "port_wait_seconds"))  # fmt: skip
    return spent


def add_records(control: dict, program: str, spent: dict, out: bytes) -> None:
    """Add to ``spent`` what the answer ``out`` costs: its records
    (:func:`count_records`, counted when the call is priced or logged) at the
    program's price per record."""
    if not accounted(control):
        return
    records = count_records(program, out)
    spent["records"] = records
    settings = control.get("costs", {})
    if settings is False:
        return
    scale = float((settings or {}).get("scale", 1.0))
    spent["record_seconds"] = records * prices(program)[1] * scale
    spent["seconds"] += spent["record_seconds"]


def settle(start: float, spent: dict) -> None:
    """Sleep until the call's modelled time since ``start`` is over (the
    stand-in's own work so far counts toward it)."""
    time.sleep(max(0.0, start + spent["seconds"] - time.time()))


def log_call(control: dict, program: str, args: list[str], spent: dict) -> None:
    path = control.get("log")
    if path:
        line = json.dumps({"program": program, "args": args, **spent})
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def pbsnodes(directory: Path, stage: str, args: list[str]):
    letters = {c for a in args if a.startswith("-") and not a.startswith("-F") for c in a[1:]}
    if "a" not in letters or not any(a in ("-F", "-Fjson") for a in args):
        raise Usage("the stand-in only imitates pbsnodes -av -F json")
    return read(nearest(directory, stage, "pbsnodes-av.json")), [], 0


def main(argv: list[str]) -> int:
    if len(argv) > 1 and argv[1] in PROGRAMS:
        program, args = argv[1], argv[2:]
    else:
        program, args = os.path.basename(argv[0]), argv[1:]
    if program not in PROGRAMS:
        return fail(f"pbs_standin: run me as one of {', '.join(PROGRAMS)}")
    try:
        control = load_control()
        modes = control.get("modes", {})
        mode = modes.get(program, control.get("mode", "ok"))
        if program == "qstat" and "-x" in args:
            mode = modes.get("qstat-x", mode)
        directory = Path(control["dir"])
        stage = control.get("stage", "00-empty")
        switch = control.get("switch")
        if switch and time.time() >= float(switch["at"]):
            stage = switch["stage"]
        if mode == "fail":
            return fail(f"{program}: cannot connect to server vm (errno=15010)", 1)
        if mode == "hang":
            time.sleep(60)
            return 0
        start = time.time()
        spent = costs(control, program, args, now=start)
        settle(start, spent)  # the server answers once the client got through
        if mode == "empty":
            doc = {"timestamp": int(time.time()), "pbs_version": "23.06.06", "pbs_server": "vm"}
            out, errors, status = dump(doc), [], 0
        elif mode not in ("ok", "garbage", "first-only"):
            raise Usage(f"unknown mode {mode!r}")
        elif program == "qstat":
            out, errors, status = qstat(control, directory, stage, args, mode)
        else:
            out, errors, status = pbsnodes(directory, stage, args)
        add_records(control, program, spent, out)
        log_call(control, program, args, spent)
        settle(start, spent)
    except (Usage, OSError, KeyError, ValueError) as exc:
        return fail(f"pbs_standin: {exc}")
    if mode == "garbage":
        out = out[: len(out) // 2] + b"\n\x00\x1b[0m*** Segmentation fault (core dumped) ***\n"
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    for line in errors:
        sys.stderr.write(line + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
