"""The scenario of issue 12, as a harness shared by the test and the soak bench:
the sim pipeline running in real time (an in-process collector service keeping
its state in a file, a real ``jobtap worker`` process that a supervisor restarts
whenever it ends, as systemd's ``Restart=always`` does), a long-running
``client.stream()`` consumer and an ``all_jobs=True`` subscriber of the SDK, and
a ``wait()`` on a running job; while Redis loses data under them (killed and
started empty, or sent back to an older RDB snapshot) and the worker is killed
at random points.

What was written is gathered from the site stream at chosen moments (what a
later loss takes away still counts); :meth:`LossRun.check` then checks what the
issue asks and returns the figures."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import jobtap
from jobtap.cli.localredis import RedisServer
from jobtap.collector.cycle import Collector
from jobtap.collector.hoststate import FILENAME, HostState
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from jobtap.workers.chunk import PRIORITIES
from tests.support.epochs import Written, check_finals_against_truth
from tests.support.redisloss import restart_empty, restart_from, snapshot
from tests.support.wait import eventually

SITE = "loss"
K = SiteKeys(SITE)


@dataclass
class Received:
    """What one consumer got: every change's id and event, in order."""

    ids: list[str] = field(default_factory=list)
    events: dict[str, bytes] = field(default_factory=dict)
    finals: set[str] = field(default_factory=set)  # job ids
    reused: list[str] = field(default_factory=list)  # ids that came with other content
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, change: jobtap.Change, *, real: bool = True) -> None:
        with self.lock:
            if real:
                self.ids.append(change.id)
                known = self.events.setdefault(change.id, change.json)
                if known is not change.json and not _same(known, _canonical(change.json)):
                    self.reused.append(change.id)
            if change.final and change.kind == "job":
                self.finals.add(change.object_id)

    def has(self, ids: set[str]) -> bool:
        with self.lock:
            return ids <= set(self.events)


class SupervisedWorker:
    """A real ``jobtap worker`` process, started again whenever it ends."""

    def __init__(self, server: RedisServer, log_path: Path):
        self.server = server
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopping = threading.Event()
        self.starts = 0
        self.thread = threading.Thread(target=self._supervise, name="supervisor", daemon=True)

    def start(self) -> None:
        self.thread.start()
        eventually(lambda: self.proc is not None, what="the worker started")

    def _supervise(self) -> None:
        cmd = [sys.executable, "-m", "jobtap.cli", "worker", "--redis", self.server.url,
               "--site", SITE, "--log-level", "WARNING"]  # fmt: skip
        while not self.stopping.is_set():
            self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
            self.starts += 1
            self.proc.wait()
            self.stopping.wait(0.2)  # RestartSec

    def kill(self) -> None:
        """SIGKILL the worker process of the moment."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)

    def stop(self) -> int:
        self.stopping.set()
        proc = self.proc
        status = 0
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                status = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                status = proc.wait()
        self.thread.join(10)
        self.log.close()
        return status


class LossRun:
    def __init__(
        self,
        server: RedisServer,
        workdir: Path,
        *,
        seed: int = 7,
        jobs: int = 400,
        nodes: int = 40,
        tick: float = 30.0,
        interval: float = 0.2,
        chunk_size: int = 20,
        wait_cycles: int = 15,
        strict: bool = True,
    ):
        self.wait_cycles = wait_cycles
        self.server = server
        self.workdir = workdir
        self.backend = SimBackend(seed=seed, nodes=nodes, jobs=jobs, tick=tick)
        self.sim = self.backend.simulation
        # Every cycle a full stat: the check wants every ended job finalised by
        # the last stat, and purged ones are finalised by full stats only.
        collector = Collector(self.backend, server.client(), site=SITE, nodes_every=3,
                              chunk_size=chunk_size, reconcile_every=0)  # fmt: skip
        state = HostState.load(workdir / "collector" / FILENAME)
        self.svc = CollectorService(collector, interval=interval, max_backoff=1.0, state=state)
        self.collecting = threading.Thread(target=self.svc.run, name="collector", daemon=True)
        self.worker = SupervisedWorker(server, workdir / "worker.log")
        self.client = jobtap.Client(server.url, site=SITE, backoff=(0.05, 0.5))
        self.streamed = Received()
        self.subscribed = Received()
        self.written = Written(strict=strict)
        self.losses: list[str] = []
        self.rng = random.Random(seed)
        self.waited: dict[str, Any] = {}
        self._stream: Any = None
        self._threads: list[threading.Thread] = []

    # -- running -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker and both consumers (before anything is written: every
        event is theirs to get), two cycles, a wait() on a running job, and the
        collector's loop."""
        self.worker.start()
        self.client.subscribe(self._on_change, all_jobs=True, kinds=("job", "node", "queue"))
        self._stream = self.client.stream(since="0", block=0.2)
        self._spawn(self._consume, "stream consumer")
        for _ in range(2):
            assert self.svc.run_one(), "the first cycles failed"
        eventually(self._drained, timeout=30, what="the first cycles applied")
        self.waited["job"] = self._running_job(self.wait_cycles)
        self._spawn(self._wait, "wait")
        self.collecting.start()

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _on_change(self, change: jobtap.Change) -> None:
        self.subscribed.add(change, real=change.type not in (jobtap.INITIAL, jobtap.RESYNC))

    def _consume(self) -> None:
        for change in self._stream:
            self.streamed.add(change)

    def _running_job(self, cycles: int) -> str:
        """A running job that the sim plans to end after ``cycles`` more cycles
        (the first such), else the last to end."""
        running = [j for j in self.sim._live.values() if j.started and not j.finished]
        later = self.sim.now + cycles * self.backend.tick
        ending = sorted(running, key=lambda j: j.stime + j.runtime)
        return next((j for j in ending if j.stime + j.runtime >= later), ending[-1]).id

    def _wait(self) -> None:
        try:
            self.waited["result"] = self.client.wait(self.waited["job"], timeout=600)
        except jobtap.JobtapError as exc:
            self.waited["error"] = exc

    def cycles(self, n: int) -> None:
        """Let the pipeline run ``n`` more successful cycles."""
        target = self.svc.collector.cycles_run + n
        eventually(lambda: self.svc.collector.cycles_run >= target, timeout=60 + n)

    # -- losses --------------------------------------------------------------------------------
    def lose_everything(self) -> None:
        """Redis killed and started empty, in the middle of the flow."""
        restart_empty(self.server)
        self.losses.append("empty")

    def put_aside(self) -> Path:
        """An RDB snapshot of now, and what the stream holds at this moment."""
        aside = snapshot(self.server)
        self.written.gather(self.server.client(), K.events)
        return aside

    def go_back(self, aside: Path) -> None:
        """Redis killed and started on an older snapshot, in the middle of the flow."""
        restart_from(self.server, aside)
        self.losses.append("snapshot")

    def kill_worker_in_a_burst(self, kills: int) -> None:
        """SIGKILL the worker ``kills`` times, at random moments of its work."""
        for _ in range(kills):
            starts = self.worker.starts
            busy_at = self.svc.collector.cycles_run + self.rng.randint(1, 3)
            eventually(lambda b=busy_at: self.svc.collector.cycles_run >= b, timeout=30)
            self.worker.kill()
            eventually(lambda s=starts: self.worker.starts > s, timeout=30, what="restarted")

    # -- the end --------------------------------------------------------------------------------
    def _drained(self) -> bool:
        r = self.server.client()
        from rq import Queue

        for prio in PRIORITIES:
            q = Queue(K.rq_queue(prio), connection=r)
            if q.count or q.started_job_registry.get_job_count(cleanup=False):
                return False
        return True

    def finish(self) -> None:
        """Stop the collector, let the worker apply everything, let both
        consumers catch up with the stream, then stop them."""
        self.svc.stop_event.set()
        if self.collecting.is_alive():
            self.collecting.join(30)
        try:
            eventually(self._drained, timeout=60, what="the queues drained")
            r = self.server.client()
            self.written.gather(r, K.events)
            now = {f[b"id"].decode() for _, f in r.xrange(K.events)}
            for name, got in (("stream consumer", self.streamed), ("subscriber", self.subscribed)):
                eventually(lambda g=got: g.has(now), timeout=30, what=f"the {name} caught up")
        finally:  # whatever happened, leave no process or thread behind
            if self._stream is not None:
                self._stream.close()
            self.worker.stop()
            self.client.close()
            for t in self._threads:
                t.join(10)

    def figures(self) -> dict[str, Any]:
        """What happened, counted: written, delivered, duplicates, and every way
        the contract can break (all of those should be 0)."""
        written = self.written
        ids = written.ids
        last_stat = self.sim.now
        ended = {
            jid for jid in written.jobs()
            if (t := self.sim.truth[jid]).final_state and t.transitions[-1][0] <= last_stat
        }  # fmt: skip
        other_content = sum(
            1
            for got in (self.streamed, self.subscribed)
            for eid, body in got.events.items()
            if eid in written.by_id and not _same(body, written.by_id[eid])
        )
        job = self.waited.get("result")
        truth = self.sim.truth[self.waited["job"]]
        return {
            "losses": len(self.losses),
            "worker starts": self.worker.starts,
            "written": len(ids),
            "epochs seen by the stream": 1 + self._stream.epochs,
            "stream delivered": len(self.streamed.ids),
            "stream duplicates dropped": self._stream.duplicates,
            "subscriber delivered": len(self.subscribed.ids),
            "lost (stream)": len(ids - set(self.streamed.events)),
            "lost (subscriber)": len(ids - set(self.subscribed.events)),
            "reused ids": len(written.reused)
            + len(self.streamed.reused)
            + len(self.subscribed.reused)
            + other_content,
            "version gaps": len(written.version_gaps()),
            "ended jobs": len(ended),
            "ended without a final (subscriber)": len(ended - self.subscribed.finals),
            "wait() right": job is not None and job.state == truth.final_state,
        }

    def check(self) -> dict[str, Any]:
        """What the issue checks, asserted with details; the figures returned."""
        written = self.written
        written.check_versions()  # per object and epoch: 1, 2, 3...
        ids = written.ids
        for name, got in (("stream consumer", self.streamed), ("subscriber", self.subscribed)):
            missing = ids - set(got.events)
            assert not missing, f"{name} never got {len(missing)} events: {sorted(missing)[:5]}"
            assert not got.reused, f"{name} got ids with two contents: {got.reused[:5]}"
            for eid, body in got.events.items():  # no id names two different events
                if eid in written.by_id:
                    assert _same(body, written.by_id[eid]), f"{name}: {eid} is another event"
        check_finals_against_truth(written, self.sim, self.sim.now)
        figures = self.figures()
        assert figures["ended without a final (subscriber)"] == 0, figures
        assert figures["wait() right"], (self.waited, self.sim.truth[self.waited["job"]])
        return figures


def _canonical(body: bytes) -> bytes:
    return orjson.dumps(orjson.loads(body), option=orjson.OPT_SORT_KEYS)


def _same(a: bytes, canonical: bytes) -> bool:
    """Whether event ``a`` (as written) is the event ``canonical`` (sorted keys)."""
    return _canonical(a) == canonical
