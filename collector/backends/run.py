"""Running a scheduler command (locally or through a prefix such as ``ssh head1``)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from collections.abc import Sequence

from .base import CommandNotFound, StatError


def run_full(
    argv: Sequence[str],
    *,
    prefix: Sequence[str] = (),
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
) -> tuple[int, bytes, bytes]:
    """Run ``prefix + argv`` and return ``(returncode, stdout, stderr)``;
    ``input`` is written to its standard input (otherwise it reads nothing).

    For commands whose non-zero exit is not always a failure (``qstat`` exits
    153 when some of the job ids it was given are unknown, yet prints the
    others): the caller judges the exit status.  A command that cannot be
    started or is killed by the timeout still raises :class:`StatError`; on
    timeout the whole process group is killed so that nothing lingers.
    """
    full = [*prefix, *argv]
    name = os.path.basename(argv[0]) if argv else "?"
    try:
        proc = subprocess.Popen(
            full,
            stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
    except FileNotFoundError as exc:
        raise CommandNotFound(f"{full[0]}: command not found") from exc
    except PermissionError as exc:
        raise StatError(f"{full[0]}: permission denied") from exc
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise StatError(f"{name} timed out after {timeout:g}s: {shlex.join(full)}") from exc
    return proc.returncode, out, err


def first_line(err: bytes) -> str:
    """The first line of a command's standard error, for one-line messages."""
    detail = err.decode(errors="replace").strip().splitlines()
    return detail[0][:300] if detail else "(no message)"


def run(
    argv: Sequence[str],
    *,
    prefix: Sequence[str] = (),
    timeout: float = 60.0,
    env: dict[str, str] | None = None,
    input: bytes | None = None,
) -> bytes:
    """Run ``prefix + argv`` and return its standard output.

    Every way a command can fail becomes a :class:`StatError` with a one-line
    message: missing, not executable, killed by the timeout, non-zero exit.
    On timeout the whole process group is killed so that nothing lingers.
    """
    returncode, out, err = run_full(argv, prefix=prefix, timeout=timeout, env=env, input=input)
    if returncode != 0:
        name = os.path.basename(argv[0]) if argv else "?"
        raise StatError(f"{name} exited with status {returncode}: {first_line(err)}")
    return out
