"""``flux.job.journal`` of the bindings stand-in (see ``flux/__init__.py``).

Copies flux-core's ``JournalConsumer`` (``flux/abc/journal.py``) and the job
manager's journal service (``src/modules/job-manager/journal.c``):

* the service first sends a backlog (with ``full``, every job it holds, else
  the active ones), then a sentinel response (``{"id": -1, "events": []}``),
  then one event per response as they happen;
* the consumer drops events whose timestamp is not newer than ``since``; with
  ``full`` it sorts the backlog by time and, with ``include_sentinel``, returns
  an empty event (``is_empty()``) after it; without ``full`` the sentinel is
  swallowed;
* ``poll(timeout)`` raises ``TimeoutError`` when nothing came in time, returns
  None once the stream has ended (ENODATA), and raises the service's error
  (``PermissionError``, EPERM, for a user other than the instance owner).

The recorded journal (the fixtures' ``journal.consumer.jsonl`` was captured
through the real consumer with ``full`` and ``include_sentinel``) is the
service's answer: what precedes its sentinel is the backlog (all inactive in
the capture: it is empty), what follows arrives live.
"""

from __future__ import annotations

import errno
import json
import time
from pathlib import Path

import flux


class JournalEvent:
    """One event: ``jobid`` (int), ``name``, ``timestamp``, ``context``, and as
    flux-core's: ``jobspec`` on a submit event, ``R`` on an alloc event (what
    the service sends beside them), None otherwise."""

    def __init__(self, jobid: int, event: dict, jobspec: dict | None = None,
                 R: dict | None = None) -> None:  # fmt: skip
        self.jobid = jobid
        self.name = event.get("name")
        self.timestamp = event.get("timestamp", 0.0)
        self.context = event.get("context") or {}
        self.jobspec = jobspec if self.name == "submit" and jobid != -1 else None
        self.R = R if self.name == "alloc" and jobid != -1 else None

    def is_empty(self) -> bool:
        return self.jobid == -1


SENTINEL = JournalEvent(-1, {})


def recorded(control: dict) -> tuple[list[JournalEvent], list[JournalEvent]]:
    """(backlog, live events) of the recorded journal named by the control file."""
    journal = control.get("journal", "consumer")
    if journal in ("consumer", "raw"):
        journal = str(Path(control["dir"]) / f"journal.{journal}.jsonl")
    backlog: list[JournalEvent] = []
    live: list[JournalEvent] = []
    target = backlog
    with open(journal, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            doc = json.loads(line)
            if "events" in doc:  # raw job-manager.events-journal response
                if doc.get("id") == -1 and not doc["events"]:
                    target = live
                    continue
                target.extend(JournalEvent(doc["id"], e, doc.get("jobspec"), doc.get("R"))
                              for e in doc["events"])  # fmt: skip
            elif doc.get("sentinel") or doc.get("jobid_int") == -1:
                target = live
            else:  # JournalConsumer dump
                target.append(JournalEvent(doc["jobid_int"], doc, doc.get("jobspec"),
                                           doc.get("R")))  # fmt: skip
    return backlog, live


class JournalConsumer:
    def __init__(self, flux_handle: flux.Flux, full: bool = True, since: float = 0.0,
                 include_sentinel: bool = False) -> None:  # fmt: skip
        self.handle = flux_handle
        self.full, self.since, self.include_sentinel = full, since, include_sentinel
        self.queue: list[JournalEvent | None] = []
        self.started = False

    def start(self) -> JournalConsumer:
        control = self.handle.control
        self.speed = float(control.get("journal_speed", 0))
        self.stay_open = control.get("journal_end", "close") == "open"
        self.refused = control.get("journal_owner", True) is False
        backlog, live = recorded(control) if self.handle.mode != "empty" else ([], [])
        if not self.full:  # the service sends the active jobs only: none in the capture
            backlog = []
        backlog = [e for e in backlog if e.timestamp > self.since]
        backlog.sort(key=lambda e: e.timestamp)
        self.queue = [*backlog, *((SENTINEL,) if self.full and self.include_sentinel else ())]
        self.live = [e for e in live if e.timestamp > self.since]
        delay = float(control.get("journal_delay", 0))  # the jobs begin that much later
        self.clock0 = time.monotonic() + delay
        self.first = self.live[0].timestamp if self.live else 0.0
        self.started = True
        if control.get("journal_clock"):  # so that `flux jobs` can answer as of now
            wall = time.time() + delay
            Path(control["journal_clock"]).write_text(f"{wall!r} {self.first!r}\n")
        return self

    def _due(self, event: JournalEvent) -> float:
        """When a live event arrives (monotonic clock)."""
        if self.speed <= 0:
            return self.clock0 if self.clock0 > time.monotonic() else 0.0
        return self.clock0 + (event.timestamp - self.first) / self.speed

    def poll(self, timeout: float = -1.0) -> JournalEvent | None:
        if not self.started:
            raise RuntimeError("poll() called before start()")
        if self.refused:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        if self.queue:
            return self.queue.pop(0)
        if not self.live:
            if not self.stay_open:
                return None
            if timeout < 0:
                while True:
                    time.sleep(3600)
            time.sleep(timeout)
            raise TimeoutError(errno.ETIMEDOUT, "Connection timed out")
        wait = self._due(self.live[0]) - time.monotonic()
        if wait > 0:
            if 0 <= timeout < wait:
                time.sleep(timeout)
                raise TimeoutError(errno.ETIMEDOUT, "Connection timed out")
            time.sleep(wait)
        return self.live.pop(0)
