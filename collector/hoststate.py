"""What the collector keeps on its own host: the site's epoch and last cycle.

Redis restored from an older snapshot cannot tell by itself that it went back:
its cycle counter and records are simply older.  The collector's own record of
the last cycle it ran, kept outside Redis, shows it (the epoch's ``behind``
cause, see ``jobtap.contract.epoch``), keeps cycle numbers growing across such a loss
(chunks of later cycles may still wait in a separate queue Redis), and tells a
restarted collector whether the epoch changed while it was away.

The state is a small JSON file, rewritten after every cycle that shipped
something, atomically (a temporary file, fsync, rename, fsync of the directory),
so a crash leaves the old state or the new one, never half of one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("jobtap.collector")

FILENAME = "collector.json"


def default_state_dir(site: str) -> Path:
    """Where a collector of ``site`` keeps its state by default:
    ``$STATE_DIRECTORY/SITE`` under systemd (``StateDirectory=jobtap``), else
    ``$XDG_STATE_HOME/jobtap/SITE`` if that is set, else ``/var/lib/jobtap/SITE``
    as root and ``~/.local/state/jobtap/SITE`` for anyone else."""
    systemd = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if systemd:
        return Path(systemd) / site
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(xdg) / "jobtap" / site
    if os.geteuid() == 0:
        return Path("/var/lib/jobtap") / site
    return Path.home() / ".local" / "state" / "jobtap" / site


@dataclass
class HostState:
    """The collector's memory of a site; ``path`` None keeps it in memory only
    (tests, and collectors run inside another program)."""

    path: Path | None = None
    epoch: str | None = None
    cycle: int = 0
    _failing: str | None = field(default=None, repr=False)

    @classmethod
    def load(cls, path: Path | None) -> HostState:
        """The state saved at ``path``; empty if there is none or it is unreadable."""
        state = cls(path)
        if path is None or not path.exists():
            return state
        try:
            data = json.loads(path.read_text())
            state.epoch = data.get("epoch") or None
            state.cycle = int(data.get("cycle") or 0)
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("ignoring the collector state in %s: %s", path, exc)
        return state

    def save(self, epoch: str | None, cycle: int) -> None:
        """Remember ``epoch`` and ``cycle``; a failure to write is logged (once
        per kind of failure) and does not stop the collector."""
        self.epoch, self.cycle = epoch, max(self.cycle, cycle)
        if self.path is None:
            return
        try:
            _write_atomically(self.path, json.dumps({"epoch": epoch, "cycle": self.cycle}))
        except OSError as exc:
            if str(exc) != self._failing:
                log.warning("cannot keep the collector state in %s: %s", self.path, exc)
            self._failing = str(exc)
            return
        self._failing = None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
