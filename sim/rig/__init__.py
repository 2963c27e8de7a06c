"""The real-process rig that the tests, the benchmarks and their Slurm runs share:
redis-servers, Redis Clusters, Sentinels and TLS (on :mod:`jobtap.sim.localredis`),
the pipeline on the stand-ins (:mod:`sim.rig.pipeline`), the services as processes
(:mod:`sim.rig.procs`), the PBS hook run outside PBS, the test Slurms, Redis loss
and standby runs, PSI/J's and Snakemake's own suites with our harness, where things
are (:mod:`sim.rig.paths`) and the one :func:`sim.rig.wait.eventually`.

Imported as ``sim.rig`` from a checkout (pytest and ``python -m bench.X`` run from
its root), never as ``jobtap.sim.rig``: it is not a package of the wheel (see
pyproject.toml and MANIFEST.in; tests/test_release.py checks the wheel's files and
tests/test_layout.py the imports).  Helpers only the tests use stay in tests/support.
"""
