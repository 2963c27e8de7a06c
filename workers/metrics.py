"""What the workers tell operators: each applied chunk's counts, written to the
site's ``meta`` hash (``jobtap status``) and, with ``jobtap worker
--metrics-port``, counted in Prometheus series.

The counting itself happens in :mod:`jobtap.workers.apply` (the chunk's totals);
this module only reports them, once per chunk.  Series (Prometheus' naming
rules: one ``jobtap_`` prefix, base units, ``_total`` counters, no per-user or
per-job label):

- ``jobtap_worker_chunks_applied_total{kind}``;
- ``jobtap_worker_objects_applied_total{kind}``: objects written (a record equal
  to the stored one counts: its cycle is noted), ``..._objects_skipped_total{kind}``:
  stale, already final, or nothing to remove;
- ``jobtap_worker_events_total{type}``: events appended and published, by type
  (new, state, update, final, removed); their sum is the site stream's growth;
- ``jobtap_worker_version_conflicts_total``: batches another worker got to first
  (read again and redone);
- ``jobtap_worker_apply_duration_seconds{kind}`` (histogram): one chunk, all its
  atomic batches of ``Settings.batch`` objects (they overlap with Redis, so the
  chunk is the unit that adds up);
- ``jobtap_worker_publish_lag_seconds`` (histogram): from the collector's
  observation (the chunk's ``observed_at``) to the chunk's events being published.
"""

from __future__ import annotations

from datetime import datetime

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram

from jobtap.contract import meta
from jobtap.events import FINAL, NEW, REMOVED, STATE, UPDATE
from jobtap.keys import SiteKeys

EVENT_TYPES = (NEW, STATE, UPDATE, FINAL, REMOVED)
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)


def lag_seconds(observed_at: str, now: float) -> float | None:
    """Seconds from ``observed_at`` (ISO-8601 with offset) to ``now`` (Unix time)."""
    try:
        return max(0.0, now - datetime.fromisoformat(observed_at).timestamp())
    except (TypeError, ValueError):
        return None


class WorkerMetrics:
    """The worker's series in a registry of their own."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.chunks = Counter(
            "jobtap_worker_chunks_applied", "Chunks applied, by kind.",
            ["site", "kind"], registry=reg,
        )  # fmt: skip
        self.objects = Counter(
            "jobtap_worker_objects_applied", "Objects written, by kind.",
            ["site", "kind"], registry=reg,
        )  # fmt: skip
        self.skipped = Counter(
            "jobtap_worker_objects_skipped",
            "Objects not written: stale, already final, or nothing to remove.",
            ["site", "kind"], registry=reg,
        )  # fmt: skip
        self.events = Counter(
            "jobtap_worker_events", "Events appended to the streams and published, by type.",
            ["site", "type"], registry=reg,
        )  # fmt: skip
        self.conflicts = Counter(
            "jobtap_worker_version_conflicts",
            "Atomic batches refused because another worker changed one of their objects.",
            ["site"], registry=reg,
        )  # fmt: skip
        self.fenced = Counter(
            "jobtap_worker_chunks_fenced",
            "Chunks dropped unwritten: their collector's lease generation was deposed.",
            ["site"], registry=reg,
        )  # fmt: skip
        self.duration = Histogram(
            "jobtap_worker_apply_duration_seconds", "Time to apply one chunk, by kind.",
            ["site", "kind"], buckets=DURATION_BUCKETS, registry=reg,
        )  # fmt: skip
        self.lag = Histogram(
            "jobtap_worker_publish_lag_seconds",
            "From the collector's observation to the publication of the chunk's events.",
            ["site"], buckets=LAG_BUCKETS, registry=reg,
        )  # fmt: skip

    def chunk_applied(
        self, site: str, kind: str, totals: dict[str, int], duration: float, lag: float | None
    ) -> None:
        self.chunks.labels(site, kind).inc()
        self.objects.labels(site, kind).inc(totals["objects"])
        if totals["skipped"]:
            self.skipped.labels(site, kind).inc(totals["skipped"])
        for etype in EVENT_TYPES:
            if totals.get(etype):
                self.events.labels(site, etype).inc(totals[etype])
        if totals.get("fenced"):
            self.fenced.labels(site).inc()
        if totals["conflicts"]:
            self.conflicts.labels(site).inc(totals["conflicts"])
        self.duration.labels(site, kind).observe(duration)
        if lag is not None and totals["events"]:
            self.lag.labels(site).observe(lag)


def note_in_meta(
    r: redis.Redis, keys: SiteKeys, totals: dict[str, int], at: str, lag: float | None
) -> None:
    """Add a chunk's counts to the site's ``meta`` (what ``jobtap status`` shows):
    one pipelined round trip per chunk."""
    pipe = r.pipeline(transaction=False)
    pipe.hincrby(keys.meta, meta.APPLIED_CHUNKS, 1)
    pipe.hincrby(keys.meta, meta.APPLIED_OBJECTS, totals["objects"])
    for etype in EVENT_TYPES:
        if totals.get(etype):
            pipe.hincrby(keys.meta, meta.events_of(etype), totals[etype])
    if totals.get("fenced"):
        pipe.hincrby(keys.meta, meta.FENCED_CHUNKS, 1)
    if totals["conflicts"]:
        pipe.hincrby(keys.meta, meta.VERSION_CONFLICTS, totals["conflicts"])
    if totals["events"]:
        fields: dict[str, str | float] = {meta.LAST_APPLIED_AT: at}
        if lag is not None:
            fields[meta.LAST_PUBLISH_LAG_S] = round(lag, 4)
        pipe.hset(keys.meta, mapping=fields)
    pipe.execute()
