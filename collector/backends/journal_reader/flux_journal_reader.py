"""Flux job-manager events journal -> NDJSON on standard output.

Run under ``flux python`` by the collector in follow mode (see
``FluxBackend.follow_command``)::

    flux python flux_journal_reader.py [--since T | --full] [--coalesce S] [--max-delay S]
    python3 flux_journal_reader.py --replay journal.consumer.jsonl   # no Flux needed

It stands alone (standard library; ``flux`` is imported inside :func:`follow`
only), because ``flux python`` is the Python that has Flux's bindings, not the
collector's.  The collector never imports it.  It lives in a folder of its own:
Python puts a script's folder first on ``sys.path``, and beside the backend's
``flux.py`` the ``import flux`` below found that module instead of Flux's
bindings (on a real Flux the feed never started).

One line per journal event, flushed at once::

    {"id": "ƒ45fzSqM", "id_int": 117272739840, "event": "submit",
     "timestamp": 1795274936.4471116, "context": {...}, "userid": 0}

(``userid``, the job's owner, on submit events only; the id is written with
``\\u0192`` escapes so the output is ASCII whatever the locale.)  Control lines:
``{"ready": true, ...}`` once the job manager has taken the journal request (its
first answer came, or half a second passed without a refusal: a user other than
the instance owner is refused at once), ``{"sentinel": true}``
at the end of the backlog (with ``--since``/``--full``), and ``{"flush": true}``
when the journal has been quiet for ``--coalesce`` seconds after an event, or
``--max-delay`` seconds after the first event not yet flushed: the reader's
batch boundaries.  Submit events also carry ``jobspec`` and alloc events
``R``, as the journal gives them, cut to what Flux's job-list reads of them
(the resources, the tasks' counts and first command word, the job's name,
duration, cwd, queue, project, bank and per-resource option; R's R_lite,
nodelist and expiration): the collector builds a new job's record from them as
job-list does, without asking ``flux jobs``.

The journal is open only to the instance owner; anyone else gets "Operation not
permitted" on standard error and exit status 1.

``--replay FILE`` reads a recorded journal instead of Flux: either the raw
``job-manager.events-journal`` responses (``{"id": N, "events": [...]}``) or a
JournalConsumer dump (``{"jobid_int": N, "name": ..., ...}``), with the same
flush rules applied to the recorded timestamps (``--speed X`` replays X times
faster than recorded; 0, the default, as fast as possible).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

F58_ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
# A refusal of the journal request (EPERM) comes back at once; this long
# without one, the request counts as taken and the reader says it is ready.
READY_AFTER = 0.5
TIMED_OUT = object()


def encode_f58(value: int) -> str:
    """A job id in F58 with the ``ƒ`` prefix (as the collector spells ids)."""
    digits = []
    while True:
        value, rest = divmod(value, 58)
        digits.append(F58_ALPHABET[rest])
        if not value:
            break
    return "\u0192" + "".join(reversed(digits))


_JOBSPEC_SYSTEM = ("duration", "cwd", "queue", "project", "bank")


def trim_jobspec(jobspec: Any) -> Any:
    """The parts of a jobspec that job-list reads (resources, the tasks' counts
    and first command word, and attributes.system's duration, cwd, queue,
    project, bank, job name and per-resource option): a batch script or an
    environment need not cross the pipe.  Anything else is returned as is."""
    if not isinstance(jobspec, dict):
        return jobspec
    out: dict[str, Any] = {k: jobspec[k] for k in ("version", "resources") if k in jobspec}
    tasks = jobspec.get("tasks")
    if isinstance(tasks, list):
        out["tasks"] = [
            {k: (v[:1] if k == "command" and isinstance(v, list) else v)
             for k, v in task.items() if k in ("command", "slot", "count")}
            if isinstance(task, dict) else task
            for task in tasks
        ]  # fmt: skip
    elif "tasks" in jobspec:
        out["tasks"] = tasks
    attributes = jobspec.get("attributes")
    system = attributes.get("system") if isinstance(attributes, dict) else None
    if isinstance(system, dict):
        kept = {k: system[k] for k in _JOBSPEC_SYSTEM if k in system}
        job = system.get("job")
        if isinstance(job, dict):
            kept["job"] = {"name": job["name"]} if "name" in job else {}
        elif "job" in system:
            kept["job"] = job
        shell = system.get("shell")
        options = shell.get("options") if isinstance(shell, dict) else None
        if isinstance(options, dict) and "per-resource" in options:
            kept["shell"] = {"options": {"per-resource": options["per-resource"]}}
        out["attributes"] = {"system": kept}
    elif attributes is not None:
        out["attributes"] = attributes
    return out


def trim_R(R: Any) -> Any:
    """The parts of R that job-list reads (R_lite, nodelist, expiration)."""
    execution = R.get("execution") if isinstance(R, dict) else None
    if not isinstance(execution, dict):
        return R
    keep = ("R_lite", "nodelist", "starttime", "expiration")
    return {"version": R.get("version"),
            "execution": {k: execution[k] for k in keep if k in execution}}  # fmt: skip


def entry(
    jobid: int,
    name: str,
    timestamp: float,
    context: dict[str, Any] | None,
    jobspec: Any = None,
    R: Any = None,
) -> dict:
    """The NDJSON record of one journal event (with what job-list reads of the
    jobspec on submit, of R on alloc)."""
    context = dict(context or {})
    out: dict[str, Any] = {
        "id": encode_f58(jobid),
        "id_int": jobid,
        "event": name,
        "timestamp": timestamp,
        "context": context,
    }
    if name == "submit" and "userid" in context:
        out["userid"] = context["userid"]
    if name == "submit" and jobspec is not None:
        out["jobspec"] = trim_jobspec(jobspec)
    elif name == "alloc" and R is not None:
        out["R"] = trim_R(R)
    return out


class Emitter:
    """Writes the lines, and the flush markers at the batch boundaries."""

    def __init__(self, out: TextIO, coalesce: float, max_delay: float) -> None:
        self.out, self.coalesce, self.max_delay = out, coalesce, max_delay
        self.first: float | None = None  # time of the first event not yet flushed
        self.last: float | None = None

    def write(self, doc: dict[str, Any]) -> None:
        self.out.write(json.dumps(doc, ensure_ascii=True, separators=(",", ":")) + "\n")
        self.out.flush()

    def event(self, doc: dict[str, Any], now: float) -> None:
        self.write(doc)
        if self.first is None:
            self.first = now
        self.last = now

    @property
    def pending(self) -> bool:
        return self.first is not None

    def due(self, now: float) -> bool:
        """Whether a flush is due at ``now`` (quiet long enough, or waited enough)."""
        if self.first is None or self.last is None:
            return False
        return now - self.last >= self.coalesce or now - self.first >= self.max_delay

    def wait(self, now: float) -> float:
        """How long to wait for the next event before a flush is due (-1: forever)."""
        if self.first is None or self.last is None:
            return -1.0
        left = min(self.last + self.coalesce, self.first + self.max_delay) - now
        return max(left, 0.0)

    def flush(self) -> None:
        if self.first is not None:
            self.write({"flush": True})
        self.first = self.last = None

    def control(self, **fields: Any) -> None:
        self.flush()
        self.write(fields)


# Replay ------------------------------------------------------------------------------
def recorded_events(path: str) -> Iterator[dict[str, Any] | None]:
    """The events of a recorded journal, in file order; None for the sentinel."""
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
            if "events" in doc:  # raw job-manager.events-journal response
                if doc.get("id") == -1 and not doc["events"]:
                    yield None
                    continue
                for event in doc["events"]:
                    yield entry(doc["id"], event["name"], event["timestamp"], event.get("context"),
                                doc.get("jobspec"), doc.get("R"))  # fmt: skip
            elif doc.get("sentinel") or doc.get("jobid_int") == -1:
                yield None
            else:  # JournalConsumer dump
                yield entry(doc["jobid_int"], doc["name"], doc["timestamp"], doc.get("context"),
                            doc.get("jobspec"), doc.get("R"))  # fmt: skip


def replay(args: argparse.Namespace, emitter: Emitter) -> int:
    clock: float | None = None  # recorded time: the newest timestamp so far
    emitter.control(ready=True, replay=args.replay)
    for doc in recorded_events(args.replay):
        if doc is None:
            emitter.control(sentinel=True)
            continue
        if args.since is not None and doc["timestamp"] <= args.since:
            continue
        now = doc["timestamp"] if clock is None else max(clock, doc["timestamp"])
        if args.speed > 0 and clock is not None and now > clock:
            time.sleep((now - clock) / args.speed)
        clock = now
        if emitter.due(now):
            emitter.flush()
        emitter.event(doc, now)
        if emitter.due(now):
            emitter.flush()
    emitter.flush()
    return 0


# Live ------------------------------------------------------------------------------
def follow(args: argparse.Namespace, emitter: Emitter) -> int:
    import flux  # only here: plain python (tests, --replay) has no Flux bindings

    try:
        from flux.job import JournalConsumer
    except ImportError:
        from flux.job.journal import JournalConsumer

    full = args.full or args.since is not None
    consumer = JournalConsumer(
        flux.Flux(), full=full, since=args.since or 0.0, include_sentinel=full
    ).start()
    ready = False
    while True:
        timeout = emitter.wait(time.monotonic())
        if not ready:
            timeout = READY_AFTER if timeout < 0 else min(timeout, READY_AFTER)
        try:
            event = consumer.poll(timeout=timeout)
        except TimeoutError:
            event = TIMED_OUT
        except OSError as exc:
            if exc.errno != errno.ETIMEDOUT:
                raise  # e.g. EPERM: the journal is the instance owner's only
            event = TIMED_OUT
        if not ready:  # an answer, or no refusal in time: the request was taken
            emitter.control(ready=True, full=full, since=args.since)
            ready = True
        if event is TIMED_OUT:
            emitter.flush()
            continue
        if event is None:
            emitter.flush()
            sys.stderr.write("flux journal reader: the journal stream ended\n")
            return 0
        if event.is_empty():
            emitter.control(sentinel=True)
            continue
        now = time.monotonic()
        doc = entry(int(event.jobid), event.name, event.timestamp, event.context,
                    getattr(event, "jobspec", None), getattr(event, "R", None))  # fmt: skip
        emitter.event(doc, now)
        if emitter.due(now):
            emitter.flush()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="flux_journal_reader", description="Flux events journal as NDJSON."
    )
    parser.add_argument("--since", type=float, help="first replay the events newer than this")
    parser.add_argument("--full", action="store_true", help="first replay every held event")
    parser.add_argument("--coalesce", type=float, default=0.02, metavar="SECONDS")
    parser.add_argument("--max-delay", type=float, default=0.1, metavar="SECONDS")
    parser.add_argument("--replay", metavar="FILE", help="replay a recorded journal")
    parser.add_argument("--speed", type=float, default=0.0, help="with --replay (0 = no pauses)")
    args = parser.parse_args(argv)
    if args.coalesce < 0 or args.max_delay < 0 or args.speed < 0:
        parser.error("--coalesce, --max-delay and --speed must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    emitter = Emitter(sys.stdout, args.coalesce, args.max_delay)
    try:
        return replay(args, emitter) if args.replay else follow(args, emitter)
    except BrokenPipeError:  # the collector went away; keep Python quiet at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except ImportError as exc:
        sys.stderr.write(
            f"flux journal reader: no Flux bindings ({exc}): run me under `flux python`\n"
        )
        return 1
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.stderr.write(f"flux journal reader: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
