"""The PBS stand-ins as the server of a follow-mode bench, shared by
``bench.pbs_follow_latency`` and ``bench.pbs_churn``: the real backend on the
stand-in commands (``sim/standins/bin``), counting what it runs, the server
hook (deploy/pbs/jobtap_poke_hook.py) run with a stand-in of PBS's ``pbs``
module, and the names of the commands as the stand-ins' log and the backend
both see them.

There is no PBS server here: the ``qstat`` and ``qselect`` stand-ins play it
with OpenPBS's costs (sim/standins/pbs_standin.py), reading a control file that
says which jobs exist when (``"appear"``, ``"ends"``)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.follow_rig import JOBTAP, FollowRig
from jobtap.collector.backends.pbs import PBSBackend
from jobtap.keys import POKES_MAXLEN
from sim.rig.paths import FAKE_BIN, fixtures_dir
from sim.rig.pbs_hook import at_jobobit, pbs_job

FIXTURES = fixtures_dir() / "pbs"

# What a command is, by what it asks the server (stand-in log and backend alike).
QSTAT_E = "qstat -E"  # the targeted read: one request for the ids given
LISTING = "qstat -f"  # every live job (a reconciliation; what a poller runs)
QSTAT_IDS = "qstat ids"  # ids without -E: one connection per id
QSTAT_X = "qstat -f -x"  # every job, finished ones too
QUEUES = "qstat -Q"
QSELECT = "qselect"
PBSNODES = "pbsnodes"


def command_kind(program: str, args: Sequence[str]) -> str:
    """The kind of one call (``program`` without its directory, ``args``
    after it), so that the stand-ins' log and the backend's own count name
    the same calls the same way."""
    program = os.path.basename(program)
    if program != "qstat":
        return program
    letters: set[str] = set()
    ids: list[str] = []
    words = iter(args)
    for word in words:
        if word == "-F":
            next(words, None)  # its value: json
        elif word.startswith("-"):
            letters.update(word[1:])
        else:
            ids.append(word)
    if "Q" in letters:
        return QUEUES
    if "E" in letters:
        return QSTAT_E
    if ids:
        return QSTAT_IDS
    return QSTAT_X if "x" in letters else LISTING


@dataclass
class Refresh:
    """One refresh of poked jobs (a batch of pokes): how many ids, how many
    of them brought their record, and the commands it ran, by kind."""

    ids: int
    given: int
    calls: Counter[str] = field(default_factory=Counter)

    @property
    def asked(self) -> bool:
        """Did it ask the scheduler anything?"""
        return sum(self.calls.values()) > 0


class CountingPBS(PBSBackend):
    """The real backend, counting the commands it runs by kind: in all
    (``counts``) and per refresh of poked jobs (``batches``, filled by
    :func:`count_refreshes`), so a bench can tell the follow path's reads
    from the cycles'; and the bytes they printed (``sent``).  :meth:`idle`
    holds new commands back while a bench reads its counters, once none is
    running: a command is then counted whole or not at all."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.counts: Counter[str] = Counter()
        self.batches: list[Refresh] = []
        self.current = threading.local()  # the refresh running in this thread
        self.sent = 0
        self.running = 0
        self.changed = threading.Condition()

    def _begin(self, argv: Sequence[str]) -> None:
        kind = command_kind(argv[0], argv[1:])
        with self.changed:
            self.running += 1
            self.counts[kind] += 1
        batch = getattr(self.current, "batch", None)
        if batch is not None:
            batch.calls[kind] += 1

    def _end(self, printed: int) -> None:
        with self.changed:
            self.running -= 1
            self.sent += printed
            self.changed.notify_all()

    @contextmanager
    def idle(self, timeout: float = 120.0) -> Iterator[None]:
        """Once no command runs (or after ``timeout``), none starts inside."""
        with self.changed:
            self.changed.wait_for(lambda: self.running == 0, timeout)
            yield

    def _run(self, argv: Sequence[str], input: bytes | None = None) -> bytes:
        self._begin(argv)
        out = b""
        try:
            out = super()._run(argv, input)
            return out
        finally:
            self._end(len(out))

    def _run_full(
        self, argv: Sequence[str], input: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        self._begin(argv)
        result = (0, b"", b"")
        try:
            result = super()._run_full(argv, input)
            return result
        finally:
            self._end(len(result[1]))

    def in_refreshes(self, kind: str) -> int:
        """Calls of ``kind`` made by refreshes of poked jobs."""
        return sum(b.calls[kind] for b in self.batches)


def standin_backend() -> CountingPBS:
    """The backend on the stand-ins, never the real commands on PATH
    (``qselect``: the probe)."""
    return CountingPBS(qstat=str(FAKE_BIN / "qstat"), pbsnodes=str(FAKE_BIN / "pbsnodes"),
                       qselect=str(FAKE_BIN / "qselect"), tz="UTC", timeout=30)  # fmt: skip


def use_standins(control: Path) -> None:
    """Point the stand-ins (run by this process and its children) at this
    control file.  The hook's ``localtime()`` must be the stand-in server's
    zone, UTC, for the records it builds to be the ones qstat prints."""
    os.environ["JOBTAP_FAKE_PBS"] = str(control)
    os.environ["JOBTAP_FAKE_PYTHON"] = sys.executable
    os.environ["TZ"] = "UTC"
    time.tzset()


def write_control(path: Path, doc: dict) -> None:
    """Replace the control file at once: the stand-ins read it on every call."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def count_refreshes(rig: FollowRig, backend: CountingPBS) -> dict[str, float]:
    """Note each refresh of poked jobs in ``backend.batches`` with the
    commands it ran; return when each job was first shipped by a refresh
    (filled in as the run goes)."""
    assert rig.service is not None
    collector = rig.service.collector
    plain = collector.refresh
    shipped: dict[str, float] = {}

    def refresh(job_ids, given=None, **kw):
        batch = Refresh(len(job_ids), len(given or ()))
        backend.current.batch = batch
        try:
            report = plain(job_ids, given, **kw)
        finally:
            backend.current.batch = None
            backend.batches.append(batch)
        now = time.time()
        for job in job_ids:
            shipped.setdefault(job, now)
        return report

    collector.refresh = refresh  # type: ignore[method-assign]
    return shipped


def hook_config(rig: FollowRig, *, max_record: int = 8192) -> dict:
    """The hook's imported configuration for the rig's site (``max_record``
    0: jobobit sends no record, the collector asks qstat)."""
    return {"jobtap": str(JOBTAP), "site": rig.site, "redis": rig.server.url,
            "stream": rig.keys.pokes, "maxlen": POKES_MAXLEN, "timeout": 0.25,
            "max_record": max_record}  # fmt: skip


def jobobit_job(finished: dict) -> object:
    """``pbs.event().job`` as jobobit sees it: the job about to go to history,
    from the record ``qstat -x`` prints once it is there."""
    return pbs_job(at_jobobit(finished))
