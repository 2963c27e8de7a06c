"""The poke stream ``jobtap:{S}:pokes``: how a push names the jobs that changed.

``jobtap poke JOBID...`` (Slurm's PrologSlurmctld/EpilogSlurmctld, PBS hooks)
appends to it; :class:`~.feed.FeedThread` appends the batches of a backend's
own event feed; :class:`PokeReader` reads it for the collector and coalesces
the ids (a job poked ten times is refreshed once).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence

import redis

from jobtap.keys import POKES_MAXLEN, SiteKeys

log = logging.getLogger("jobtap.collector")


def poke(
    r: redis.Redis, keys: SiteKeys, job_ids: Sequence[str], source: str = "", *, ended: bool = False
) -> str:
    """Append one poke naming ``job_ids``; return its stream id.  ``ended``: the
    jobs are known to have ended (a PBS MoM's epilogue saw it) although the
    server may not show it yet (the ``ended`` field, ``1``)."""
    fields = {"ids": " ".join(job_ids), "source": source or socket.gethostname()}
    if ended:
        fields["ended"] = "1"
    entry = r.xadd(keys.pokes, fields, maxlen=POKES_MAXLEN, approximate=True)
    return entry.decode() if isinstance(entry, bytes) else entry


class PokeReader:
    """Reads the poke stream from where it stood when the reader started (what
    was poked while no collector ran is the first full cycle's business).

    An entry with a ``probe`` field names no job: ``jobtap doctor`` sends one to
    see that pokes are being read; its token is kept in :attr:`probes`.  The
    ids of entries with ``ended`` set are also kept in :attr:`ended`: the
    collector looks at those again until the scheduler shows them ended.
    An entry naming one job with a ``record`` field (the PBS jobobit hook: the
    job's final record as the scheduler will list it) keeps that record in
    :attr:`records` until the job is refreshed; a later poke of the job
    without one drops it (something changed after it: ask the scheduler),
    unless that poke only says the job ended (Slurm's epilog pokes after
    jobcomp's record as often as before it).

    ``carried_soon``: where another poke will bring an ended job's record a
    moment later (Slurm: the epilog pokes, then jobcomp's script sends the
    completion record), a record-less poke of an ended job is held that many
    seconds for it (:meth:`ready`), once the stream has carried a record at
    all: a site that sends none never waits.  ``settle``: seconds any other
    record-less poke is held before it is read, so that the read does not
    meet the scheduler in the middle of what made it poke (Slurm's prolog
    pokes as slurmctld launches the job)."""

    def __init__(
        self,
        r: redis.Redis,
        keys: SiteKeys,
        *,
        max_pending: int = 10_000,
        carried_soon: float = 0.0,
        settle: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.redis = r
        self.keys = keys
        self.max_pending = max_pending
        self.carried_soon = carried_soon
        self.settle = settle
        self.clock = clock
        self.records_seen = False  # a poke carried a record since the reader started
        self.awaiting: dict[str, float] = {}  # record-less: held until (clock)
        self.pending: dict[str, None] = {}  # ordered set of ids waiting for a refresh
        # Counted for jobtap_collector_pokes_*_total (collector/metrics.py).
        self.received = self.coalesced = self.dropped = 0
        self.probes: list[str] = []
        self.ended: set[str] = set()
        self.records: dict[str, bytes] = {}
        last = r.xrevrange(keys.pokes, count=1)
        self.last_id: str = last[0][0].decode() if last else "0-0"

    def read(self, block_ms: int) -> int:
        """Wait up to ``block_ms`` for pokes; add their ids to :attr:`pending`;
        return how many entries were read."""
        reply = self.redis.xread({self.keys.pokes: self.last_id}, count=1000, block=block_ms)
        n = 0
        for _stream, entries in reply or ():
            for entry_id, fields in entries:
                self.last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                n += 1
                if b"probe" in fields:
                    self.probes.append(fields[b"probe"].decode(errors="replace"))
                    continue
                ended = fields.get(b"ended") == b"1"
                ids = (fields.get(b"ids") or b"").decode(errors="replace").split()
                record = fields.get(b"record") if len(ids) == 1 else None
                if record is not None:
                    self.records_seen = True
                for jid in ids:
                    if ended and len(self.ended) < self.max_pending:
                        self.ended.add(jid)
                    if record is not None and len(self.records) < self.max_pending:
                        self.records[jid] = record
                        self.awaiting.pop(jid, None)
                    elif ended and jid in self.records:
                        pass  # its end record came first: this poke says no more
                    else:
                        self.records.pop(jid, None)
                        if ended and self.records_seen and self.carried_soon > 0:
                            self._hold(jid, self.carried_soon)
                        elif not ended and self.settle > 0:
                            self._hold(jid, self.settle)
                    if jid in self.pending:
                        self.coalesced += 1
                        continue
                    if len(self.pending) >= self.max_pending:
                        self.dropped += 1  # the next full cycle will see it anyway
                        continue
                    self.pending[jid] = None
        self.received += n
        return n

    def _hold(self, jid: str, seconds: float) -> None:
        until = self.clock() + seconds
        if self.awaiting.get(jid, until) <= until:  # the later of two holds
            self.awaiting[jid] = until

    def ready(self) -> list[str]:
        """The pending ids not held for a record another poke will carry
        (``carried_soon``), oldest first."""
        if not self.awaiting:
            return list(self.pending)
        now = self.clock()
        for jid in [j for j, until in self.awaiting.items() if until <= now]:
            del self.awaiting[jid]
        return [j for j in self.pending if j not in self.awaiting]

    def next_release(self) -> float:
        """When the first held id stops waiting for its record (``clock``)."""
        return min(self.awaiting.values(), default=float("inf"))

    def take(self, limit: int) -> list[str]:
        """Up to ``limit`` pending ids that are :meth:`ready`, oldest first."""
        ids = self.ready()[:limit]
        for jid in ids:
            del self.pending[jid]
        return ids
