"""OpenPBS's vocabulary as the simulated server speaks it.

The server's name and version, the job substates and exit statuses PBS
writes into its records (``src/include/job.h``), and the forms in which it
prints times, durations and array index ranges.  Everything else in the
simulator that writes or reads a PBS record takes its words from here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import lru_cache

__all__ = [
    "EXIT_NODE_FAIL",
    "EXIT_QDEL",
    "EXIT_WALLTIME",
    "FAIL_CODES",
    "PBS_VERSION",
    "SERVER",
    "SUB_BEGUN",
    "SUB_EXITING",
    "SUB_FAILED",
    "SUB_FINISHED",
    "SUB_HELD",
    "SUB_QUEUED",
    "SUB_RUNNING",
    "SUB_TERMINATED",
    "SUB_WAITING",
    "hms",
    "pbs_time",
    "ranges",
    "run_time_label",
]

SERVER = "simhost"
PBS_VERSION = "23.06.06"

# PBS substates (src/include/job.h).
SUB_QUEUED = 10
SUB_HELD = 20
SUB_WAITING = 30
SUB_RUNNING = 42
SUB_EXITING = 50
SUB_BEGUN = 70
SUB_TERMINATED = 91
SUB_FINISHED = 92
SUB_FAILED = 93

EXIT_WALLTIME = -29  # JOB_EXEC_KILL_WALLTIME
EXIT_QDEL = 271  # 256 + SIGTERM, what qdel of a running job leaves
EXIT_NODE_FAIL = 265  # 256 + SIGKILL: the job's processes died with their node
FAIL_CODES = (1, 1, 1, 2, 3, 127, 134, 137, 139, 255)


@lru_cache(maxsize=16384)
def pbs_time(t: int) -> str:
    """Seconds since the epoch as PBS prints times: ``Sat Nov 21 14:40:20 2026``
    (the server's local time; the simulated server runs in UTC)."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(t))


def run_time_label(t: int) -> str:
    """The scheduler's short form in comments: ``Sat Nov 21 at 14:40``."""
    return time.strftime("%a %b %d at %H:%M", time.gmtime(t))


def hms(seconds: float) -> str:
    """A duration as PBS prints walltimes and cpu times: ``HH:MM:SS``."""
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def ranges(indices: Sequence[int], step: int) -> str:
    """``[2, 3, 4, 7]`` -> ``"2-4,7"`` (PBS's form of array index lists)."""
    if not indices:
        return "-"
    parts = []
    first = prev = indices[0]
    for i in indices[1:]:
        if i == prev + step:
            prev = i
            continue
        parts.append(_one_range(first, prev, step))
        first = prev = i
    parts.append(_one_range(first, prev, step))
    return ",".join(parts)


def _one_range(first: int, last: int, step: int) -> str:
    if first == last:
        return str(first)
    return f"{first}-{last}" + (f":{step}" if step != 1 else "")
