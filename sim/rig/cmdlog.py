"""Counting the scheduler commands a tool runs: wrapper scripts, first on PATH,
that log each call (name and arguments, one line) and run the real command.

``CommandLog.install(monkeypatch)`` puts them first on ``PATH`` for this process
and its children; the real commands are resolved before that, so a test's own
calls through absolute paths (:attr:`CommandLog.real`) are not logged."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable
from pathlib import Path

STATUS_COMMANDS = ("sacct", "squeue", "scontrol", "sinfo", "qstat")


class CommandLog:
    def __init__(self, folder: Path, names: Iterable[str] = STATUS_COMMANDS):
        self.bin = folder / "bin"
        self.file = folder / "commands.log"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.file.touch()
        self.real: dict[str, str] = {}
        for name in names:
            real = shutil.which(name)
            if real is None:
                continue
            self.real[name] = real
            wrapper = self.bin / name
            wrapper.write_text(
                "#!/bin/sh\n"
                f'echo "{name} $*" >> {shlex.quote(str(self.file))}\n'
                f'exec {shlex.quote(real)} "$@"\n'
            )
            wrapper.chmod(0o755)

    def install(self, monkeypatch) -> CommandLog:
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        return self

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for a child process with the wrappers first on PATH."""
        env = dict(base if base is not None else os.environ)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def calls(self) -> list[str]:
        return [line for line in self.file.read_text().splitlines() if line]

    def names(self) -> list[str]:
        return [line.split()[0] for line in self.calls()]

    def clear(self) -> None:
        self.file.write_text("")


def status_calls(calls: list[str]) -> list[str]:
    """The calls that ask the scheduler about jobs' states: every ``squeue``,
    ``scontrol show job`` and ``qstat``, and ``sacct`` except the stock Snakemake
    plugin's account guess on its submit path (``sacct -nu USER -o Account``)."""
    out = []
    for call in calls:
        words = call.split()
        if words[0] in ("squeue", "qstat") or words[:3] == ["scontrol", "show", "job"]:
            out.append(call)
        elif words[0] == "sacct" and not any(w.startswith("Account") for w in words):
            out.append(call)
    return out
