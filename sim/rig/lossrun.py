"""The scenario of issue 12, as a harness shared by the test and the soak bench:
the sim pipeline running in real time (an in-process collector service keeping
its state in a file, a real ``jobtap worker`` process that a supervisor restarts
whenever it ends, as systemd's ``Restart=always`` does), a long-running
``client.stream()`` consumer and an ``all_jobs=True`` subscriber of the SDK, and
a ``wait()`` on a running job; while Redis loses data under them (killed and
started empty, or sent back to an older RDB snapshot) and the worker is killed
at random points.

Each loss is placed where the holes were (docs/performance.md, "Redis losing
data"), not at a random moment:

- :meth:`LossRun.lose_everything`: the worker is stopped (SIGSTOP) between two
  chunks, Redis is killed and started empty between two collector cycles, and
  the worker goes on once the collector has shipped everything again: the first
  chunk it takes after the loss holds more objects than one batch of the
  worker's (``chunk_size`` 120 jobs, 60 nodes; a batch is 50), made for the
  epoch it knew;
- :meth:`LossRun.put_aside`: the snapshot is taken while chunks wait in the
  queue (the worker stopped meanwhile), so after :meth:`LossRun.go_back` they
  are applied again: shipped before the loss, applied after it;
- :meth:`LossRun.go_back`: the worker stopped (holding a chunk or not), Redis is
  killed and started on the snapshot in the middle of a cycle, after its stat
  and before its shipment: a cycle observed before the loss is shipped after it.

What was written is read by a tap that follows the site stream without
de-duplication (an id that the SDK's stream drops as a duplicate is still
checked against its content; the tap has read everything before each loss,
since the worker, the stream's one writer, is stopped then), and gathered from
the whole stream at chosen moments; :meth:`LossRun.check` then checks what the
issue asks and returns the figures."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis
from rq import Queue

import jobtap
from jobtap.collector.cycle import Collector
from jobtap.collector.hoststate import FILENAME, HostState
from jobtap.collector.service import CollectorService
from jobtap.contract.chunk import PRIORITIES, Chunk
from jobtap.entries import resolve
from jobtap.keys import SiteKeys
from jobtap.replies import entries
from jobtap.sim import SimBackend
from jobtap.sim.localredis import RedisServer
from jobtap.workers.apply import Settings
from jobtap.workers.service import taken_unstarted
from sim.rig.epochs import Written, check_finals_against_truth, content
from sim.rig.redisloss import restart_empty, restart_from, snapshot
from sim.rig.wait import eventually

SITE = "loss"
K = SiteKeys(SITE)
BATCH = Settings().batch  # objects per apply script of `jobtap worker`


@dataclass
class Received:
    """What one consumer got: every change's id and event, in order."""

    ids: list[str] = field(default_factory=list)
    events: dict[str, bytes] = field(default_factory=dict)  # id -> content() of the first
    finals: set[str] = field(default_factory=set)  # job ids
    reused: list[str] = field(default_factory=list)  # ids that came with other content
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, change: jobtap.Change, *, real: bool = True) -> None:
        with self.lock:
            if real:
                self.ids.append(change.id)
                body = content(orjson.loads(change.json))
                if self.events.setdefault(change.id, body) != body:
                    self.reused.append(change.id)
            if change.final and change.kind == "job":
                self.finals.add(change.object_id)

    def has(self, ids: set[str]) -> bool:
        with self.lock:
            return ids <= set(self.events)


@dataclass
class Loss:
    """One loss, and what was in flight across it."""

    kind: str  # "empty" or "snapshot"
    in_hand: bool  # the worker held a chunk when it was stopped (applied again after)
    cut: int = 0  # the cycle observed before the loss and shipped after it (0: none)
    queued: list[tuple[int, int]] = field(default_factory=list)  # (cycle, objects) of
    # the chunks waiting when the worker went on after the loss


class StreamTap:
    """Follows the site stream from its start, every entry, without
    de-duplication, across Redis restarts (stream ids are times: what is written
    after a loss comes after the last entry read); each entry goes to
    ``written``, which checks it against its content."""

    def __init__(self, server: RedisServer, written: Written):
        self.server = server
        self.written = written
        self.pos = "0-0"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="stream tap", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        r = self.server.client()
        try:
            while not self.stopping.is_set():
                try:
                    reply = r.xread({K.events: self.pos}, count=1000, block=100)
                    got = resolve(r, entries(reply))
                except redis.RedisError:  # Redis is away: read on once it is back
                    self.stopping.wait(0.05)
                    continue
                for sid, fields in got:
                    if fields:  # None: its user's stream lost it (Redis lost data)
                        self.written.add(sid, orjson.loads(fields[b"event"]), strict=False)
                    self.pos = sid
        finally:
            r.close()

    def caught_up(self) -> bool:
        """Whether every entry the stream holds now was read."""
        r = self.server.client()
        try:
            last = r.xrevrange(K.events, count=1)
        finally:
            r.close()
        return not last or _sid(last[0][0].decode()) <= _sid(self.pos)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)


def _proc_state(pid: int) -> str:
    """The process's state letter (Linux: T once SIGSTOP took hold), "" if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0]


def _sid(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


class _Sim(SimBackend):
    """The simulated scheduler, with one place to act in the middle of a cycle:
    right after the job stat (the cycle has observed, and not shipped yet)."""

    after_stat: Callable[[], None] | None = None

    def stat_jobs(self) -> dict[str, Any]:
        natives = super().stat_jobs()
        act, self.after_stat = self.after_stat, None
        if act is not None:
            act()
        return natives


class _Service(CollectorService):
    """The collector's loop, with one place to act between two cycles (before
    the next one's epoch check)."""

    before_cycle: Callable[[], None] | None = None

    def run_one(self) -> bool:
        act, self.before_cycle = self.before_cycle, None
        if act is not None:
            act()
        return super().run_one()


class SupervisedWorker:
    """A real ``jobtap worker`` process, started again whenever it ends."""

    def __init__(self, server: RedisServer, log_path: Path):
        self.server = server
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] | None = None
        self.frozen: subprocess.Popen[bytes] | None = None
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

    def freeze(self, idle: Callable[[], bool] | None = None) -> None:
        """SIGSTOP the worker process of the moment: its connections stay open and
        a chunk in its hands stays there.  With ``idle``, only at a moment when
        ``idle()`` says it holds none (else it is let go and stopped again)."""

        def stopped() -> bool:
            proc = self.proc
            if proc is None or proc.poll() is not None:
                return False  # between two processes: the supervisor starts the next
            proc.send_signal(signal.SIGSTOP)
            eventually(lambda: _proc_state(proc.pid) in ("T", "t"), timeout=5, interval=0.001)
            if idle is None or idle():
                self.frozen = proc
                return True
            proc.send_signal(signal.SIGCONT)
            return False

        eventually(stopped, timeout=30, interval=0.005, what="the worker stopped")

    def thaw(self) -> None:
        """SIGCONT the process :meth:`freeze` stopped."""
        proc, self.frozen = self.frozen, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)

    def stop(self) -> int:
        self.stopping.set()
        self.thaw()
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
        nodes: int = 60,
        tick: float = 30.0,
        interval: float = 0.2,
        chunk_size: int = 120,
        wait_cycles: int = 15,
        strict: bool = True,
    ):
        self.wait_cycles = wait_cycles
        self.server = server
        self.workdir = workdir
        # chunk_size and nodes above the worker's batch: what is shipped again
        # after a loss goes out in chunks of several batches
        self.backend = _Sim(seed=seed, nodes=nodes, jobs=jobs, tick=tick)
        self.sim = self.backend.simulation
        # Every cycle a full stat: the check wants every ended job finalised by
        # the last stat, and purged ones are finalised by full stats only.
        collector = Collector(self.backend, server.client(), site=SITE, nodes_every=3,
                              chunk_size=chunk_size, reconcile_every=0)  # fmt: skip
        state = HostState.load(workdir / "collector" / FILENAME)
        self.svc = _Service(collector, interval=interval, max_backoff=1.0, state=state)
        self.collecting = threading.Thread(target=self.svc.run, name="collector", daemon=True)
        self.worker = SupervisedWorker(server, workdir / "worker.log")
        self.client = jobtap.Client(server.url, site=SITE, backoff=(0.05, 0.5))
        self.streamed = Received()
        self.subscribed = Received()
        self.written = Written(strict=strict)
        self.tap = StreamTap(server, self.written)
        self.losses: list[str] = []
        self.in_flight: list[Loss] = []
        self.rng = random.Random(seed)
        self.waited: dict[str, Any] = {}
        self._stream: Any = None
        self._threads: list[threading.Thread] = []

    # -- running -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the worker and both consumers (before anything is written: every
        event is theirs to get), two cycles, a wait() on a running job, and the
        collector's loop."""
        self.tap.start()
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
        """Redis killed and started empty between two cycles, while the worker,
        stopped between two chunks, still believes in the old epoch; it goes on
        once the collector has shipped everything again (chunks of several
        batches, the first it takes after the loss).  The collector is held at the
        start of its cycle meanwhile, so that the worker drains what was shipped
        and can be stopped waiting for more: behind a 0.2 s loop on a loaded
        machine it may otherwise hold a chunk every time it is looked at."""

        def between_cycles() -> None:
            self.worker.freeze(idle=self._worker_waiting)
            eventually(self.tap.caught_up, timeout=30, what="the tap read the stream")
            restart_empty(self.server)

        try:
            self._in_collector("before_cycle", between_cycles, timeout=90)
            self.losses.append("empty")
            self.cycles(1)  # it found the new epoch and shipped everything again
            self.in_flight.append(Loss("empty", False, queued=self._queued()))
        finally:
            self.worker.thaw()

    def put_aside(self) -> Path:
        """An RDB snapshot of now, taken while chunks wait in the queue (the
        worker stopped meanwhile: after :meth:`go_back` they are applied again),
        and what the stream holds at this moment."""
        self.worker.freeze()
        try:
            eventually(self._queued, timeout=30, what="a chunk waiting in the queue")
            aside = snapshot(self.server)
        finally:
            self.worker.thaw()
        self.written.gather(self.server.client(), K.events)
        return aside

    def go_back(self, aside: Path) -> None:
        """Redis killed and started on an older snapshot in the middle of a cycle
        (observed before the loss, shipped after), the worker stopped meanwhile
        (a chunk in its hands is applied again after the loss)."""
        self.worker.freeze()
        try:
            loss = Loss("snapshot", self._worker_busy())
            eventually(self.tap.caught_up, timeout=30, what="the tap read the stream")

            def lose() -> None:
                loss.cut = self.svc.collector.last_cycle  # the cycle being run
                restart_from(self.server, aside)

            self._in_collector("after_stat", lose)
            self.losses.append("snapshot")
            self.cycles(2)  # the cut cycle shipped, then the next found the new epoch
            loss.queued = self._queued()
            self.in_flight.append(loss)
        finally:
            self.worker.thaw()

    def _in_collector(self, where: str, action: Callable[[], None], timeout: float = 30) -> None:
        """Run ``action`` in the collector's thread at ``where`` of its next cycle
        (``before_cycle``, ``after_stat``) and wait until it ran."""
        done = threading.Event()
        failed: list[Exception] = []

        def act() -> None:
            try:
                action()
            except Exception as exc:  # noqa: BLE001 - raised again in the caller's thread
                failed.append(exc)
            finally:
                done.set()

        setattr(self.svc if where == "before_cycle" else self.backend, where, act)
        eventually(done.is_set, timeout=timeout, what=f"the collector at {where}")
        if failed:
            raise failed[0]

    def _queues(self, r: Any) -> list[Queue]:
        return [Queue(K.rq_queue(prio), connection=r) for prio in PRIORITIES]

    def _queued(self) -> list[tuple[int, int]]:
        """(cycle, objects) of every chunk waiting in the queues."""
        r = self.server.client()
        try:
            chunks = [Chunk.decode(job.args[0]) for q in self._queues(r) for job in q.get_jobs()]
        finally:
            r.close()
        return [(c.cycle, len(c.items)) for c in chunks]

    def _worker_waiting(self) -> bool:
        """Whether the worker is blocked in its BLPOP for the next chunk (so it holds
        none; its registry entry would come a moment after the BLPOP returned)."""
        r = self.server.client()
        try:
            clients = r.client_list()
        finally:
            r.close()
        return any(c.get("cmd") == "blpop" and "b" in c.get("flags", "") for c in clients)

    def _worker_busy(self) -> bool:
        """Whether the worker holds a chunk (rq's started registries)."""
        r = self.server.client()
        try:
            return any(q.started_job_registry.get_job_count(cleanup=False) for q in self._queues(r))
        finally:
            r.close()

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
        """No chunk queued, started, or taken by a worker killed before it
        started it (the next worker hands that one back)."""
        r = self.server.client()
        try:
            for q in self._queues(r):
                if q.count or q.started_job_registry.get_job_count(cleanup=False):
                    return False
                if taken_unstarted(q):
                    return False
            return True
        finally:
            r.close()

    def finish(self) -> None:
        """Stop the collector, let the worker apply everything, let both
        consumers catch up with the stream, then stop them."""
        self.svc.stop_event.set()
        if self.collecting.is_alive():
            self.collecting.join(30)
        try:
            eventually(self._drained, timeout=60, what="the queues drained")
            eventually(self.tap.caught_up, timeout=30, what="the tap read the stream")
            r = self.server.client()
            self.written.gather(r, K.events)
            now = {f[b"id"].decode() for _, f in r.xrange(K.events)}  # either form names it
            known = self.written.two_contents(2)  # what would keep a consumer from it
            for name, got in (("stream consumer", self.streamed), ("subscriber", self.subscribed)):
                what = f"the {name} caught up (ids with two contents: {known})"
                eventually(lambda g=got: g.has(now), timeout=30, what=what)
        finally:  # whatever happened, leave no process or thread behind
            if self._stream is not None:
                self._stream.close()
            self.tap.stop()
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
        two_contents = set(written.reused) | set(self.streamed.reused) | set(self.subscribed.reused)
        two_contents |= {
            eid
            for got in (self.streamed, self.subscribed)
            for eid, body in got.events.items()
            if eid in written.by_id and body != written.by_id[eid]
        }
        losses = self.in_flight
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
            "reused ids (written twice)": len(written.twice()),
            "ids with two contents": len(two_contents),
            "version gaps": len(written.version_gaps()),
            "ended jobs": len(ended),
            "ended without a final (subscriber)": len(ended - self.subscribed.finals),
            "wait() right": job is not None and job.state == truth.final_state,
            # what was in flight across the losses
            "chunks of several batches after a loss": sum(
                1 for loss in losses for _, n in loss.queued if n > BATCH
            ),
            "chunks shipped before a loss, applied after": sum(
                loss.in_hand + sum(1 for c, _ in loss.queued if loss.cut and c < loss.cut)
                for loss in losses
            ),
            "cycles observed before a loss, shipped after": sum(
                1 for loss in losses if any(c == loss.cut for c, _ in loss.queued)
            ),
        }

    def check(self) -> dict[str, Any]:
        """What the issue checks, asserted with details; the figures returned."""
        written = self.written
        assert not written.reused, f"ids with two contents: {written.two_contents()}"
        assert not written.twice(), f"ids written twice: {written.twice()[:5]}"
        written.check_versions()  # per object and epoch: 1, 2, 3...
        ids = written.ids
        for name, got in (("stream consumer", self.streamed), ("subscriber", self.subscribed)):
            missing = ids - set(got.events)
            assert not missing, f"{name} never got {len(missing)} events: {sorted(missing)[:5]}"
            assert not got.reused, f"{name} got ids with two contents: {got.reused[:5]}"
            for eid, body in got.events.items():  # no id names two different events
                if eid in written.by_id:
                    assert body == written.by_id[eid], f"{name}: {eid} is another event"
        check_finals_against_truth(written, self.sim, self.sim.now)
        figures = self.figures()
        assert figures["ended without a final (subscriber)"] == 0, figures
        assert figures["wait() right"], (self.waited, self.sim.truth[self.waited["job"]])
        return figures
