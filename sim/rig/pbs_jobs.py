"""Many PBS jobs at once, for tests and benchmarks of the history path: copies of
one real record (``tests/fixtures/pbs``) under new ids, written as the
document ``qstat -f -F json`` prints."""

from __future__ import annotations

import copy
import json
from pathlib import Path

# A running job as qstat showed it (10-busy), and a finished one (80-final, -x).
RUNNING = ("10-busy.qstat-f.json", "1.vm")
FINISHED = ("80-final.qstat-f-x.json", "5056.vm")  # bob's, as 1.vm


def job_ids(n: int, first: int = 7000, server: str = "vm") -> list[str]:
    return [f"{first + i}.{server}" for i in range(n)]


def write_jobs(fixtures: Path, source: tuple[str, str], ids: list[str], path: Path) -> Path:
    """Write a qstat document holding a copy of the ``source`` record under each id."""
    doc = json.loads((fixtures / source[0]).read_text())
    record = doc["Jobs"][source[1]]
    jobs = {}
    for job_id in ids:
        copied = copy.deepcopy(record)
        copied["hashname"] = job_id
        jobs[job_id] = copied
    out = {k: doc[k] for k in ("timestamp", "pbs_version", "pbs_server")}
    if jobs:
        out["Jobs"] = jobs
    path.write_text(json.dumps(out, indent=4))
    return path
