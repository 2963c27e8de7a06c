"""The ``sim`` backend: a simulated PBS cluster in-process.

It is the embedded default for the demo and the load generator of the
benchmarks.  Records come out exactly as OpenPBS prints them (see
:mod:`jobtap.sim.render`), and are normalised by the PBS backend's own functions,
so that the whole pipeline after the stat is the one a real PBS site runs.

It has the PBS backend's probe (:class:`~jobtap.collector.backends.base.ChangeProbe`):
``qselect -x -t m.gt.T`` names the jobs whose record changed after ``T`` (whole
seconds, finished ones included), so the collector's tiers run at any scale.

Each cycle first moves the virtual clock ``tick`` seconds, the way real time
passes between two cycles of the collector: the probe does (it is every
cycle's first call), or ``stat_jobs()`` when no probe ran since the last one
(a collector that never probes).  ``tick=0`` leaves the clock to the caller
(tests drive ``backend.simulation.advance()`` themselves).

``measure=True`` makes every stat cost what the real command would: the output
is rendered as the bytes ``qselect`` and ``qstat -F json`` print, counted in
``cost``, and parsed back by the PBS backend's parsers, so that a benchmark
sees the collector's real parsing work.  Otherwise only the commands are
counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from jobtap.collector.backends.base import Cost, Native, PokedReads, Probe, Record, StatError
from jobtap.sim import render
from jobtap.sim.faults import JOB_FAULTS, PROBE_FAULTS
from jobtap.sim.model import Simulation

__all__ = ["SimBackend"]


class SimBackend:
    """A :class:`~jobtap.sim.model.Simulation` seen through the backend interface.

    ``simulation`` exposes the model (and its ground truth, ``truth``) to
    tests; faults set with ``simulation.fault()`` (or :meth:`fault`) make the
    next stats misbehave without changing the simulation.
    """

    def __init__(
        self,
        *,
        seed: int = 1,
        nodes: int = 200,
        jobs: int = 3000,
        tick: float = 30.0,
        simulation: Simulation | None = None,
        scheduler: str = "sim",
        overlap: float = 2.0,
        clock_skew: float = 0.0,
        measure: bool = False,
        **sim_options: Any,
    ) -> None:
        if tick < 0:
            raise ValueError("tick must be >= 0")
        if simulation is not None and sim_options:
            raise ValueError("pass either a simulation or options to build one, not both")
        self.simulation = (
            simulation
            if simulation is not None
            else Simulation(seed=seed, nodes=nodes, initial_jobs=jobs, **sim_options)
        )
        self.tick = float(tick)
        self.scheduler = scheduler
        # The probe asks for changes after (since - overlap): mtime has whole
        # seconds, and the server's clock may differ from the collector's.
        # ``clock_skew``: how far the collector's clock runs ahead of the
        # server's (a skew past the overlap hides changes from the probe).
        self.overlap = float(overlap)
        self.clock_skew = float(clock_skew)
        self.measure = bool(measure)
        self.cost = Cost()
        # CPU seconds spent rendering output when measuring: the server's work,
        # not the collector's (a benchmark subtracts it from the cycle's CPU).
        self.render_seconds = 0.0
        self._probed = False  # a probe moved the clock since the last job stat

    def __repr__(self) -> str:
        sim = self.simulation
        return (
            f"SimBackend(seed={sim.seed}, nodes={sim.node_count}, "
            f"live={sim.live_count}, tick={self.tick})"
        )

    def fault(self, kind: str, count: int = 1) -> None:
        """See :meth:`jobtap.sim.model.Simulation.fault`."""
        self.simulation.fault(kind, count)

    # Stats -------------------------------------------------------------------------
    def probe(self, since: float | None) -> Probe:
        """``qselect -x -T -t m.gt.T``: advance the clock by ``tick``, then the
        jobs whose record changed after ``since - overlap``.  With ``since``
        None it only says where the next probe starts (the collector's clock:
        the server's plus ``clock_skew``)."""
        sim = self.simulation
        if self.tick > 0:
            sim.advance(self.tick)
        self._probed = True
        until = sim.now + self.clock_skew
        if since is None:  # no command: where the next probe starts is all it takes
            return Probe(until=until)
        fault = sim.take_fault(PROBE_FAULTS)
        if fault == "probe_fail":
            self.cost.add(0)
            raise StatError("qselect exited with status 1: simulated failure (injected fault)")
        ids = [] if fault == "probe_blind" else sim.changed_since(since - self.overlap)
        if fault == "probe_garbage":
            self.cost.add(0)
            raise StatError("qselect printed a line that is not a job id: 'qselect: garbage'")
        if self.measure:
            t0 = time.process_time()
            raw = "".join(f"{job_id}\n" for job_id in ids).encode()
            self.render_seconds += time.process_time() - t0
            self.cost.add(raw)
            ids = raw.decode().split()
        else:
            self.cost.add(0)
        return Probe(named=dict.fromkeys(ids, ""), until=until)

    def stat_jobs(self) -> dict[str, Native]:
        """``qstat -t -f``: advance the clock by ``tick`` (unless a probe just
        did), then the live jobs (or what a pending fault makes of them)."""
        sim = self.simulation
        if self.tick > 0 and not self._probed:
            sim.advance(self.tick)
        self._probed = False
        fault = sim.take_fault(JOB_FAULTS)
        if fault == "fail":
            self.cost.add(0)
            raise StatError("qstat: simulated failure (injected fault)")
        if fault == "empty":
            self.cost.add(0)
            return {}
        jobs = self._output(sim.live_jobs, sim.qstat_json)
        if fault == "short":
            # A truncated answer: keep one job in ten, in the server's order.
            kept = list(jobs)[::10]
            return {job_id: jobs[job_id] for job_id in kept}
        return jobs

    def _output(
        self, jobs: Callable[[], dict[str, Native]], document: Callable[[], bytes] | None = None
    ) -> dict[str, Native]:
        """One ``qstat -f -F json``: the records ``jobs()`` gives, counted; when
        measuring, the bytes the server would print (``document()``, or
        ``jobs()`` rendered) are counted and parsed back by the PBS backend's
        parser, and the time spent making them goes to ``render_seconds``."""
        if not self.measure:
            self.cost.add(0)
            return jobs()
        from jobtap.collector.backends.pbs import parse_qstat_jobs

        sim = self.simulation
        t0 = time.process_time()
        raw = document() if document else render.qstat_document(sim.now, sim.server, jobs())
        self.render_seconds += time.process_time() - t0
        self.cost.add(raw)
        return parse_qstat_jobs(raw)

    def stat_nodes(self) -> dict[str, Native]:
        """``pbsnodes -av``."""
        self.cost.add(0)
        return self.simulation.nodes()

    def stat_queues(self) -> dict[str, Native]:
        """``qstat -Q -f``."""
        self.cost.add(0)
        return self.simulation.queues()

    def history(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """``qstat -x -t -f IDS``: the finished jobs the server still remembers."""
        sim = self.simulation
        if sim.take_fault(("history_fail",)) is not None:
            self.cost.add(0)
            raise StatError("qstat -x: simulated failure (injected fault)")
        return self._output(lambda: sim.history_jobs(job_ids))

    def poked_reads(self) -> PokedReads:
        """Poked jobs are read one by one (or listed), as from a PBS server."""
        return PokedReads()

    def stat_some(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """``qstat -x -t -f IDS``: the current record of each of these jobs, live
        or finished (follow mode's targeted refresh); unknown ids are absent."""
        sim = self.simulation
        if sim.take_fault(("fail",)) is not None:
            self.cost.add(0)
            raise StatError("qstat: simulated failure (injected fault)")
        ids = list(dict.fromkeys(job_ids))

        def records() -> dict[str, Native]:
            live = sim.live_jobs_by_id(ids)
            rest = [j for j in ids if j not in live]
            return {**live, **(sim.history_jobs(rest) if rest else {})}

        return self._output(records)

    # Normalisation: the PBS backend's, with the simulated server's time zone ---------
    def normalise_job(self, job_id: str, native: Native) -> Record:
        from jobtap.collector.backends import pbs

        return pbs.normalise_job(job_id, native, scheduler=self.scheduler, tz="UTC")

    def normalise_node(self, name: str, native: Native) -> Record:
        from jobtap.collector.backends import pbs

        return pbs.normalise_node(name, native, scheduler=self.scheduler, tz="UTC")

    def normalise_queue(self, name: str, native: Native) -> Record:
        from jobtap.collector.backends import pbs

        return pbs.normalise_queue(name, native, scheduler=self.scheduler, tz="UTC")
