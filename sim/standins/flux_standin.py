#!/usr/bin/env python3
"""A test-only stand-in for the ``flux`` command that replays real captured
output of flux-core 0.88 (``tests/fixtures/flux``), so the Flux backend can
be tested end to end without a Flux instance.  Standard library only.

Run as ``flux_standin.py ARGS...`` (what ``sim/standins/bin/flux`` does).  The
environment variable ``JOBTAP_FAKE_FLUX`` names a JSON control file, read again
on every call so that a test can change it between cycles::

    {"dir": "/path/to/fixtures/flux", "stage": "03-pending", "mode": "ok"}

Where the job records come from, first match wins (``"journal_clock"``, see
``flux_bindings/``, sets ``"time"`` to where a live journal replay has got):

* ``"time": T``: every job as it stood at time T, rebuilt from its final record
  (``jobs/NAME-ID/jobs.json``), its eventlog and its jobspec: the fields Flux's
  job-list has at each state, state and times from the events up to T.  A job
  is known from its ``validate`` event on.  (The tests check that this rebuilds
  every captured stage exactly.)
* ``"file": PATH``: a ``flux jobs --json`` listing (e.g. a generated big one).
* ``"stage": NAME``: the stage's ``jobs-NAME.json`` (``"03"`` is enough).
* otherwise the final record of every job.

Commands imitated:

* ``flux jobs [-a] [-A] --json [-c N] [-f FILTER] [--since WHEN] [ID...]``, as
  flux-jobs(1) of 0.88 says and does: the current user's jobs (``"uid"`` in the
  control file, else the real uid), every user's with ``-A``; pending and
  running ones only, all states with ``-a`` (``-A`` alone does not list
  inactive jobs: the real command did not, and short jobs went unseen);
  ``--since WHEN`` keeps the jobs active since then (pending, running, or
  inactive since WHEN) and implies ``-a`` unless ``-f`` is given; WHEN is
  ``-DURATION`` (Flux's standard duration: ``-90s``, ``-6h``...) back from the
  instance's now (``"time"`` when set), or seconds since the epoch.  At most
  ``-c`` jobs (default 1000, 0 = all), as the real command does, silently.
  With ids: one object for one id (nothing if unknown), ``{"jobs": [...]}``
  for several, "JobID ID unknown" on stderr per unknown id, exit status 0.
* ``flux resource R``, ``flux resource list [-n] [-o FMT]``, ``flux resource
  status [-n] [-o FMT]``: from ``resource-R.json``, ``resource-list.txt``,
  ``resource-status.txt``; ``"resource_list"``/``"resource_status"`` in the
  control file replace the rows (``[{"state", "nodelist", ...}]``).
* ``flux queue list [-n] [-o FMT]`` and ``flux job stats``: from ``queue-list.txt``
  and ``job-stats.json``, or with ``"queues": "named"`` from ``queues/``.
* ``flux python SCRIPT ARGS...``: runs SCRIPT as the real command does (the
  system Python, script folder first on ``sys.path``, no project package
  importable) with a stand-in of Flux's Python bindings (``flux_bindings/``)
  that replays the fixture journal: ``"journal": "consumer"`` (default),
  ``"raw"`` or a path, and the other ``journal_*`` keys described there.

Costs: the real ``flux jobs`` took 0.21-0.23 s a call on flux-core 0.88
(``timings.txt``: mostly the command's Python start and broker connection); this
stand-in takes 0.3-0.4 s by itself on the project's machine (shell, Python,
reading the fixtures), so it adds no sleep: a change that makes more calls
shows in time here at least as much as on a real Flux.

``"call_log": PATH`` appends one JSON line per call (``{"argv": [...], "time": T}``,
the arguments after ``flux``) before answering it.

Modes (``"mode"``, or per program in ``"modes"``: ``{"jobs": "fail"}``; program
names: ``jobs`` (listing), ``jobs-ids``, ``resource``, ``queue``, ``job``,
``python``):

* ``ok``; ``fail``: cannot connect, exit status 1; ``garbage``: half the output
  then junk, exit status 0; ``hang``: sleep 60 s; ``empty``: an instance with no
  jobs, no resources, no events.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
FIELD = re.compile(r"\{([^{}:!]+)(![a-zA-Z])?(:[^{}]*)?\}")
DEFAULT_COUNT = 1000
PENDING = ("NEW", "DEPEND", "PRIORITY", "SCHED")
RUNNING = ("RUN", "CLEANUP")
CONNECT_ERROR = (
    "flux-{0}: ERROR: Unable to connect to Flux: broker socket /run/flux/local was not found"
)


class Usage(Exception):
    """Arguments the stand-in does not imitate."""


def fail(message: str, status: int = 2) -> int:
    sys.stderr.write(message + "\n")
    return status


def load_control() -> dict:
    path = os.environ.get("JOBTAP_FAKE_FLUX")
    if not path:
        raise Usage("JOBTAP_FAKE_FLUX is not set")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


# Hostlists (only what the fixtures need: counts and membership) -----------------
def expand_hostlist(text: str) -> list[str]:
    hosts: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text or ""):
        names = [""]
        for literal, body in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            choices = [literal]
            if body:
                choices = []
                for part in body.split(","):
                    low, _, high = part.partition("-")
                    width = len(low) if low.startswith("0") else 0
                    for n in range(int(low), int(high or low) + 1):
                        choices.append(literal + str(n).zfill(width))
            names = [name + choice for name in names for choice in choices]
        hosts.extend(n for n in names if n)
    return hosts


# Job records ---------------------------------------------------------------------
def journal_annotations(directory: Path) -> dict[int, list[dict]]:
    """Per job, the ``annotations`` events of the recorded journal: job-list
    takes a job's annotations from them (they are not in its eventlog)."""
    out: dict[int, list[dict]] = {}
    path = directory / "journal.raw.jsonl"
    if path.exists():
        for line in path.open():
            doc = json.loads(line) if line.strip() else {}
            for event in doc.get("events") or []:
                if event.get("name") == "annotations":
                    out.setdefault(doc["id"], []).append(event)
    return out


class JobDir:
    """One job of the fixtures: final record, eventlog, jobspec, and the
    annotations events the journal recorded for it."""

    def __init__(self, path: Path, annotations: dict[int, list[dict]] | None = None):
        self.final = json.loads((path / "jobs.json").read_text())
        self.events = [
            json.loads(line) for line in (path / "eventlog.jsonl").open() if line.strip()
        ]
        spec = path / "jobspec.json"
        self.jobspec = json.loads(spec.read_text()) if spec.exists() else {}
        if annotations is None:
            annotations = journal_annotations(path.parent.parent)
        self.annotations = annotations.get(self.final["id"], [])

    def requests_nodes(self) -> bool:
        resources = self.jobspec.get("resources") or [{}]
        return resources[0].get("type") == "node"

    def at(self, t: float) -> dict | None:
        """The record ``flux jobs --json`` printed for this job at time ``t``."""
        events = [e for e in self.events if e["timestamp"] <= t]
        names = [e["name"] for e in events]
        if "validate" not in names:
            return None
        state, times, urgency, priority = "NEW", {}, None, None
        deps: list[str] = []
        exception = None
        uri = None
        for e in events:
            name, ctx, ts = e["name"], e.get("context") or {}, e["timestamp"]
            if name == "submit":
                urgency = ctx.get("urgency")
            elif name == "validate":
                state, times["t_depend"] = "DEPEND", ts
            elif name == "depend":
                state, times["t_priority"] = "PRIORITY", ts
            elif name == "priority":
                priority = ctx.get("priority")
                if state == "PRIORITY":
                    state, times["t_sched"] = "SCHED", ts
            elif name == "urgency":  # job-list: back to PRIORITY until the next priority
                urgency = ctx.get("urgency")
                if state == "SCHED":  # and its priority is not shown until SCHED again
                    state, priority = "PRIORITY", None
            elif name == "dependency-add":
                deps.append(ctx["description"])
            elif name == "dependency-remove":
                deps.remove(ctx["description"])
            elif name == "alloc":
                state, times["t_run"] = "RUN", ts
            elif name == "memo" and "uri" in ctx:
                uri = ctx["uri"]
            elif name == "exception" and ctx.get("severity") == 0:
                exception = True
                if state not in ("CLEANUP", "INACTIVE"):
                    state, times["t_cleanup"] = "CLEANUP", ts
            elif name == "finish" and state not in ("CLEANUP", "INACTIVE"):
                state, times["t_cleanup"] = "CLEANUP", ts
            elif name == "clean":
                state, times["t_inactive"] = "INACTIVE", ts
        ran = "t_run" in times
        out: dict = {}
        for key, value in self.final.items():
            if key.startswith("t_") and key != "t_submit":
                if key in times:
                    out[key] = value
            elif key == "nnodes":
                if ran or self.requests_nodes():
                    out[key] = value
            elif key in ("ranks", "nodelist", "expiration"):
                if ran:
                    out[key] = value
            elif key == "priority":
                if priority is not None:
                    out[key] = priority
            elif key == "urgency":
                out[key] = urgency
            elif key == "state":
                out[key] = state
            elif key == "status":
                out[key] = value if state == "INACTIVE" else state
            elif key in ("success", "result", "returncode"):
                if state == "INACTIVE":
                    out[key] = value
            elif key == "waitstatus":
                if "finish" in names:
                    out[key] = value
            elif key == "runtime":
                if ran:
                    out[key] = value if "t_cleanup" in times else t - times["t_run"]
            elif key == "uri":
                if uri is not None:
                    out[key] = uri
            elif key == "dependencies":
                out[key] = list(deps)
            elif key == "annotations":  # the last annotations event's
                noted = [a for a in self.annotations if a["timestamp"] <= t]
                context = noted[-1].get("context") or {} if noted else {}
                out[key] = context.get("annotations") or {}
            elif key == "exception":
                out[key] = value if exception else {"occurred": False}
            else:
                out[key] = value
            if key == "t_submit" and state == "RUN" and "expiration" in self.final:
                out["t_remaining"] = max(0.0, self.final["expiration"] - t)
        return out


def job_dirs(directory: Path) -> list[JobDir]:
    annotations = journal_annotations(directory)
    return [JobDir(p, annotations) for p in sorted((directory / "jobs").iterdir()) if p.is_dir()]


def order(jobs: list[dict]) -> list[dict]:
    """Pending (priority, then submit time), running, then inactive (newest first)."""

    def key(job: dict) -> tuple:
        state = job.get("state")
        if state in PENDING:
            return (0, -(job.get("priority") or 0), job.get("t_submit", 0))
        if state in RUNNING:
            return (1, -job.get("t_run", 0), 0)
        return (2, -job.get("t_inactive", 0), 0)

    return sorted(jobs, key=key)


def find_stage(directory: Path, stage: str) -> Path:
    exact = directory / f"jobs-{stage}.json"
    if exact.exists():
        return exact
    matches = sorted(directory.glob(f"jobs-{stage}*.json"))
    if len(matches) != 1:
        raise Usage(f"no single fixture for stage {stage!r} in {directory}")
    return matches[0]


def replay_time(control: dict) -> float | None:
    """With ``"journal_clock"`` and a journal replaying at ``"journal_speed"``:
    the recorded moment the replay has reached (None before it started)."""
    path = Path(control["journal_clock"])
    if not path.exists():
        return None
    wall, first = (float(x) for x in path.read_text().split())
    return first + (time.time() - wall) * float(control.get("journal_speed") or 1)


def all_jobs(control: dict, directory: Path) -> list[dict]:
    if control.get("journal_clock") and control.get("time") is None:
        control = {**control, "time": replay_time(control) or 0.0}  # 0: nothing yet
    if control.get("time") is not None:
        t = float(control["time"])
        return order([r for j in job_dirs(directory) if (r := j.at(t)) is not None])
    if control.get("file"):
        return json.loads(Path(control["file"]).read_text())["jobs"]
    if control.get("stage"):
        return json.loads(find_stage(directory, control["stage"]).read_text())["jobs"]
    return order([j.final for j in job_dirs(directory)])


# flux jobs -----------------------------------------------------------------------
def option_value(args: list[str], i: int, short: str, long: str) -> tuple[str | None, int]:
    """(value, next index) if ``args[i]`` is the option ``short``/``long``."""
    arg = args[i]
    if arg in (short, long):
        if i + 1 >= len(args):
            raise Usage(f"{arg} needs a value")
        return args[i + 1], i + 2
    if arg.startswith(long + "="):
        return arg[len(long) + 1 :], i + 1
    if short and arg.startswith(short) and len(arg) > len(short) and not arg.startswith("--"):
        return arg[len(short) :], i + 1
    return None, i


def parse_jobs_args(args: list[str]) -> dict:
    opts = {"all_users": False, "all_states": False, "json": False, "count": DEFAULT_COUNT,
            "filter": None, "since": None, "ids": []}  # fmt: skip
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-A":
            opts["all_users"] = True
        elif arg == "-a":
            opts["all_states"] = True
        elif arg == "--json":
            opts["json"] = True
        elif arg in ("-n", "--no-header"):
            pass
        else:
            for short, long, key in (("-c", "--count", "count"), ("-f", "--filter", "filter"),
                                     ("", "--since", "since")):  # fmt: skip
                value, j = option_value(args, i, short, long)
                if value is not None:
                    opts[key] = int(value) if key == "count" else value
                    i = j
                    break
            else:
                if arg.startswith("-"):
                    raise Usage(f"unsupported option {arg}")
                opts["ids"].append(arg)
                i += 1
            continue
        i += 1
    if not opts["json"]:
        raise Usage("the stand-in only imitates flux jobs --json")
    return opts


FSD = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def since_time(when: str, now: float) -> float:
    """``--since``'s WHEN: ``-DURATION`` (RFC 23: a number, then s, m, h or d)
    back from ``now``, or a timestamp."""
    if when.startswith("-"):
        number, unit = when[1:].rstrip("smhd"), when[1:][len(when[1:].rstrip("smhd")) :]
        if unit not in FSD:
            raise Usage(f"invalid duration {when!r}")
        return now - float(number) * FSD[unit]
    return float(when)


def decode_id(text: str) -> int | None:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    if text.isdigit():
        return int(text)
    if text[:1] in ("\u0192", "f") and len(text) > 1 and all(c in alphabet for c in text[1:]):
        n = 0
        for c in text[1:]:
            n = n * 58 + alphabet.index(c)
        return n
    return None


def state_filter(job: dict, names: str) -> bool:
    state = job.get("state")
    for name in names.lower().split(","):
        if name == "pending" and state in PENDING:
            return True
        if name == "running" and state in RUNNING:
            return True
        if name == "active" and state != "INACTIVE":
            return True
        if name == (state or "").lower():
            return True
        if state == "INACTIVE" and name in ("completed", "failed", "canceled", "timeout"):
            if (job.get("result") or "").lower() == name:
                return True
    return False


def flux_jobs(control: dict, directory: Path, args: list[str]) -> tuple[bytes, list[str], int]:
    opts = parse_jobs_args(args)
    jobs = all_jobs(control, directory)
    if opts["ids"]:
        by_id = {job["id"]: job for job in jobs}
        found, errors = [], []
        for text in opts["ids"]:
            number = decode_id(text)
            if number is None:
                return b"", [f"flux-jobs: ERROR: invalid JobID value: {text}"], 1
            if number in by_id:
                found.append(by_id[number])
            else:
                errors.append(f"JobID {text} unknown")
        if len(opts["ids"]) == 1:
            out = (json.dumps(found[0]) + "\n").encode() if found else b""
        else:
            out = (json.dumps({"jobs": found}) + "\n").encode()
        return out, errors, 0
    uid = int(control.get("uid", os.getuid()))
    if not opts["all_users"]:
        jobs = [job for job in jobs if job.get("userid") == uid]
    all_states = opts["all_states"] or (opts["since"] is not None and not opts["filter"])
    names = opts["filter"] or ("pending,running,inactive" if all_states else None)
    names = names or "pending,running"
    jobs = [job for job in jobs if state_filter(job, names)]
    if opts["since"] is not None:
        since = since_time(opts["since"], float(control.get("time") or time.time()))
        jobs = [j for j in jobs if j.get("state") != "INACTIVE" or j.get("t_inactive", 0) > since]
    if opts["count"] > 0:
        jobs = jobs[: opts["count"]]  # silently, as the real command does with --json
    return (json.dumps({"jobs": jobs}) + "\n").encode(), [], 0


# Text listings -------------------------------------------------------------------
def table(path: Path) -> tuple[list[str], list[list[str]]]:
    lines = [ANSI.sub("", line).rstrip() for line in path.read_text().splitlines()]
    lines = [line for line in lines if line.strip()]
    return lines[0].split(), [line.split() for line in lines[1:]]


def render(fmt: str | None, rows: list[dict], header: str, no_header: bool) -> bytes:
    if fmt is None:
        out = [] if no_header else [header]
        for row in rows:
            out.append(" ".join(str(v) for v in row.values()))
    else:
        out = []

        def value(match: re.Match, row: dict) -> str:
            name = match[1]
            if name not in row:
                raise Usage(f"unknown field {name!r} in format")
            return str(row[name])

        for row in rows:
            out.append(FIELD.sub(lambda m, row=row: value(m, row), fmt))
    return ("\n".join(out) + "\n").encode() if out else b""


def resource_rows(control: dict, directory: Path, which: str) -> list[dict]:
    override = control.get(f"resource_{which}")
    if which == "list":
        if override is None:
            _head, rows = table(directory / "resource-list.txt")
            override = [{"state": r[0], "nodelist": r[4] if len(r) > 4 else "",
                         "ncores": int(r[2]), "ngpus": int(r[3])} for r in rows]  # fmt: skip
        return [{"state": r["state"], "nnodes": len(expand_hostlist(r["nodelist"])),
                 "ncores": r.get("ncores", 0), "ngpus": r.get("ngpus", 0),
                 "nodelist": r["nodelist"]} for r in override]  # fmt: skip
    if override is None:
        _head, rows = table(directory / "resource-status.txt")
        override = [{"state": r[0], "status": "online" if r[1] == "✔" else "offline",
                     "nodelist": r[3] if len(r) > 3 else ""} for r in rows]  # fmt: skip
    out = []
    for r in override:
        online = r.get("status", "online") == "online"
        out.append({"state": r["state"] + ("" if online else "*"), "statex": r["state"],
                    "status": "online" if online else "offline", "up": "✔" if online else "✗",
                    "nnodes": len(expand_hostlist(r["nodelist"])), "nodelist": r["nodelist"],
                    "reason": r.get("reason", ""), "ranks": "", "timestamp": ""})  # fmt: skip
    return out


def parse_fmt_args(args: list[str]) -> tuple[str | None, bool, list[str]]:
    fmt, no_header, rest, i = None, False, [], 0
    while i < len(args):
        value, j = option_value(args, i, "-o", "--format")
        if value is not None:
            fmt, i = value, j
            continue
        if args[i] in ("-n", "--no-header"):
            no_header = True
        else:
            rest.append(args[i])
        i += 1
    return fmt, no_header, rest


def flux_resource(control: dict, directory: Path, args: list[str]) -> bytes:
    if not args:
        raise Usage("flux resource needs a subcommand")
    sub, fmt_args = args[0], args[1:]
    if sub == "R":
        doc = control.get("resource_R")
        return (
            (json.dumps(doc) + "\n").encode()
            if doc
            else (directory / "resource-R.json").read_bytes()
        )
    fmt, no_header, rest = parse_fmt_args(fmt_args)
    if rest:
        raise Usage(f"unsupported arguments {rest}")
    if sub == "list":
        rows = resource_rows(control, directory, "list")
        return render(fmt, rows, "STATE NNODES NCORES NGPUS NODELIST", no_header)
    if sub == "status":
        rows = [r for r in resource_rows(control, directory, "status") if r["nnodes"]]
        if fmt is None:
            rows = [{k: r[k] for k in ("state", "up", "nnodes", "nodelist")} for r in rows]
        return render(fmt, rows, "STATE UP NNODES NODELIST", no_header)
    raise Usage(f"flux resource {sub} is not imitated")


def seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def flux_queue(control: dict, directory: Path, args: list[str]) -> bytes:
    if not args or args[0] != "list":
        raise Usage("the stand-in only imitates flux queue list")
    fmt, no_header, rest = parse_fmt_args(args[1:])
    if rest:
        raise Usage(f"unsupported arguments {rest}")
    named = control.get("queues") == "named"
    head, rows = table(directory / ("queues/queue-list-queues.txt" if named else "queue-list.txt"))
    out = []
    for cells in control.get("queue_list") or rows:
        if isinstance(cells, dict):
            cells = [cells.get(h.lower(), "") for h in head]
        row = dict(zip(head, cells))
        queuem = row.get("QUEUE", "")
        enabled, started = row["EN"] in ("✔", "y"), row["ST"] in ("✔", "y")
        out.append({
            "queue": queuem.rstrip("*"), "queuem": queuem,
            "submission": "enabled" if enabled else "disabled",
            "scheduling": "started" if started else "stopped",
            "enabled": row["EN"], "started": row["ST"],
            "defaults.timelimit": seconds(row["TDEFAULT"]),
            "limits.timelimit": seconds(row["TLIMIT"]),
            "limits.range.nnodes": row["NNODES"], "limits.range.ncores": row["NCORES"],
            "limits.range.ngpus": row["NGPUS"],
        })  # fmt: skip
    return render(fmt, out, " ".join(head), no_header)


def flux_job(control: dict, directory: Path, args: list[str]) -> bytes:
    if args != ["stats"]:
        raise Usage("the stand-in only imitates flux job stats")
    named = control.get("queues") == "named"
    return (
        directory / ("queues/job-stats-queues.json" if named else "job-stats.json")
    ).read_bytes()


def empty_output(program: str, args: list[str]) -> bytes:
    if program == "jobs":
        return b'{"jobs": []}\n'
    if program == "resource" and args[:1] == ["R"]:
        return b'{"version": 1, "execution": {"R_lite": [], "nodelist": []}}\n'
    if program == "job":
        states = dict.fromkeys(("depend", "priority", "sched", "run", "cleanup", "inactive"), 0)
        doc = {"job_states": {**states, "total": 0}, "successful": 0, "failed": 0,
               "canceled": 0, "timeout": 0, "inactive_purged": 0, "queues": []}  # fmt: skip
        return (json.dumps(doc) + "\n").encode()
    return b""


BINDINGS = Path(__file__).resolve().parent / "flux_bindings"


def run_python(control: dict, directory: Path, args: list[str]) -> int:
    """``flux python SCRIPT ARGS...`` as the real command runs it: the plain
    system Python (never this one's virtual environment: no project package is
    importable) with Flux's bindings, here ``flux_bindings/``, put first on
    ``PYTHONPATH``; Python itself then puts the script's folder first on
    ``sys.path``, ahead of the bindings.  The bindings replay the fixture
    journal (see ``flux_bindings/flux/__init__.py``)."""
    if not args:
        raise Usage("flux python needs a script")
    python = getattr(sys, "_base_executable", None) or sys.executable
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BINDINGS), env.get("PYTHONPATH")]))
    env.pop("PYTHONSAFEPATH", None)  # the script's folder must come first, as it does
    sys.stdout.flush()
    os.execve(python, [python, "-s", *args], env)
    return 0  # not reached


def main(argv: list[str]) -> int:
    args = argv[1:]
    if not args:
        return fail("flux_standin: usage: flux COMMAND ARGS...")
    program, rest = args[0], args[1:]
    try:
        control = load_control()
        if control.get("call_log"):  # what was asked, for tests that count commands
            with open(control["call_log"], "a", encoding="utf-8") as log:
                log.write(json.dumps({"argv": args, "time": time.time()}) + "\n")
        key = program
        if program == "jobs" and any(not a.startswith("-") for a in parse_ids(rest)):
            key = "jobs-ids"
        mode = control.get("modes", {}).get(key, control.get("mode", "ok"))
        directory = Path(control["dir"])
        if program == "python":  # the bindings answer for the instance (modes too)
            return run_python(control, directory, rest)
        if mode == "fail":
            return fail(CONNECT_ERROR.format(program), 1)
        if mode == "hang":
            time.sleep(60)
            return 0
        if mode == "empty":
            sys.stdout.buffer.write(empty_output(program, rest))
            return 0
        if mode not in ("ok", "garbage"):
            raise Usage(f"unknown mode {mode!r}")
        errors: list[str] = []
        status = 0
        if program == "jobs":
            out, errors, status = flux_jobs(control, directory, rest)
        elif program == "resource":
            out = flux_resource(control, directory, rest)
        elif program == "queue":
            out = flux_queue(control, directory, rest)
        elif program == "job":
            out = flux_job(control, directory, rest)
        else:
            raise Usage(f"flux {program} is not imitated")
    except (Usage, OSError, KeyError, ValueError) as exc:
        return fail(f"flux_standin: {exc}")
    if mode == "garbage":
        out = out[: len(out) // 2] + b"\n\x00\x1b[0m*** Segmentation fault (core dumped) ***\n"
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    for line in errors:
        sys.stderr.write(line + "\n")
    return status


def parse_ids(args: list[str]) -> list[str]:
    """The operands of a ``flux jobs`` command line (its job ids)."""
    try:
        return parse_jobs_args([*args, "--json"])["ids"]
    except (Usage, ValueError):
        return []


if __name__ == "__main__":
    sys.exit(main(sys.argv))
