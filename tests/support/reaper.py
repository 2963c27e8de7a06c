"""Run a command and wait for every process it started, detached ones included.

Scheduler hooks must not hold up their server, so they start their work in the
background (``sh -c '... &'``, ``setsid``) and return at once.  A test that shows
such work did NOT happen must know when it would have happened.  Run as a
script, this module makes itself a Linux child subreaper
(``prctl(PR_SET_CHILD_SUBREAPER)``): the orphans among the command's descendants
are re-parented to it instead of to init, so after the command exits it waits
for each of them.  When :func:`run_reaped` returns, nothing the command started
is still running.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def run_reaped(
    argv: Sequence[str], *, timeout: float = 60, **kwargs: Any
) -> subprocess.CompletedProcess:
    """``subprocess.run(argv)`` that returns only once every process ``argv``
    started, in the background or detached, has exited too; its exit status is
    ``argv``'s."""
    return subprocess.run([sys.executable, __file__, *argv], timeout=timeout, **kwargs)


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    status = subprocess.call(argv)
    while True:
        try:
            os.wait()
        except ChildProcessError:  # no child left, re-parented orphans included
            return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
