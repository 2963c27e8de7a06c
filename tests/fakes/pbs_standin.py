#!/usr/bin/env python3
"""A test-only stand-in for OpenPBS ``qstat`` and ``pbsnodes`` that replays real
captured output (``../shared/fixtures/pbs``), so the PBS backend can be tested
end to end without a server.

Run as ``pbs_standin.py qstat ARGS...`` / ``pbs_standin.py pbsnodes ARGS...``
(what ``tests/fakes/bin/qstat`` and ``tests/fakes/bin/pbsnodes`` do), or through
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
"""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
import time
from pathlib import Path

PROGRAMS = ("qstat", "pbsnodes")
UNKNOWN_EXIT = 153  # PBSE_UNKJOBID - 15000, what qstat exits with
STAGE = re.compile(r"^(\d+-[^.]+)\.")


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
                if letter not in "ftxQ":
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
    if control.get("file") and not ids:
        return read(Path(control["file"])), [], 0
    x = "-x" if "x" in flags else ""
    path = directory / f"{stage}.qstat{'-t' if 't' in flags else ''}-f{x}.json"
    if not path.exists():
        path = directory / f"{stage}.qstat-f{x}.json"
    if not path.exists():
        raise Usage(f"no fixture {path.name}")
    raw = read(path)
    if not ids:
        return raw, [], 0
    out, unknown = select_jobs(raw, ids, "t" in flags, mode == "first-only")
    errors = [f"qstat: Unknown Job Id {job_id}" for job_id in unknown]
    return out, errors, UNKNOWN_EXIT if unknown else 0


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
        if mode == "fail":
            return fail(f"{program}: cannot connect to server vm (errno=15010)", 1)
        if mode == "hang":
            time.sleep(60)
            return 0
        if mode == "empty":
            doc = {"timestamp": int(time.time()), "pbs_version": "23.06.06", "pbs_server": "vm"}
            sys.stdout.buffer.write(dump(doc))
            return 0
        if mode not in ("ok", "garbage", "first-only"):
            raise Usage(f"unknown mode {mode!r}")
        if program == "qstat":
            out, errors, status = qstat(control, directory, stage, args, mode)
        else:
            out, errors, status = pbsnodes(directory, stage, args)
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
