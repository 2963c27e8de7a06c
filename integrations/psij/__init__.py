"""PSI/J executors that listen instead of poll: ``jobtap-slurm`` and ``jobtap-pbs``.

They submit and cancel exactly like PSI/J's own Slurm and PBS executors, and take job
status from jobtap subscriptions instead of a thread that runs ``squeue``/``qstat``
every 30 s.  PSI/J finds them through ``psij-descriptors/jobtap_executors.py``::

    import psij
    ex = psij.JobExecutor.get_instance("jobtap-slurm")        # $JOBTAP_REDIS, $JOBTAP_SITE
    ex = psij.JobExecutor.get_instance("jobtap-slurm", url="redis://host:6379/0?site=hpc1")

Install with ``pip install jobtap[psij]``; see docs/psij.md.  This package imports
the SDK (``jobtap``) and PSI/J only: never rq, click or the collector.
"""
