"""The simulator: a seeded, deterministic PBS cluster in virtual time.

One module per job, imported in one direction (each only from those above it):

* :mod:`~jobtap.sim.pbs`: OpenPBS's vocabulary (server, substates, exit
  statuses, time and range formats);
* :mod:`~jobtap.sim.truth`: the ground truth (:class:`JobTruth`) and the
  normalised state of a PBS record;
* :mod:`~jobtap.sim.faults`: the faults that make stats misbehave;
* :mod:`~jobtap.sim.render`: records and ``-F json`` documents exactly as
  OpenPBS prints them;
* :mod:`~jobtap.sim.model`: the :class:`Simulation` (clock, events, scheduler,
  jobs, nodes; its docstring describes the model);
* :mod:`~jobtap.sim.backend`: :class:`SimBackend`, the collector's adapter.
"""

from jobtap.sim.backend import SimBackend
from jobtap.sim.faults import FAULT_KINDS, JOB_FAULTS, PROBE_FAULTS
from jobtap.sim.model import Simulation
from jobtap.sim.truth import JobTruth

__all__ = ["FAULT_KINDS", "JOB_FAULTS", "PROBE_FAULTS", "JobTruth", "SimBackend", "Simulation"]
