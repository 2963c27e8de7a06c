"""What the tests share beside their fixtures (which live in the conftest files):
records, the pipeline, the SDK writer and recorder, ACL and Slurm helpers, and
``eventually()``/``barrier`` for waiting.  bench/ imports it as ``tests.support``."""
