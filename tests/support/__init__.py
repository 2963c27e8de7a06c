"""What only the tests share beside their fixtures (which live in the conftest
files): the SDK writer and recorder, ACL helpers, ids, the release build, the
terminal driver, the reaper and the no-skip plugin.  The rig that the benchmarks
and the demo use too (redis-servers, the pipeline, ``eventually()``...) is
``sim.rig``; the scheduler stand-ins are ``sim.standins``."""
