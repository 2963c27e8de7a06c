"""Stand-ins of the scheduler commands that CI cannot install (``qstat``,
``qselect``, ``pbsnodes``, ``qmgr``, ``qsub``/``qdel`` on a one-host PBS server,
``flux`` and Flux's Python bindings): ``bin/`` holds the commands, each replaying
the real captures of ``tests/fixtures``.  Part of a checkout, not of the wheel;
imported as ``sim.standins`` (see :mod:`sim.rig`)."""
