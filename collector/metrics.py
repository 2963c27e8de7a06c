"""The collector's Prometheus metrics (``jobtap collector --metrics-port``).

Naming follows Prometheus' rules: one ``jobtap_`` prefix, base units (seconds),
``_total`` for counters, and no label that grows with users or jobs (``site``,
``tier``, ``kind``, ``probe``, ``cause`` and ``priority`` have a handful of
values each).  Everything is counted where it already is (the cycle's report,
the poke reader's and the feed's own counters) and turned into series here, so
the hooks in the service are one call each and cost nothing when metrics are off.

Series:

- ``jobtap_collector_cycle_duration_seconds{tier}`` (histogram): successful
  cycles, ``tier="full"`` for a full stat of every job (the reconciliation),
  ``"probe"`` for a cycle that probed what changed and stat'ed just that
  (collector/plan.py), ``"pushed"`` for a cycle of a pushed plan (no job
  listing between reconciliations, the pokes bring the changes), ``"refresh"``
  for follow mode's targeted refreshes;
- ``jobtap_collector_probe_duration_seconds{tier,probe}`` (histogram): the
  scheduler's commands (``probe`` = jobs, nodes, queues, history, and
  ``changes`` for the cheap probe of what changed);
- ``jobtap_collector_stat_failures_total{tier,cause}``: failed cycles by cause
  (:func:`failure_cause`);
- ``jobtap_collector_objects_seen{kind}`` (gauge: the last stat),
  ``jobtap_collector_objects_changed_total{kind}``,
  ``jobtap_collector_objects_vanished_total{kind}``;
- ``jobtap_collector_chunks_shipped_total``;
- ``jobtap_queue_backlog_chunks{priority}`` (gauge, read from rq at scrape time);
- ``jobtap_collector_pokes_received_total``, ``..._pokes_coalesced_total``,
  ``..._pokes_dropped_total`` (read from follow.PokeReader at scrape time),
  ``jobtap_collector_poked_jobs_refreshed_total``;
- ``jobtap_collector_feed_restarts_total``;
- ``jobtap_collector_last_success_timestamp_seconds`` and
  ``jobtap_collector_interval_seconds`` (alert: no success for 3 intervals);
- ``jobtap_site_epoch_info{epoch}``: 1 for the site's current epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from jobtap.schema import JOB, NODE, QUEUE

log = logging.getLogger("jobtap.collector")

FULL = "full"
PROBE = "probe"
PUSHED = "pushed"
REFRESH = "refresh"
# Seconds: from a handful of jobs (milliseconds) to a 100,000-job stat (seconds).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
# The cycle report's stages that run a scheduler command -> the probe's name.
PROBES = {
    "probe": "changes",
    "stat": "jobs",
    "stat_nodes": "nodes",
    "stat_queues": "queues",
    "history": "history",
}
# The report's counts of seen and changed objects, per kind.
SEEN = {JOB: "jobs", NODE: "nodes", QUEUE: "queues"}
CHANGED = {JOB: "changed", NODE: "nodes_changed", QUEUE: "queues_changed"}

# The one-line messages of collector/backends/run.py and of the cycle, by cause.
_CAUSES = (
    ("redis:", "redis"),
    ("timed out after", "timeout"),
    ("command not found", "not_found"),
    ("permission denied", "permission"),
    ("exited with status", "exit_status"),
)


def failure_cause(message: str) -> str:
    """What made a cycle fail, from its one-line message: ``redis``, ``timeout``,
    ``not_found``, ``permission``, ``exit_status``, else ``bad_output`` (the
    command ran but printed something that is not what the scheduler prints)."""
    for text, cause in _CAUSES:
        if text in message:
            return cause
    return "bad_output"


def iso_timestamp(text: str) -> float | None:
    """Seconds since the epoch of an ISO-8601 time with offset, or None."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


class _Counted(Collector):
    """Counters kept as plain integers by the objects that count them (the poke
    reader, the feed thread), read at scrape time: nothing on the hot path."""

    def __init__(self, site: str):
        self.site = site
        self.sources: list[tuple[str, str, Callable[[], int]]] = []

    def add(self, name: str, doc: str, read: Callable[[], int]) -> None:
        """Count ``read()`` as ``name`` (in place of an earlier source of that
        name: follow mode starts again after a takeover)."""
        self.sources = [src for src in self.sources if src[0] != name]
        self.sources.append((name, doc, read))

    def collect(self) -> Iterator[Metric]:
        for name, doc, read in self.sources:
            family = CounterMetricFamily(name, doc, labels=["site"])
            family.add_metric([self.site], read())
            yield family


class _Backlog(Collector):
    """Chunks waiting on the site's rq queues, asked from the queue Redis at
    scrape time (one LLEN per queue)."""

    def __init__(self, site: str, queues: dict):
        self.site, self.queues = site, queues

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "jobtap_queue_backlog_chunks",
            "Chunks waiting on the site's rq queues, by priority.",
            labels=["site", "priority"],
        )
        for priority, queue in self.queues.items():
            try:
                family.add_metric([self.site, priority], queue.count)
            except Exception as exc:  # a scrape must not fail because Redis is away
                log.warning("metrics: backlog of %s: %s", queue.name, exc)
        yield family


class CollectorMetrics:
    """The collector's series in a registry of their own (one per service, so
    that tests and benchmarks may run several in one process)."""

    def __init__(self, site: str, registry: CollectorRegistry | None = None):
        self.site = site
        self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self.cycle_duration = Histogram(
            "jobtap_collector_cycle_duration_seconds",
            "Duration of successful collector cycles, by tier (full stat or targeted refresh).",
            ["site", "tier"], buckets=DURATION_BUCKETS, registry=reg,
        )  # fmt: skip
        self.probe_duration = Histogram(
            "jobtap_collector_probe_duration_seconds",
            "Duration of the scheduler's commands (jobs, nodes, queues, history), by tier.",
            ["site", "tier", "probe"], buckets=DURATION_BUCKETS, registry=reg,
        )  # fmt: skip
        self.failures = Counter(
            "jobtap_collector_stat_failures",
            "Cycles that failed and changed nothing, by tier and cause.",
            ["site", "tier", "cause"], registry=reg,
        )  # fmt: skip
        self.seen = Gauge(
            "jobtap_collector_objects_seen",
            "Objects in the scheduler's last full stat, by kind.",
            ["site", "kind"], registry=reg,
        )  # fmt: skip
        self.changed = Counter(
            "jobtap_collector_objects_changed",
            "Objects shipped because they are new or changed, by kind.",
            ["site", "kind"], registry=reg,
        )  # fmt: skip
        self.vanished = Counter(
            "jobtap_collector_objects_vanished",
            "Objects that left the scheduler's live list, by kind.",
            ["site", "kind"], registry=reg,
        )  # fmt: skip
        self.chunks = Counter(
            "jobtap_collector_chunks_shipped", "Chunks enqueued for the workers.",
            ["site"], registry=reg,
        ).labels(site)  # fmt: skip
        self.refreshed = Counter(
            "jobtap_collector_poked_jobs_refreshed",
            "Poked jobs stat'ed again by follow mode's targeted refreshes.",
            ["site"], registry=reg,
        ).labels(site)  # fmt: skip
        self.last_success = Gauge(
            "jobtap_collector_last_success_timestamp_seconds",
            "When the last successful full cycle observed the scheduler (Unix time).",
            ["site"], registry=reg,
        ).labels(site)  # fmt: skip
        self.interval = Gauge(
            "jobtap_collector_interval_seconds", "Seconds between two full cycles.",
            ["site"], registry=reg,
        ).labels(site)  # fmt: skip
        self.epoch_info = Gauge(
            "jobtap_site_epoch_info",
            "The site's current epoch (a new one begins when Redis lost the site's data).",
            ["site", "epoch"], registry=reg,
        )  # fmt: skip
        self._epoch: str | None = None
        self.lease_held = Gauge(
            "jobtap_collector_lease_held",
            "1 while this collector holds the site's lease (active), 0 while it waits (standby).",
            ["site"], registry=reg,
        ).labels(site)  # fmt: skip
        self.lease_generation = Gauge(
            "jobtap_collector_lease_generation",
            "The generation of the site's lease this collector holds, or last saw held.",
            ["site"], registry=reg,
        ).labels(site)  # fmt: skip
        self.takeovers = Counter(
            "jobtap_collector_lease_takeovers",
            "Times this collector took the site's lease (its start included).",
            ["site"], registry=reg,
        ).labels(site)  # fmt: skip
        self.step_downs = Counter(
            "jobtap_collector_lease_step_downs",
            "Times this collector lost the site's lease and stepped down to a standby.",
            ["site"], registry=reg,
        ).labels(site)  # fmt: skip
        self.counted = _Counted(site)
        reg.register(self.counted)

    # -- the service's hooks ------------------------------------------------------------------
    def cycle_done(self, report, duration: float, tier: str = FULL) -> None:
        """One successful cycle or refresh (``report``: a cycle.CycleReport)."""
        site, counts = self.site, report.counts
        self.cycle_duration.labels(site, tier).observe(duration)
        for stage, probe in PROBES.items():
            if stage in report.timings:
                self.probe_duration.labels(site, tier, probe).observe(report.timings[stage])
        for kind, name in CHANGED.items():
            if counts.get(name):
                self.changed.labels(site, kind).inc(counts[name])
        if counts.get("vanished"):
            self.vanished.labels(site, JOB).inc(counts["vanished"])
        if counts.get("chunks"):
            self.chunks.inc(counts["chunks"])
        if tier == REFRESH:
            self.refreshed.inc(counts.get("poked", 0))
        else:
            for kind, name in SEEN.items():
                if name in counts:
                    self.seen.labels(site, kind).set(counts[name])
            at = iso_timestamp(report.observed_at)
            if at is not None:
                self.last_success.set(at)

    def cycle_failed(self, message: str, tier: str = FULL) -> None:
        self.failures.labels(self.site, tier, failure_cause(message)).inc()

    def lease_changed(
        self, held: bool, generation: int, *, took_over: bool = False, stepped_down: bool = False
    ) -> None:
        self.lease_held.set(1 if held else 0)
        if generation:
            self.lease_generation.set(generation)
        if took_over:
            self.takeovers.inc()
        if stepped_down:
            self.step_downs.inc()

    def set_epoch(self, epoch: str) -> None:
        if epoch == self._epoch:
            return
        if self._epoch is not None:
            self.epoch_info.remove(self.site, self._epoch)
        self.epoch_info.labels(self.site, epoch).set(1)
        self._epoch = epoch

    def start(self, interval: float, queues: dict) -> None:
        """The service's settings: its ``interval``, and the rq ``queues``
        (priority -> Queue) whose backlog is read at scrape time."""
        self.interval.set(interval)
        self.registry.register(_Backlog(self.site, queues))

    def watch_pokes(self, pokes) -> None:
        """Report a follow.PokeReader's counters."""
        c = self.counted
        c.add("jobtap_collector_pokes_received", "Poke stream entries read.",
              lambda: pokes.received)  # fmt: skip
        c.add("jobtap_collector_pokes_coalesced",
              "Poked job ids already waiting for a refresh (merged into it).",
              lambda: pokes.coalesced)  # fmt: skip
        c.add("jobtap_collector_pokes_dropped",
              "Poked job ids dropped because too many were waiting (the next full cycle "
              "sees them).", lambda: pokes.dropped)  # fmt: skip

    def watch_feed(self, feed) -> None:
        """Report a follow.FeedThread's restarts."""
        self.counted.add(
            "jobtap_collector_feed_restarts",
            "Times the scheduler's event feed ended and was started again.",
            lambda: feed.restarts,
        )
