"""A simulated PBS cluster: seeded, deterministic, in virtual time.

The simulation is the embedded default backend of the demo and the load
generator of the benchmarks.  It renders its jobs, nodes and queues exactly as
OpenPBS 23.06 prints them with ``qstat -f -F json``, ``pbsnodes -av -F json``
and ``qstat -Q -f -F json`` (see ``tests/fixtures/pbs/``), so that whatever
parses a real server parses the simulation unchanged.

This module holds the model: the :class:`Simulation` with its clock and
events, submissions, scheduler, jobs, arrays and nodes.  The records and
documents are built by :mod:`jobtap.sim.render`, in the words of
:mod:`jobtap.sim.pbs`; the ground truth is :mod:`jobtap.sim.truth`, the
faults :mod:`jobtap.sim.faults`.

Model
-----
* Jobs arrive as a Poisson process (``arrival_rate`` submissions per virtual
  second, by default what the cluster can run) from a dozen users, a few of
  them heavy.  Users throttle themselves: the rate is scaled by
  ``1 + 4 * (1 - live / target_jobs)`` (clamped to 0.1..5), which keeps the
  live count within about 20% of ``target_jobs`` whatever the exact
  throughput is.  The simulation starts warm: ``initial_jobs`` jobs submitted
  over the past hours, the running ones a length-biased sample part-way
  through their run, as on a cluster that has been busy for a while.
* A job asks for cpus on one node or for whole nodes (multi-node jobs go to
  ``bigq``), a walltime, sometimes memory.  Its fate is drawn at submission:
  it exits 0 (most), exits non-zero (``p_fail``), or overruns its walltime and
  is killed (``p_walltime``: Exit_status -29, substate 93).  Users also hold
  (``qhold``) and release or delete queued jobs, submit held (``qsub -h``) or
  for later (``qsub -a``: state W), and delete running jobs (``qdel``:
  Exit_status 271, substate 91).
* Some submissions are job arrays of 2-8 subjobs (``N[].simhost`` and
  ``N[i].simhost``).  As in OpenPBS, a subjob that has not started is shown
  by ``qstat -t`` as a copy of its parent; it gets ``array_id`` and
  ``array_index`` when it starts.  Simplification: a finished subjob leaves
  the live list at once (OpenPBS shows it as ``X`` until the whole array is
  done).  The parent is Q until its first subjob starts, then B, and finishes
  when all its subjobs have, with PBS's array Exit_status: 0 when every
  subjob exited 0, 1 when one did not, 2 when the array was deleted (its
  substate is then 91).
* The scheduler runs at most every ``sched_interval`` seconds after a change:
  FIFO over the queued jobs, best-fit placement on nodes, and EASY backfill:
  the first job that does not fit becomes the top job and reserves the nodes
  that are closest to fitting it; later jobs fill the rest.
* Running jobs report ``resources_used`` every ``usage_interval`` seconds
  (not every cycle), spend 1-4 s in E (exiting), then finish (F) and leave
  the live list.  Their history record is kept for a fraction
  ``history_keep`` of them (the rest are purged, as if the server forgot
  them) and for ``history_duration`` seconds.
* Nodes fail (``down``) or are taken offline at a rate of one per
  ``node_mtbf`` seconds per node and come back after ``node_repair``
  seconds; the jobs running on them are killed (Exit_status 265, i.e.
  SIGKILL, substate 93: failed).

``truth`` holds, for every job ever submitted (it is never pruned), the
normalised states it went through, its final state and exit status: the
ground truth that tests compare the collector's view with.  ``stats`` counts
the events.  ``fault()`` makes the next stat(s) of a
:class:`~jobtap.sim.backend.SimBackend` misbehave without changing the
simulation.

Everything random comes from one ``random.Random(seed)`` and the clock is
virtual: the same seed and the same calls give byte-identical output.
"""

from __future__ import annotations

import gc
import heapq
import math
import random
from bisect import bisect
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any

from jobtap.sim import render
from jobtap.sim.faults import FaultQueue
from jobtap.sim.pbs import (
    EXIT_NODE_FAIL,
    EXIT_QDEL,
    EXIT_WALLTIME,
    FAIL_CODES,
    SERVER,
    SUB_BEGUN,
    SUB_EXITING,
    SUB_FAILED,
    SUB_FINISHED,
    SUB_HELD,
    SUB_QUEUED,
    SUB_RUNNING,
    SUB_TERMINATED,
    hms,
    pbs_time,
    ranges,
    run_time_label,
)
from jobtap.sim.truth import JobTruth, pbs_state

__all__ = ["DEFAULT_USERS", "START", "Simulation"]

START = 1795262400.0  # 2026-11-21T12:00:00Z
DEFAULT_USERS = (
    "alice", "bob", "carol", "dave", "erin", "frank",
    "grace", "heidi", "ivan", "judy", "mallory", "oscar",
)  # fmt: skip
GROUPS = ("physics", "chem", "bio", "astro", "climate", "ml")
JOB_NAMES = (
    "md_run", "train", "cfd", "assemble", "postproc", "sweep",
    "relax", "bench", "qc_opt", "render", "align", "mcmc",
)  # fmt: skip

# Walltime requests (seconds) and their weights.
WALLTIMES = ((900, 10), (1800, 20), (3600, 30), (7200, 20), (14400, 15), (43200, 5))
BIG_WALLTIMES = ((3600, 20), (7200, 30), (14400, 30), (43200, 20))

# Kinds of jobs.
_REGULAR, _PARENT, _SUB = 0, 1, 2
# How a job ended (set when it leaves R, or when it is cancelled before starting).
_END_OK, _END_FAIL, _END_WALLTIME, _END_QDEL, _END_NODE, _END_CANCEL = range(6)
_END_SUBSTATE = {
    _END_OK: SUB_FINISHED,
    _END_FAIL: SUB_FAILED,
    _END_WALLTIME: SUB_FAILED,
    _END_QDEL: SUB_TERMINATED,
    _END_NODE: SUB_FAILED,
    _END_CANCEL: SUB_TERMINATED,
}
_END_SUFFIX = {
    _END_OK: " and finished",
    _END_FAIL: " and failed",
    _END_WALLTIME: " and exceeded resource walltime",
    _END_NODE: " and failed",
    _END_CANCEL: " and terminated",
}
# Scheduler comments on jobs that cannot run.
_C_TOP, _C_CONFLICT, _C_SHORT, _C_NEVER = range(1, 5)
# Events.
(
    _EV_ARRIVAL,
    _EV_SCHED,
    _EV_END,
    _EV_FINISH,
    _EV_USAGE,
    _EV_HOLD,
    _EV_RELEASE,
    _EV_DELETE_PENDING,
    _EV_DELETE_RUNNING,
    _EV_DELETE_ARRAY,
    _EV_ELIGIBLE,
    _EV_OUTAGE,
    _EV_NODE_UP,
) = range(13)


# Internal objects ----------------------------------------------------------------------
class _Job:
    __slots__ = (
        "id", "num", "order", "kind", "user", "queue", "native", "version", "truth",
        "parent", "subjobs", "index", "step", "ncpus", "nodect", "chunk_mem_kb",
        "walltime", "runtime", "outcome", "exit_code", "eff", "peak_kb", "alloc",
        "ctime", "stime", "token", "comment_kind", "never", "deleted", "started",
        "finished", "end_kind", "submit_host",
    )  # fmt: skip

    def __init__(self, job_id: str, num: int, order: tuple[int, int], kind: int, user: str):
        self.id = job_id
        self.num = num
        self.order = order
        self.kind = kind
        self.user = user
        self.queue = "workq"
        self.native: dict[str, Any] = {}
        self.version = 0  # bumped each time the record changes
        self.truth: JobTruth = None  # type: ignore[assignment]  # set by _register
        self.parent: _Job | None = None
        self.subjobs: list[_Job] = []
        self.index = -1
        self.step = 1
        self.ncpus = 1
        self.nodect = 1
        self.chunk_mem_kb = 0
        self.walltime = 3600
        self.runtime = 60.0
        self.outcome = _END_OK
        self.exit_code = 0
        self.eff = 1.0
        self.peak_kb = 0
        self.alloc: list[tuple[int, int]] = []
        self.ctime = 0.0
        self.stime = 0.0
        self.token = 0
        self.comment_kind = 0
        self.never = False
        self.deleted = False
        self.started = False
        self.finished = False
        self.end_kind = -1
        self.submit_host = SERVER


class _Node:
    __slots__ = (
        "name", "idx", "ncpus", "mem_kb", "free", "mem_used_kb", "jobs", "down",
        "state", "comment", "last_change", "last_used",
    )  # fmt: skip

    def __init__(self, name: str, idx: int, ncpus: int, mem_kb: int, t: int):
        self.name = name
        self.idx = idx
        self.ncpus = ncpus
        self.mem_kb = mem_kb
        self.free = ncpus
        self.mem_used_kb = 0
        self.jobs: dict[str, int] = {}
        self.down = False
        self.state = "free"  # "free", "job-busy", "down", "offline"
        self.comment: str | None = None
        self.last_change = t
        self.last_used = 0


# The simulation ------------------------------------------------------------------------
class Simulation:
    """A PBS cluster in virtual time (see the module docstring for the model)."""

    def __init__(
        self,
        *,
        seed: int = 1,
        nodes: int = 200,
        cpus_per_node: int = 16,
        mem_per_node_gb: int = 256,
        initial_jobs: int = 3000,
        users: Sequence[str] = DEFAULT_USERS,
        arrival_rate: float | None = None,
        target_jobs: int | None = None,
        start: float = START,
        history_keep: float = 0.98,
        history_duration: float = 86400.0,
        usage_interval: float = 60.0,
        sched_interval: float = 10.0,
        node_mtbf: float = 240_000.0,
        node_repair: tuple[float, float] = (600.0, 2400.0),
        p_array: float = 0.04,
        p_fail: float = 0.06,
        p_walltime: float = 0.03,
        p_hold: float = 0.03,
        p_submit_held: float = 0.02,
        p_wait: float = 0.02,
        p_qdel_queued: float = 0.03,
        p_qdel_running: float = 0.02,
        p_never: float = 0.002,
        server: str = SERVER,
    ) -> None:
        """``arrival_rate=None`` derives the rate the cluster can sustain from
        its size and the job mix; ``target_jobs=None`` is ``initial_jobs``.
        ``node_mtbf <= 0`` disables node outages."""
        if nodes < 1 or cpus_per_node < 1:
            raise ValueError("a cluster needs at least one node and one cpu per node")
        if not users:
            raise ValueError("users must not be empty")
        if not 0.0 <= history_keep <= 1.0:
            raise ValueError("history_keep is a fraction between 0 and 1")
        if usage_interval <= 0 or sched_interval < 0:
            raise ValueError("usage_interval must be > 0 and sched_interval >= 0")
        self.seed = seed
        self.rng = random.Random(seed)
        self.server = server
        self.cpus_per_node = cpus_per_node
        self.mem_per_node_gb = mem_per_node_gb
        self.mem_per_node_kb = mem_per_node_gb * 1024 * 1024
        self.users = tuple(users)
        self.history_keep = history_keep
        self.history_duration = history_duration
        self.usage_interval = usage_interval
        self.sched_interval = sched_interval
        self.node_mtbf = node_mtbf
        self.node_repair = node_repair
        self.p_array = p_array
        self.p_fail = p_fail
        self.p_walltime = p_walltime
        self.p_hold = p_hold
        self.p_submit_held = p_submit_held
        self.p_wait = p_wait
        self.p_qdel_queued = p_qdel_queued
        self.p_qdel_running = p_qdel_running
        self.p_never = p_never
        self.target_jobs = target_jobs if target_jobs is not None else max(initial_jobs, 1)

        self.truth: dict[str, JobTruth] = {}
        self.stats: Counter[str] = Counter()
        self._now = float(start)
        self.start_time = float(start)
        self._heap: list[tuple[float, int, int, Any, int]] = []
        self._seq = 0
        self._next_num = 1
        self._live: dict[str, _Job] = {}
        # Ids of jobs whose state changed, as a scheduler hook would report them
        # (PBS hooks, Slurm prolog/epilog): what follow mode is poked with.
        self._pokes: list[str] = []
        self._pending: dict[str, _Job] = {}  # Q jobs the scheduler may start, FIFO
        self._uncommented: dict[str, _Job] = {}  # pending jobs the scheduler has not judged
        self._history: dict[str, _Job] = {}
        self._history_order: deque[tuple[float, str]] = deque()
        # (mtime in whole seconds, job id) of every record change, oldest first:
        # what ``qselect -x -t m.gt.T`` looks at (see changed_since).
        self._mtime_log: deque[tuple[int, str]] = deque()
        self.mtime_log_keep = 6 * 3600.0
        self._faults = FaultQueue()
        self._sched_pending = False
        self._last_sched = -math.inf
        self._warm = False

        self._init_job_mix(nodes)
        self._init_nodes(nodes)
        self.arrival_rate = arrival_rate if arrival_rate is not None else self._sustainable_rate()

        self._warm_start(initial_jobs)
        if self.arrival_rate > 0:
            self._push(self._now + self._arrival_gap(), _EV_ARRIVAL, None, 0)
        if node_mtbf > 0:
            self._push(self._now + self._outage_gap(), _EV_OUTAGE, None, 0)

    def _init_job_mix(self, nodes: int) -> None:
        """The tables the submissions draw from: users, job shapes, walltimes."""
        cpn = self.cpus_per_node
        # Users: a few heavy, many light (Zipf-like weights), each in a group.
        weights = [1.0 / (i + 1) ** 0.8 for i in range(len(self.users))]
        self._user_cum = list(_cumulate(weights))
        self._group = {u: GROUPS[i % len(GROUPS)] for i, u in enumerate(self.users)}
        self._env_cache: dict[tuple[str, str, str], dict[str, str]] = {}

        # Job shapes: (ncpus, nodect, weight).  Whole-node multi-node jobs need
        # enough nodes to be worth it.
        shapes = [(n, 1, w) for n, w in ((1, 30), (2, 12), (4, 18), (8, 14)) if n < cpn]
        shapes.append((cpn, 1, 10))
        if nodes >= 8:
            shapes += [(2 * cpn, 2, 5), (4 * cpn, 4, 2)]
        self._shapes = [(n, k) for n, k, _ in shapes]
        self._shape_cum = list(_cumulate([w for *_, w in shapes]))
        self._wall_cum = list(_cumulate([w for _, w in WALLTIMES]))
        self._bigwall_cum = list(_cumulate([w for _, w in BIG_WALLTIMES]))
        self._wall_biased_cum = list(_cumulate([t * w for t, w in WALLTIMES]))
        self._bigwall_biased_cum = list(_cumulate([t * w for t, w in BIG_WALLTIMES]))

    def _init_nodes(self, nodes: int) -> None:
        """The nodes, all up and free, and the index of free cpus."""
        width = max(3, len(str(nodes)))
        t0 = int(self._now)
        self._nodes = [
            _Node(f"node{i + 1:0{width}d}", i, self.cpus_per_node, self.mem_per_node_kb, t0)
            for i in range(nodes)
        ]
        self.total_cpus = nodes * self.cpus_per_node
        # Up nodes by number of free cpus; dicts keep a deterministic order.
        self._buckets: list[dict[int, None]] = [{} for _ in range(self.cpus_per_node + 1)]
        for node in self._nodes:
            self._buckets[node.free][node.idx] = None
        self._free_total = self.total_cpus

    def _warm_start(self, initial_jobs: int) -> None:
        """A cluster that has been busy for hours: ``initial_jobs`` records
        submitted over the past hours, then one scheduling cycle."""
        self._warm = True
        with _gc_paused():
            while len(self._live) < initial_jobs:
                self._submit(warm=True, room=initial_jobs - len(self._live))
            self._schedule()
        self._warm = False
        self._sched_pending = False

    @classmethod
    def bench(cls, jobs: int = 100_000, nodes: int | None = None, **options: Any) -> Simulation:
        """A cluster with ``jobs`` live jobs (mostly queued, held and running)
        for benchmarks: one node per 20 jobs unless ``nodes`` is given."""
        if nodes is None:
            nodes = max(8, jobs // 20)
        return cls(nodes=nodes, initial_jobs=jobs, **options)

    # Clock ---------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """The virtual time, in seconds since the epoch."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the virtual clock ``seconds`` forward, processing every event
        due on the way in time order."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        until = self._now + seconds
        heap = self._heap
        while heap and heap[0][0] <= until:
            t, _seq, kind, obj, token = heapq.heappop(heap)
            self._now = t
            self._dispatch(kind, obj, token)
        self._now = until
        self._expire_history()
        self._trim_mtime_log()

    def _push(self, t: float, kind: int, obj: Any, token: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, obj, token))

    def _dispatch(self, kind: int, obj: Any, token: int) -> None:
        if kind == _EV_USAGE:
            if obj.token == token and obj.native["job_state"] == "R":
                self._update_usage(obj)
                self._push(self._next_usage_time(), _EV_USAGE, obj, token)
        elif kind == _EV_ARRIVAL:
            self._submit()
            self._push(self._now + self._arrival_gap(), _EV_ARRIVAL, None, 0)
        elif kind == _EV_SCHED:
            self._sched_pending = False
            self._last_sched = self._now
            self._schedule()
        elif kind == _EV_END:
            if obj.token == token and obj.native["job_state"] == "R":
                if obj.outcome == _END_OK:
                    self._begin_exit(obj, _END_OK, 0)
                elif obj.outcome == _END_FAIL:
                    self._begin_exit(obj, _END_FAIL, obj.exit_code)
                else:
                    self._begin_exit(obj, _END_WALLTIME, EXIT_WALLTIME)
        elif kind == _EV_FINISH:
            if obj.token == token and not obj.finished:
                self._finish(obj)
        elif kind == _EV_HOLD:
            if obj.native["job_state"] == "Q" and obj.id in self._pending:
                self._hold(obj)
        elif kind == _EV_RELEASE:
            if obj.token == token and obj.native["job_state"] == "H":
                self._release(obj)
        elif kind == _EV_DELETE_PENDING:
            if obj.native["job_state"] in ("Q", "H", "W") and not obj.finished:
                self._cancel(obj)
        elif kind == _EV_DELETE_RUNNING:
            if obj.token == token and obj.native["job_state"] == "R":
                self._begin_exit(obj, _END_QDEL, EXIT_QDEL)
        elif kind == _EV_DELETE_ARRAY:
            if not obj.finished:
                self._delete_array(obj)
        elif kind == _EV_ELIGIBLE:
            if obj.native["job_state"] == "W" and not obj.finished:
                self._make_queued(obj)
        elif kind == _EV_OUTAGE:
            self._outage()
            self._push(self._now + self._outage_gap(), _EV_OUTAGE, None, 0)
        elif kind == _EV_NODE_UP:
            self._node_up(obj)

    # Rates ---------------------------------------------------------------------------
    def _sustainable_rate(self) -> float:
        """Submissions per second that keep the cpus busy (~97%, what the
        scheduler achieves) with this job mix: cpus divided by the expected
        cpu-seconds of a submission.  The job shapes are drawn from a private
        generator so that the main stream is untouched."""
        rng = random.Random(0x5EED)
        samples = 4000
        cpu_walltime = 0.0
        for _ in range(samples):
            ncpus, nodect = _pick(rng, self._shapes, self._shape_cum)
            walltime = self._draw_walltime(rng, nodect)
            count = rng.randint(2, 8) if rng.random() < self.p_array else 1
            cpu_walltime += count * ncpus * walltime
        # Expected share of its walltime a job runs (see _plan_run), less the
        # jobs deleted before they start and the runs cut short by qdel.
        p_ok = max(0.0, 1.0 - self.p_fail - self.p_walltime)
        share = self.p_fail * 0.255 + self.p_walltime + p_ok * 0.5
        share *= 1.0 - self.p_qdel_queued - 0.2 * (self.p_hold + self.p_submit_held)
        share *= 1.0 - 0.5 * self.p_qdel_running
        return 0.97 * self.total_cpus / (share * cpu_walltime / samples)

    def _draw_walltime(self, rng: random.Random, nodect: int) -> int:
        if nodect > 1:
            return _pick(rng, BIG_WALLTIMES, self._bigwall_cum)[0]
        return _pick(rng, WALLTIMES, self._wall_cum)[0]

    def _arrival_gap(self) -> float:
        factor = min(5.0, max(0.1, 1.0 + 4.0 * (1.0 - len(self._live) / self.target_jobs)))
        return self.rng.expovariate(self.arrival_rate * factor)

    def _outage_gap(self) -> float:
        return self.rng.expovariate(len(self._nodes) / self.node_mtbf)

    def _next_usage_time(self) -> float:
        return self._now + self.usage_interval * self.rng.uniform(1.0, 1.2)

    # Submission ----------------------------------------------------------------------
    # One qsub draws from the seeded stream in this order: the request
    # (_draw_qsub), then the fate of each record it makes (_plan_run), then
    # what its user will do to it later (_queue_job, _queue_array).
    def _submit(self, *, warm: bool = False, room: int | None = None) -> None:
        """One ``qsub``: a job, or a job array and its subjobs (an array takes
        at most ``room`` records).  ``warm`` backdates it (warm start)."""
        qsub = self._draw_qsub(warm, room)
        job = self._new_job(qsub)
        if qsub.is_array:
            self._queue_array(job, qsub)
        else:
            self._queue_job(job, qsub)

    def _draw_qsub(self, warm: bool, room: int | None) -> render.Qsub:
        """Draw what a user asks for: who, when, the job's shape, its options,
        an array's indices and a waiting job's ``-a`` time."""
        rng = self.rng
        user = _pick(rng, self.users, self._user_cum)
        num = self._next_num
        self._next_num += 1
        ctime = self._now - rng.uniform(0.0, 8 * 3600.0) if warm else self._now
        is_array = rng.random() < self.p_array and (room is None or room >= 3)
        never = not is_array and rng.random() < self.p_never
        ncpus, nodect, walltime, mem_gb = self._draw_shape(never)
        name = rng.choice(JOB_NAMES)
        priority = rng.choice((10, 50, 100, -10)) if rng.random() < 0.1 else 0
        account = f"proj-{self._group[user]}" if rng.random() < 0.3 else None
        held = not is_array and rng.random() < self.p_submit_held
        waiting = not is_array and not held and rng.random() < self.p_wait
        indices = self._draw_indices(room) if is_array else []
        exec_at = self._draw_exec_at() if waiting else 0
        return render.Qsub(
            num=num,
            user=user,
            group=self._group[user],
            host=self.server,  # jobs are submitted on the server host, as in the fixtures
            ctime=ctime,
            name=name,
            queue="bigq" if nodect > 1 else "workq",
            ncpus=ncpus,
            nodect=nodect,
            walltime=walltime,
            mem_gb=mem_gb,
            priority=priority,
            account=account,
            held=held,
            waiting=waiting,
            never=never,
            indices=indices,
            exec_at=exec_at,
        )

    def _draw_shape(self, never: bool) -> tuple[int, int, int, int]:
        """``(ncpus, nodect, walltime, mem_gb)``: the resources a job asks for
        (mem_gb 0: no memory request).  A job that can ``never`` run asks for
        more cpus than a node has."""
        rng = self.rng
        if never:
            ncpus, nodect = 2 * self.cpus_per_node, 1
        else:
            ncpus, nodect = _pick(rng, self._shapes, self._shape_cum)
        walltime = self._draw_walltime(rng, nodect)
        chunk = ncpus // nodect
        mem_gb = (
            min(chunk * rng.choice((1, 2, 4)), self.mem_per_node_gb) if rng.random() < 0.4 else 0
        )
        return ncpus, nodect, walltime, mem_gb

    def _draw_indices(self, room: int | None) -> list[int]:
        """An array's subjob indices: 2-8 of them (fewer than ``room``),
        ``1-N`` or, one time in five, ``0-M:5``."""
        rng = self.rng
        count = rng.randint(2, 8)
        if room is not None:
            count = min(count, room - 1)
        step, first = (5, 0) if rng.random() < 0.2 else (1, 1)
        return [first + i * step for i in range(count)]

    def _draw_exec_at(self) -> int:
        """``qsub -a``: a time 5 to 60 minutes ahead, on the minute."""
        return (int(self._now + self.rng.uniform(300.0, 3600.0)) // 60 + 1) * 60

    def _new_job(self, q: render.Qsub) -> _Job:
        """The job (or array parent) a qsub makes, with its record, registered."""
        job_id = f"{q.num}[].{self.server}" if q.is_array else f"{q.num}.{self.server}"
        variables = self._environment(q.user, q.queue, q.host)
        job = _Job(job_id, q.num, (q.num, -1), _PARENT if q.is_array else _REGULAR, q.user)
        job.queue = q.queue
        job.native = render.job_record(q, self.server, variables)
        job.ctime = q.ctime
        job.ncpus = q.ncpus
        job.nodect = q.nodect
        job.chunk_mem_kb = q.mem_gb * 1024 * 1024
        job.walltime = q.walltime
        job.never = q.never
        job.submit_host = q.host
        job.step = q.step
        self._register(job, [])
        self.stats["submitted"] += 1
        return job

    def _queue_job(self, job: _Job, q: render.Qsub) -> None:
        """Plan a job's run and put it where its options say (held, waiting or
        queued), with what its user will do to it later: release or delete a
        held job, hold or delete a queued one."""
        rng = self.rng
        now = self._now
        self._plan_run(job)
        if q.never:
            job.truth.tags.append("never")
            self._push(now + rng.uniform(600.0, 3600.0), _EV_DELETE_PENDING, job, 0)
        if q.held:
            job.truth.tags.append("held")
            self.stats["held"] += 1
            self._plan_after_hold(job)
        elif q.waiting:
            job.truth.tags.append("waiting")
            self._push(float(q.exec_at), _EV_ELIGIBLE, job, 0)
        else:
            self._enqueue(job)
            if rng.random() < self.p_hold:
                self._push(now + rng.uniform(30.0, 3600.0), _EV_HOLD, job, 0)
        if not q.never and rng.random() < self.p_qdel_queued:
            self._push(now + rng.uniform(60.0, 3 * 3600.0), _EV_DELETE_PENDING, job, 0)

    def _queue_array(self, parent: _Job, q: render.Qsub) -> None:
        """Make an array's subjobs, each with its own planned run, and queue
        them; one array in twenty is deleted (``qdel N[]``) later."""
        rng = self.rng
        self.stats["arrays"] += 1
        parent.truth.tags.append("array")
        for index in q.indices:
            parent.subjobs.append(self._new_subjob(parent, index))
        self._update_parent(parent)
        for sub in parent.subjobs:
            self._register(sub, ["subjob"])
            sub.truth.array_parent = parent.id
            self._enqueue(sub)
        if rng.random() < 0.05:
            self._push(self._now + rng.uniform(300.0, 3 * 3600.0), _EV_DELETE_ARRAY, parent, 0)

    def _new_subjob(self, parent: _Job, index: int) -> _Job:
        """Subjob ``index`` of an array, its run planned (not registered yet:
        its parent's counts come first)."""
        num = parent.num
        sub = _Job(f"{num}[{index}].{self.server}", num, (num, index), _SUB, parent.user)
        sub.queue = parent.queue
        sub.parent = parent
        sub.index = index
        sub.ctime = parent.ctime
        sub.ncpus = parent.ncpus
        sub.nodect = parent.nodect
        sub.chunk_mem_kb = parent.chunk_mem_kb
        sub.walltime = parent.walltime
        sub.submit_host = parent.submit_host
        self._plan_run(sub)
        return sub

    def _environment(self, user: str, queue: str, host: str) -> dict[str, str]:
        """Variable_List, shared by the internal records of one user, queue and
        submit host: it never changes, and every rendering copies it."""
        key = (user, queue, host)
        env = self._env_cache.get(key)
        if env is None:
            env = self._env_cache[key] = render.environment(user, queue, host)
        return env

    def _plan_run(self, job: _Job) -> None:
        """Draw how the job will end if nobody interferes, and how it uses
        the machine while it runs."""
        rng = self.rng
        r = rng.random()
        if r < self.p_fail:
            job.outcome = _END_FAIL
            job.exit_code = rng.choice(FAIL_CODES)
            job.runtime = max(5.0, job.walltime * rng.uniform(0.01, 0.5))
        elif r < self.p_fail + self.p_walltime:
            job.outcome = _END_WALLTIME
            job.runtime = float(job.walltime)
        else:
            job.outcome = _END_OK
            job.runtime = max(5.0, job.walltime * rng.uniform(0.05, 0.95))
        job.eff = rng.uniform(0.5, 1.0)
        if job.chunk_mem_kb:
            job.peak_kb = int(job.chunk_mem_kb * job.nodect * rng.uniform(0.2, 0.95))
        else:
            job.peak_kb = int(job.ncpus * rng.uniform(50_000, 2_000_000))

    def _register(self, job: _Job, tags: list[str]) -> None:
        truth = JobTruth(job.id, job.user, [(self._now, pbs_state(job.native))], tags=tags)
        job.truth = truth
        self.truth[job.id] = truth
        self._live[job.id] = job
        self._pokes.append(job.id)  # like PBS's queuejob hook
        self._mtime_log.append((int(self._now), job.id))

    def _note(self, job: _Job) -> None:
        """Record a state change in the ground truth."""
        state = pbs_state(job.native)
        truth = job.truth
        if truth.transitions[-1][1] != state:
            truth.transitions.append((self._now, state))
            self._pokes.append(job.id)

    def _touch(self, job: _Job) -> None:
        """The record changed: stamp mtime and bump its version."""
        job.native["mtime"] = pbs_time(int(self._now))
        job.version += 1
        self._mtime_log.append((int(self._now), job.id))
        if job.kind == _PARENT:
            self._sync_placeholders(job)

    # Queueing ------------------------------------------------------------------------
    def _enqueue(self, job: _Job) -> None:
        self._pending[job.id] = job
        if job.comment_kind == 0:
            self._uncommented[job.id] = job
        self._want_schedule()

    def _unqueue(self, job: _Job) -> None:
        self._pending.pop(job.id, None)
        self._uncommented.pop(job.id, None)

    def _want_schedule(self) -> None:
        if self._sched_pending or self._warm:
            return
        self._sched_pending = True
        self._push(max(self._now, self._last_sched + self.sched_interval), _EV_SCHED, None, 0)

    def _make_queued(self, job: _Job) -> None:
        """W -> Q: its execution time has come."""
        native = job.native
        native["job_state"] = "Q"
        native["substate"] = SUB_QUEUED
        native["etime"] = pbs_time(int(self._now))
        self._touch(job)
        self._note(job)
        self._enqueue(job)

    def _hold(self, job: _Job) -> None:
        """``qhold``: Q -> H, released or deleted later."""
        self._unqueue(job)
        job.token += 1
        native = job.native
        native["job_state"] = "H"
        native["substate"] = SUB_HELD
        native["Hold_Types"] = "u"
        self._touch(job)
        self._note(job)
        job.truth.tags.append("held")
        self.stats["held"] += 1
        self._plan_after_hold(job)

    def _plan_after_hold(self, job: _Job) -> None:
        later = self._now + self.rng.uniform(120.0, 3600.0)
        if self.rng.random() < 0.8:
            self._push(later, _EV_RELEASE, job, job.token)
        else:
            self._push(later, _EV_DELETE_PENDING, job, 0)

    def _release(self, job: _Job) -> None:
        """``qrls``: H -> Q."""
        job.token += 1
        native = job.native
        native["job_state"] = "Q"
        native["substate"] = SUB_QUEUED
        native["Hold_Types"] = "n"
        native["etime"] = pbs_time(int(self._now))
        self._touch(job)
        self._note(job)
        job.truth.tags.append("released")
        self.stats["released"] += 1
        self._enqueue(job)

    # Scheduling ----------------------------------------------------------------------
    def _schedule(self) -> None:
        """One scheduling cycle: FIFO, best fit, EASY backfill around one top job."""
        pending = self._pending
        if not pending:
            return
        reserved: set[int] = set()
        free = self._free_total  # cpus free on up, unreserved nodes
        top: _Job | None = None
        for job in list(pending.values()):
            if free <= 0 and top is not None:
                break
            if job.never:
                self._comment_blocked(job, _C_NEVER, free)
                continue
            need = job.ncpus
            if need <= free:
                alloc = self._fit(job, reserved)
                if alloc is not None:
                    self._start(job, alloc)
                    free -= need
                    continue
            if top is None:
                top = job
                reserved = self._reserve(job)
                free -= sum(self._nodes[i].free for i in reserved)
                self._comment_blocked(job, _C_TOP, free)
            elif job.comment_kind == 0:
                self._comment_blocked(job, _C_CONFLICT if need <= free else _C_SHORT, free)
        for job in list(self._uncommented.values()):
            kind = _C_NEVER if job.never else _C_CONFLICT if job.ncpus <= free else _C_SHORT
            self._comment_blocked(job, kind, free)

    def _fit(self, job: _Job, reserved: set[int]) -> list[tuple[int, int]] | None:
        buckets = self._buckets
        cpn = self.cpus_per_node
        if job.nodect == 1:
            if job.ncpus > cpn:
                return None
            for free in range(job.ncpus, cpn + 1):
                for idx in buckets[free]:
                    if idx not in reserved:
                        return [(idx, job.ncpus)]
            return None
        chosen = list(islice((i for i in buckets[cpn] if i not in reserved), job.nodect))
        if len(chosen) < job.nodect:
            return None
        return [(idx, cpn) for idx in chosen]

    def _reserve(self, job: _Job) -> set[int]:
        """The nodes the top job will get first: the ones with most free cpus."""
        chosen: list[int] = []
        for free in range(self.cpus_per_node, -1, -1):
            for idx in self._buckets[free]:
                chosen.append(idx)
                if len(chosen) == job.nodect:
                    return set(chosen)
        return set(chosen)

    def _comment_blocked(self, job: _Job, kind: int, free: int) -> None:
        """Tell why a job does not run, as the PBS scheduler does in its
        comment: once, and again only when the job becomes the top job."""
        self._uncommented.pop(job.id, None)
        if job.kind == _SUB:
            # A waiting subjob is shown as a copy of its parent: the comment
            # goes to the parent, and only until the array has begun.
            job.comment_kind = job.comment_kind or kind
            job = job.parent  # type: ignore[assignment]
            if job.native["job_state"] != "Q":
                return
        if job.comment_kind == kind or (kind != _C_TOP and job.comment_kind):
            return
        job.comment_kind = kind
        if kind == _C_TOP:
            if job.nodect > 1:
                text = "Not Running: Not enough free nodes available"
            else:
                text = (
                    "Not Running: Insufficient amount of resource: ncpus "
                    f"(R: {job.ncpus} A: {max(free, 0)} T: {self.total_cpus})"
                )
        elif kind == _C_CONFLICT:
            text = "Not Running: Job would conflict with reservation or top job"
        elif kind == _C_SHORT:
            text = (
                "Not Running: Insufficient amount of resource: ncpus "
                f"(R: {job.ncpus} A: {max(free, 0)} T: {self.total_cpus})"
            )
        else:
            text = (
                "Can Never Run: Insufficient amount of resource: ncpus "
                f"(R: {job.ncpus} A: {self.cpus_per_node} T: {self.total_cpus})"
            )
        if job.native.get("comment") != text:
            job.native["comment"] = text
            self._touch(job)

    # Running -------------------------------------------------------------------------
    def _set_free(self, node: _Node, free: int) -> None:
        old = node.free
        node.free = free
        if node.down:
            return
        del self._buckets[old][node.idx]
        self._buckets[free][node.idx] = None
        self._free_total += free - old
        if (old == 0) != (free == 0):
            node.state = "job-busy" if free == 0 else "free"
            node.last_change = int(self._now)

    def _start(self, job: _Job, alloc: list[tuple[int, int]]) -> None:
        """Q -> R on the cpus of ``alloc`` (``(node index, ncpus)`` pairs); on a
        warm start, part-way through its run."""
        now = self._now
        elapsed = self._warm_elapsed(job) if self._warm else 0.0
        stime = now - elapsed
        self._unqueue(job)
        exec_host, exec_vnode = self._allocate(job, alloc)
        job.alloc = alloc
        job.stime = stime
        job.started = True
        job.token += 1
        self._run_record(job, exec_host, exec_vnode)
        self._update_usage(job)
        self._note(job)
        self.stats["started"] += 1
        self._plan_running(job)
        if job.parent is not None:
            self._update_parent(job.parent)

    def _warm_elapsed(self, job: _Job) -> float:
        """Warm start: how long a job found running has run (a length-biased
        run, see :meth:`_length_bias`); it was submitted before it started."""
        rng = self.rng
        self._length_bias(job)
        elapsed = rng.random() * job.runtime * 0.999
        if job.kind != _SUB:
            self._backdate(job, self._now - elapsed - rng.uniform(0.0, 7200.0))
        return elapsed

    def _allocate(self, job: _Job, alloc: list[tuple[int, int]]) -> tuple[str, str]:
        """Take the job's cpus (and memory) on its nodes; returns its
        ``exec_host`` and ``exec_vnode``."""
        chunk_mem = job.chunk_mem_kb
        hosts = []
        vnodes = []
        for idx, n in alloc:
            node = self._nodes[idx]
            slot = node.ncpus - node.free
            hosts.append(f"{node.name}/{slot}" + (f"*{n}" if n > 1 else ""))
            vnodes.append(
                f"({node.name}:ncpus={n}" + (f":mem={chunk_mem}kb)" if chunk_mem else ")")
            )
            node.jobs[job.id] = n
            node.mem_used_kb += chunk_mem
            node.last_used = int(self._now)
            self._set_free(node, node.free - n)
        return "+".join(hosts), "+".join(vnodes)

    def _run_record(self, job: _Job, exec_host: str, exec_vnode: str) -> None:
        """The record of a job that has just started (a subjob gets its own)."""
        stime = job.stime
        if job.kind == _SUB:
            job.native = self._instantiate(job)
            native = job.native
        else:
            native = job.native
            native["job_state"] = "R"
            native["substate"] = SUB_RUNNING
        native["exec_host"] = exec_host
        native["exec_vnode"] = exec_vnode
        native["stime"] = pbs_time(int(stime))
        native["session_id"] = self.rng.randint(2000, 999_999)
        native["jobdir"] = f"/home/{job.user}"
        native["hashname"] = job.id
        native["comment"] = f"Job run at {run_time_label(int(stime))} on {exec_vnode}"
        native["run_count"] = 1
        native["run_version"] = 1

    def _plan_running(self, job: _Job) -> None:
        """The events of a running job: its end, its usage reports and, for
        some, a ``qdel`` before the end."""
        rng = self.rng
        now = self._now
        stime = job.stime
        token = job.token
        self._push(max(stime + job.runtime, now + 1.0), _EV_END, job, token)
        self._push(now + self.usage_interval * rng.random(), _EV_USAGE, job, token)
        if job.kind == _REGULAR and rng.random() < self.p_qdel_running:
            at = stime + job.runtime * rng.uniform(0.05, 0.8)
            if at > now:
                self._push(at, _EV_DELETE_RUNNING, job, token)

    def _length_bias(self, job: _Job) -> None:
        """The jobs found running at any instant are a length-biased sample:
        a job twice as long is twice as likely to be running.  Redraw the plan
        (and the walltime, except for a subjob, which shares its parent's)
        by rejection so that the warm start begins in that steady state
        instead of with a wave of early completions."""
        rng = self.rng
        redraw_walltime = job.kind == _REGULAR
        if redraw_walltime:
            # P(walltime) proportional to weight * walltime: a direct draw.
            if job.nodect > 1:
                job.walltime = _pick(rng, BIG_WALLTIMES, self._bigwall_biased_cum)[0]
            else:
                job.walltime = _pick(rng, WALLTIMES, self._wall_biased_cum)[0]
        # The share of its walltime a job runs: by rejection (~2 draws).
        for _ in range(1000):
            self._plan_run(job)
            if rng.random() * job.walltime <= job.runtime:
                break
        if redraw_walltime:
            native = job.native
            old = native["Resource_List"]["walltime"]
            native["Resource_List"]["walltime"] = hms(job.walltime)
            native["Submit_arguments"] = native["Submit_arguments"].replace(
                f"walltime={old}", f"walltime={hms(job.walltime)}"
            )

    def _backdate(self, job: _Job, ctime: float) -> None:
        """Warm start: a job found running was submitted before it started."""
        job.ctime = ctime
        t = pbs_time(int(ctime))
        native = job.native
        for key in ("ctime", "qtime", "etime", "mtime"):
            native[key] = t
        native["queue_rank"] = int(ctime * 1_000_000) + job.num % 1_000_000

    def _instantiate(self, sub: _Job) -> dict[str, Any]:
        """A subjob's own record, made when it starts (before, qstat -t shows
        a copy of the parent)."""
        parent = sub.parent
        return render.subjob_record(
            parent.native,
            array_id=parent.id,
            user=sub.user,
            host=sub.submit_host,
            num=sub.num,
            index=sub.index,
            now=self._now,
        )

    def _update_usage(self, job: _Job) -> None:
        """What the MoM reports: a fresh resources_used (a new dict, so that no
        earlier rendering ever shares it)."""
        elapsed = max(0.0, self._now - job.stime)
        ramp = min(1.0, 0.3 + elapsed / 600.0)
        mem = int(job.peak_kb * ramp)
        job.native["resources_used"] = render.resources_used(elapsed, job.eff, job.ncpus, mem)
        self._touch(job)
        self.stats["usage_updates"] += 1

    def _begin_exit(self, job: _Job, end_kind: int, exit_status: int) -> None:
        """R -> E: the job's processes are gone; the server is wrapping up."""
        job.token += 1
        job.end_kind = end_kind
        native = job.native
        if end_kind == _END_QDEL:
            native["comment"] = (
                f"{native.get('comment', '')} and terminated by {job.user}@{job.submit_host}"
            )
            job.truth.tags.append("qdel_running")
        elif end_kind == _END_WALLTIME:
            job.truth.tags.append("walltime")
        elif end_kind == _END_FAIL:
            job.truth.tags.append("exit_nonzero")
        elif end_kind == _END_NODE:
            job.truth.tags.append("node_kill")
        native["job_state"] = "E"
        native["substate"] = SUB_EXITING
        native["Exit_status"] = exit_status
        self._update_usage(job)
        self._note(job)
        self._push(self._now + self.rng.uniform(1.0, 4.0), _EV_FINISH, job, job.token)
        if job.parent is not None:
            self._update_parent(job.parent)

    def _cancel(self, job: _Job) -> None:
        """``qdel`` of a job that has not started (Q, H or W)."""
        job.token += 1
        job.end_kind = _END_CANCEL
        job.truth.tags.append("qdel_queued")
        self._finish(job)

    def _finish(self, job: _Job) -> None:
        """The job leaves the live list: F in history (or purged)."""
        self._final_record(job)
        job.finished = True
        job.token += 1
        self._touch(job)
        self._note(job)
        truth = job.truth
        truth.final_state = pbs_state(job.native)
        truth.exit_status = job.native.get("Exit_status")
        self._count_end(job)
        self._unqueue(job)
        del self._live[job.id]
        if job.alloc:
            self._free_nodes(job)
            self._want_schedule()
        self._keep_or_purge(job)
        parent = job.parent
        if parent is not None:
            if all(sub.finished for sub in parent.subjobs):
                self._finish_array(parent)
            else:
                self._update_parent(parent)

    def _final_record(self, job: _Job) -> None:
        """F, with the substate and comment of how it ended."""
        now = self._now
        native = job.native
        end = job.end_kind
        if job.kind == _SUB and not job.started:
            # Never instantiated: its record is a copy of the parent's so far.
            native = dict(native)
            native["array_id"] = job.parent.id
            native["array_index"] = job.index
            job.native = native
        suffix = _END_SUFFIX.get(end)
        comment = native.get("comment")
        if suffix and comment:
            native["comment"] = comment + suffix
        native["job_state"] = "F"
        native["substate"] = _END_SUBSTATE[end]
        if job.started:
            native["obittime"] = pbs_time(int(now))
            native["Stageout_status"] = 1
        native["history_timestamp"] = int(now)

    def _count_end(self, job: _Job) -> None:
        stats = self.stats
        stats[job.truth.final_state] += 1
        end = job.end_kind
        if end == _END_CANCEL:
            stats["cancelled_queued"] += 1
        elif end == _END_QDEL:
            stats["cancelled_running"] += 1
        elif end == _END_WALLTIME:
            stats["walltime"] += 1
        elif end == _END_NODE:
            stats["node_kills"] += 1

    def _free_nodes(self, job: _Job) -> None:
        """Give back the cpus (and memory) the job held."""
        for idx, n in job.alloc:
            node = self._nodes[idx]
            del node.jobs[job.id]
            node.mem_used_kb -= job.chunk_mem_kb
            node.last_used = int(self._now)
            self._set_free(node, node.free + n)

    def _keep_or_purge(self, job: _Job) -> None:
        """A finished job stays in the history (``history_keep`` of them) or
        the server forgets it at once."""
        if self.rng.random() < self.history_keep:
            self._history[job.id] = job
            self._history_order.append((self._now, job.id))
        else:
            job.truth.purged = True
            self.stats["purged"] += 1

    # Arrays --------------------------------------------------------------------------
    def _update_parent(self, parent: _Job) -> None:
        """Recount the parent's subjobs; Q -> B when the first one starts."""
        queued = running = exiting = expired = 0
        remaining = []
        for sub in parent.subjobs:
            if sub.finished:
                expired += 1
            elif not sub.started:
                queued += 1
                remaining.append(sub.index)
            elif sub.native["job_state"] == "E":
                exiting += 1
            else:
                running += 1
        native = parent.native
        native["array_state_count"] = (
            f"Queued:{queued} Running:{running} Exiting:{exiting} Expired:{expired}"
        )
        native["array_indices_remaining"] = ranges(remaining, parent.step)
        if native["job_state"] == "Q" and (running or exiting or expired) and not parent.deleted:
            t = int(self._now)
            native["job_state"] = "B"
            native["substate"] = SUB_BEGUN
            native["stime"] = pbs_time(t)
            native["comment"] = f"Job Array Began at {run_time_label(t)}"
            parent.started = True
        self._touch(parent)
        self._note(parent)

    def _sync_placeholders(self, parent: _Job) -> None:
        """Not-yet-started subjobs are shown as copies of their parent."""
        base = render.placeholder_record(parent.native)
        t = int(self._now)
        for sub in parent.subjobs:
            if not sub.started and not sub.finished:
                sub.native = base.copy()
                sub.version += 1
                self._mtime_log.append((t, sub.id))

    def _delete_array(self, parent: _Job) -> None:
        """``qdel N[]``: queued subjobs are cancelled, running ones killed."""
        parent.deleted = True
        parent.truth.tags.append("qdel_array")
        for sub in list(parent.subjobs):
            state = sub.native["job_state"]
            if sub.finished or state == "E":
                continue
            if state == "R":
                self._begin_exit(sub, _END_QDEL, EXIT_QDEL)
            else:
                self._cancel(sub)

    def _finish_array(self, parent: _Job) -> None:
        native = parent.native
        if parent.deleted:
            exit_status = 2
            parent.end_kind = _END_CANCEL
            if native.get("comment"):
                native["comment"] += " and terminated"
            native["substate"] = SUB_TERMINATED
        else:
            failed = any(sub.native.get("Exit_status") != 0 for sub in parent.subjobs)
            exit_status = 1 if failed else 0
            parent.end_kind = _END_OK
            if native.get("comment"):
                native["comment"] += " and finished"
            native["substate"] = SUB_FINISHED
        native["array_state_count"] = "Queued:0 Running:0 Exiting:0 Expired:0"
        native["array_indices_remaining"] = "-"
        native["job_state"] = "F"
        native["Exit_status"] = exit_status
        native["obittime"] = pbs_time(int(self._now))
        native["Stageout_status"] = 1
        native["history_timestamp"] = int(self._now)
        parent.finished = True
        self._touch(parent)
        self._note(parent)
        truth = parent.truth
        truth.final_state = pbs_state(native)
        truth.exit_status = exit_status
        self.stats["arrays_finished"] += 1
        del self._live[parent.id]
        self._keep_or_purge(parent)

    # Nodes ---------------------------------------------------------------------------
    def _outage(self) -> None:
        """A node goes down (crash) or offline (admin); its jobs are killed."""
        rng = self.rng
        nodes = self._nodes
        node = nodes[rng.randrange(len(nodes))]
        if node.down:
            return
        offline = rng.random() < 0.4
        self._free_total -= node.free
        del self._buckets[node.free][node.idx]
        node.down = True
        node.state = "offline" if offline else "down"
        node.comment = (
            "offlined for hardware maintenance" if offline else "node down: communication closed"
        )
        node.last_change = int(self._now)
        self.stats["node_offline" if offline else "node_down"] += 1
        for job_id in list(node.jobs):
            job = self._live[job_id]
            if job.native["job_state"] == "R":
                self._begin_exit(job, _END_NODE, EXIT_NODE_FAIL)
        self._push(self._now + rng.uniform(*self.node_repair), _EV_NODE_UP, node, 0)

    def _node_up(self, node: _Node) -> None:
        node.down = False
        node.comment = None
        node.state = "job-busy" if node.free == 0 else "free"
        node.last_change = int(self._now)
        self._buckets[node.free][node.idx] = None
        self._free_total += node.free
        self.stats["node_up"] += 1
        self._want_schedule()

    # History -------------------------------------------------------------------------
    def _expire_history(self) -> None:
        if self.history_duration <= 0:
            return
        horizon = self._now - self.history_duration
        order = self._history_order
        while order and order[0][0] < horizon:
            _, job_id = order.popleft()
            job = self._history.pop(job_id, None)
            if job is not None:
                job.truth.purged = True

    def _trim_mtime_log(self) -> None:
        horizon = self._now - self.mtime_log_keep
        log = self._mtime_log
        while log and log[0][0] < horizon:
            log.popleft()

    # Probing -------------------------------------------------------------------------
    def changed_since(self, t: float) -> list[str]:
        """``qselect -x -T -t m.gt.T``: the jobs whose record changed after ``t``
        (mtime has whole seconds: strictly after ``int(t)``), live or finished
        and still in history (``-x``), subjobs included, oldest change first.
        Purged jobs are absent, as the server has forgotten them.  Asked for a
        time older than it remembers changes, it names every job it knows."""
        live, history = self._live, self._history
        log = self._mtime_log
        if not log or t < log[0][0]:
            return [*live, *history]
        after = int(t)
        start = bisect(log, (after, "\uffff"))  # first entry with mtime > after
        out: dict[str, None] = {}
        for i in range(start, len(log)):
            job_id = log[i][1]
            if job_id in live or job_id in history:
                out[job_id] = None
        return list(out)

    def alter(self, job_id: str, key: str, value: Any, *, moves_mtime: bool = True) -> None:
        """``qalter``: set one attribute of a live job's record.  With
        ``moves_mtime=False`` the record changes but its ``mtime`` does not:
        a change that ``qselect -t m.gt.T`` cannot see (a full stat finds it)."""
        job = self._live[job_id]
        job.native[key] = value
        if moves_mtime:
            self._touch(job)
        else:
            job.version += 1

    # Rendering -----------------------------------------------------------------------
    @property
    def live_count(self) -> int:
        """How many records ``qstat -t -f`` shows now."""
        return len(self._live)

    def live_ids(self) -> list[str]:
        """The ids ``qstat -t`` lists now, in its order."""
        return list(self._live)

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    def take_pokes(self) -> list[str]:
        """The ids of jobs whose state changed since the last call, in order
        (repeats included, like real hooks firing once per transition)."""
        pokes, self._pokes = self._pokes, []
        return pokes

    def live_jobs(self) -> dict[str, dict[str, Any]]:
        """``qstat -t -f``: the live jobs (subjobs included) by id, as fresh
        copies that share nothing with the simulation."""
        with _gc_paused():
            return {job_id: render.copy_record(job.native) for job_id, job in self._live.items()}

    def live_jobs_by_id(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The live jobs among ``ids``, as fresh copies."""
        live = self._live
        return {j: render.copy_record(live[j].native) for j in ids if j in live}

    def history_jobs(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """``qstat -x -t -f ID...``: the finished jobs the server still
        remembers among ``ids`` (purged ones are absent)."""
        out = {}
        for job_id in ids:
            job = self._history.get(job_id)
            if job is not None:
                out[job_id] = render.copy_record(job.native)
        return out

    def qstat_json(self, include_history: bool = False) -> bytes:
        """The whole document ``qstat -t -f -F json`` prints (``-x`` with
        ``include_history``: finished jobs too, in job id order)."""
        if include_history:
            jobs = sorted([*self._live.values(), *self._history.values()], key=_order)
        else:
            jobs = list(self._live.values())
        return render.qstat_document(self._now, self.server, {job.id: job.native for job in jobs})

    def nodes(self) -> dict[str, dict[str, Any]]:
        """``pbsnodes -av``: every node by name (fresh dicts)."""
        return {node.name: render.node_record(node) for node in self._nodes}

    def queues(self) -> dict[str, dict[str, Any]]:
        """``qstat -Q -f``: workq and bigq with their job counts (fresh dicts)."""
        counts = {q: render.new_state_count() for q in ("workq", "bigq")}
        assigned = {q: [0, 0] for q in counts}
        for job in self._live.values():
            if job.kind == _SUB and not job.started:
                continue  # not instantiated yet: PBS does not count it
            state = job.native["job_state"]
            counts[job.queue][render.STATE_COUNT_KEY.get(state, "Transit")] += 1
            if job.alloc and state in ("R", "E"):
                assigned[job.queue][0] += job.ncpus
                assigned[job.queue][1] += job.nodect
        return {
            name: render.queue_record(name, c, *assigned[name], self.cpus_per_node)
            for name, c in counts.items()
        }

    def pbsnodes_json(self) -> bytes:
        """The whole document ``pbsnodes -av -F json`` prints."""
        return render.document(self._now, self.server, "nodes", self.nodes())

    def qstat_queues_json(self) -> bytes:
        """The whole document ``qstat -Q -f -F json`` prints."""
        return render.document(self._now, self.server, "Queue", self.queues())

    # Faults --------------------------------------------------------------------------
    def fault(self, kind: str, count: int = 1) -> None:
        """Make the next ``count`` stats misbehave (see :mod:`jobtap.sim.faults`
        for the kinds).  The simulation itself, and its ground truth, are
        unaffected."""
        self._faults.add(kind, count)

    @property
    def pending_faults(self) -> list[tuple[str, int]]:
        return self._faults.pending

    def take_fault(self, kinds: Iterable[str]) -> str | None:
        """Consume one pending fault among ``kinds`` (oldest first)."""
        return self._faults.take(kinds)

    # Benchmarks ----------------------------------------------------------------------
    def mutate_fraction(
        self, fraction: float, rng: random.Random | None = None, step: float = 1.0
    ) -> set[str]:
        """Change about ``fraction`` of the live jobs, the way a busy server does.

        The clock first moves ``step`` seconds (whatever is due happens).  Then,
        until ``fraction`` of the live jobs have changed, randomly chosen ones
        get one of the simulation's own operations: a running job reports its
        usage, a queued job is held (``qhold``, released later as any hold),
        a held one released.  Returns the ids whose record was touched,
        appeared or left the live list."""
        rng = rng if rng is not None else self.rng
        before = {job_id: job.version for job_id, job in self._live.items()}
        self.advance(step)
        changed = self._changed_since(before)
        want = round(fraction * len(self._live)) - len(changed)
        if want > 0:
            candidates = [
                job
                for job_id, job in self._live.items()
                if job_id not in changed
                and job.kind != _PARENT
                and (job.kind == _REGULAR or job.started)
                and job.native["job_state"] in ("R", "Q", "H")
            ]
            for job in rng.sample(candidates, min(want, len(candidates))):
                state = job.native["job_state"]
                if state == "R":
                    self._update_usage(job)
                elif state == "Q":
                    self._hold(job)
                else:
                    self._release(job)
        return self._changed_since(before)

    def _changed_since(self, versions: dict[str, int]) -> set[str]:
        live = self._live
        changed = {job_id for job_id, job in live.items() if versions.get(job_id) != job.version}
        changed.update(job_id for job_id in versions if job_id not in live)
        return changed


def _order(job: _Job) -> tuple[int, int]:
    return job.order


def _pick(rng: random.Random, items: Sequence[Any], cum_weights: Sequence[float]) -> Any:
    """``rng.choices(items, cum_weights=cum_weights)[0]``, without its overhead
    (same draw: one ``random()``)."""
    return items[bisect(cum_weights, rng.random() * cum_weights[-1], 0, len(cum_weights) - 1)]


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Build many small acyclic objects without the cyclic collector walking
    the whole heap again and again (it tripled the time of a 100k-job copy)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _cumulate(weights: Iterable[float]) -> Iterable[float]:
    total = 0.0
    for w in weights:
        total += w
        yield total
