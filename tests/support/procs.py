"""Stopping the service processes (``jobtap collector``, ``jobtap worker``)
that tests and benchmarks start."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM, 20 s to exit on its own, then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
