"""A test-only stand-in for Flux's Python bindings: the part the journal reader
(collector/backends/journal_reader/flux_journal_reader.py) uses, replaying the
journal captured on flux-core 0.88 (``tests/fixtures/flux/journal.*.jsonl``).

``sim/standins/flux_standin.py`` puts this folder on ``PYTHONPATH`` for ``flux
python`` as the real ``flux`` command puts its bindings there; nothing else of
the project is importable then.  Standard library only.

Copied behaviour (flux-core's ``flux.Flux`` and ``flux.job.JournalConsumer``,
and the job manager's ``job-manager.events-journal`` service, journal.c):

* ``Flux()`` connects to the instance; with the control file's mode ``fail``
  (for the program ``python``) it raises ``OSError`` ENOENT as a real handle does
  when no broker is reachable; ``hang`` takes 60 s; ``empty``: an instance whose
  journal holds nothing.
* ``JournalConsumer(handle, full=True, since=0.0, include_sentinel=False)``,
  ``.start()`` (returns itself), ``.poll(timeout=-1.0)``: see ``flux.job.journal``.

The control file (``$JOBTAP_FAKE_FLUX``, as for the command stand-in) chooses the
journal: ``"journal"``: ``"consumer"`` (default), ``"raw"`` or a path; ``"journal_speed"``:
0 (default) delivers the recorded live events at once, X replays them X times
faster than recorded (``"journal_clock"``: a file where the consumer writes
the wall time it started and the first live event's timestamp, so that the
command stand-in can answer as of the same moment); ``"journal_delay"``: seconds
after the request before the live events begin (as if the jobs came later); ``"journal_end"``:
``"close"`` (default: after the last
recorded event the stream ends, as when the instance stops) or ``"open"`` (it
stays open and quiet); ``"journal_owner"``: false makes the job manager refuse
the request (EPERM), as it refuses anyone but the instance owner.
"""

from __future__ import annotations

import errno
import json
import os
import time

CONNECT_ERROR = "Unable to connect to Flux: broker socket /run/flux/local was not found"


def control() -> dict:
    path = os.environ.get("JOBTAP_FAKE_FLUX")
    if not path:
        raise OSError(errno.ENOENT, CONNECT_ERROR)
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


class Flux:
    """A handle on the (recorded) instance."""

    def __init__(self, url: str | None = None) -> None:
        self.control = control()
        modes = self.control.get("modes", {})
        self.mode = modes.get("python", self.control.get("mode", "ok"))
        if self.mode == "fail":
            raise OSError(errno.ENOENT, CONNECT_ERROR)
        if self.mode == "hang":
            time.sleep(60)
