"""A real terminal for tests of full-screen commands: a tmux server of the
test's own (its own socket), one window of a given size running a command,
whose screen is read with capture-pane and typed into with send-keys.  The pane
stays after the command exits, so a test can read its exit status."""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

_serial = itertools.count()


class Tmux:
    def __init__(self, workdir: Path):
        if shutil.which("tmux") is None:
            pytest.fail("tmux not found: deploy/setup-dev.sh installs it")
        self.socket = f"jobtap-test-{os.getpid()}-{next(_serial)}"
        self.conf = workdir / "tmux.conf"
        self.conf.write_text("set -g remain-on-exit on\nset -g status off\n")

    def tmux(self, *args: str) -> str:
        res = subprocess.run(["tmux", "-L", self.socket, "-f", str(self.conf), *args],
                             capture_output=True, text=True, timeout=10)  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"tmux {args[0]}: {res.stderr.strip()}")
        return res.stdout

    def start(self, argv: list[str], env: dict[str, str], width=160, height=60) -> Tmux:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        command = f"env -i {exports} {shlex.join(argv)}"
        self.tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), command)
        return self

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "t")

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def exit_status(self) -> int | None:
        """The command's exit status once it ended (-N: killed by signal N), else None."""
        out = self.tmux("display", "-p", "-t", "t",
                        "#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}")  # fmt: skip
        dead, status, signal = out.strip().split(":")
        if dead != "1":
            return None
        return int(status) if status else -int(signal or 0)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
