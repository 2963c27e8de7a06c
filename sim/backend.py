"""The ``sim`` backend: a simulated PBS cluster in-process.

It is the embedded default for the demo and the load generator of the
benchmarks.  Records come out exactly as OpenPBS prints them (see
:mod:`jobtap.sim.render`), and are normalised by the PBS backend's own functions,
so that the whole pipeline after the stat is the one a real PBS site runs.

Each ``stat_jobs()`` first moves the virtual clock ``tick`` seconds, the way
real time passes between two cycles of the collector; ``tick=0`` leaves the
clock to the caller (tests drive ``backend.simulation.advance()`` themselves).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobtap.collector.backends.base import Native, Record, StatError
from jobtap.sim.faults import JOB_FAULTS
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
    def stat_jobs(self) -> dict[str, Native]:
        """``qstat -t -f``: advance the clock by ``tick``, then the live jobs
        (or what a pending fault makes of them)."""
        sim = self.simulation
        if self.tick > 0:
            sim.advance(self.tick)
        fault = sim.take_fault(JOB_FAULTS)
        if fault == "fail":
            raise StatError("qstat: simulated failure (injected fault)")
        if fault == "empty":
            return {}
        jobs = sim.live_jobs()
        if fault == "short":
            # A truncated answer: keep one job in ten, in the server's order.
            kept = list(jobs)[::10]
            return {job_id: jobs[job_id] for job_id in kept}
        return jobs

    def stat_nodes(self) -> dict[str, Native]:
        """``pbsnodes -av``."""
        return self.simulation.nodes()

    def stat_queues(self) -> dict[str, Native]:
        """``qstat -Q -f``."""
        return self.simulation.queues()

    def history(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """``qstat -x -t -f IDS``: the finished jobs the server still remembers."""
        sim = self.simulation
        if sim.take_fault(("history_fail",)) is not None:
            raise StatError("qstat -x: simulated failure (injected fault)")
        return sim.history_jobs(job_ids)

    def stat_some(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """``qstat -x -t -f IDS``: the current record of each of these jobs, live
        or finished (follow mode's targeted refresh); unknown ids are absent."""
        sim = self.simulation
        if sim.take_fault(("fail",)) is not None:
            raise StatError("qstat: simulated failure (injected fault)")
        ids = list(dict.fromkeys(job_ids))
        live = sim.live_jobs_by_id(ids)
        rest = [j for j in ids if j not in live]
        return {**live, **(sim.history_jobs(rest) if rest else {})}

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
