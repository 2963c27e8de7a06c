"""The field names of a site's ``meta`` hash (``jobtap:{S}:meta``, see
:attr:`jobtap.contract.keys.SiteKeys.meta`): the collector's health, the site
epoch, the lease counter, and the workers' counts.

Each field is defined here once, with who writes it and who reads it; every
stage imports the name from here (``tests/test_contract.py`` fails on a field
name spelled as a literal anywhere else).  A new field goes here.  The Lua
scripts that touch ``meta`` (``epoch.lua``, the lease's scripts) get the names
through :func:`lua_prelude`, a Lua table ``META`` made from :data:`FIELDS`.

The collector's health channel (``SiteKeys.health_channel``) carries the fields
of its last ``meta`` write, under the same names.
"""

from __future__ import annotations

# -- the collector's run (collector/service.py writes; jobtap status, doctor, top read) ---
STATUS = "status"  # starting, ok, failing, stopped
STOPPED_AT = "stopped_at"  # when the collector stopped
BACKEND = "backend"  # the backend's name
INTERVAL = "interval"  # seconds between cycles
RECONCILE_EVERY = "reconcile_every"  # seconds between full reconciliations
PROBING = "probing"  # 1: the plan probes between reconciliations
PUSHED = "pushed"  # 1: the plan waits for pokes between reconciliations
COLLECTOR = "collector"  # the holder identity of the collector that started
STARTED_AT = "started_at"  # when it started
FOLLOW = "follow"  # 1: follow mode (pokes and feeds)
LEASE_HOLDER = "lease_holder"  # the lease holder that wrote the start

# -- each cycle (collector/service.py writes; jobtap status, doctor, top read) ------------
LAST_CYCLE = "last_cycle"  # the last cycle's number
LAST_CYCLE_AT = "last_cycle_at"  # its observation time
LAST_OK_AT = "last_ok_at"  # the last cycle that went well
LAST_DURATION_S = "last_duration_s"  # how long the last cycle took
CONSECUTIVE_FAILURES = "consecutive_failures"  # cycles failed in a row
LAST_WARNING = "last_warning"  # the last cycle's warnings
LAST_ERROR = "last_error"  # the last failed cycle's error
LAST_ERROR_AT = "last_error_at"  # and when
LAST_BAD = "last_bad"  # records the last cycle could not read
BAD_RECORDS = "bad_records"  # records never read, in all (HINCRBY)
CYCLES_OK = "cycles_ok"  # cycles that went well (HINCRBY)
CYCLES_FAILED = "cycles_failed"  # cycles that failed (HINCRBY)
CHUNKS_SHIPPED = "chunks_shipped"  # chunks shipped in all (HINCRBY)
LAST_TIER = "last_tier"  # the last cycle's tier (collector/cycle.py's report)
# the scheduler as the backend describes it (backends' describe(): jobtap status, doctor)
SCHEDULER = "scheduler"
SCHEDULER_PATHS = "scheduler_paths"  # the ways the backend reads it

# -- the cycle counter and the history window (collector/cycle.py writes and reads) -------
CYCLE = "cycle"  # cycles counted (HINCRBY; epoch.lua raises it, workers read it)
HISTORY_WINDOW = "history_window"  # wall-clock start of the last reconciliation

# -- follow mode (collector/service.py and follow.py write; jobtap status, doctor read) ---
POKES_READ = "pokes_read"  # the poke stream's id read up to
PROBE_SEEN = "probe_seen"  # the last `jobtap doctor` probe poke seen (doctor writes one)
PROBE_SEEN_AT = "probe_seen_at"  # and when
REFRESHES = "refreshes"  # refreshes of poked jobs (HINCRBY)
REFRESHES_FAILED = "refreshes_failed"  # refreshes that failed (HINCRBY)
POKED_JOBS_REFRESHED = "poked_jobs_refreshed"  # jobs refreshed after a poke (HINCRBY)
LAST_REFRESH_AT = "last_refresh_at"  # the last refresh's observation time
POKES_RECEIVED = "pokes_received"  # pokes read
POKES_COALESCED = "pokes_coalesced"  # pokes of a job already pending
POKES_DROPPED = "pokes_dropped"  # pokes dropped (too many pending)
FEED = "feed"  # the event feed's name ("" without one)
FEED_STATUS = "feed_status"  # up, restarting, failing (collector/follow.py)
FEED_RESTARTS = "feed_restarts"  # runs of the feed that ended
FEED_FAILURES = "feed_failures"  # runs that ended without a good run between
FEED_LAST_ERROR = "feed_last_error"  # the feed's last error line
FEED_LAST_ERROR_AT = "feed_last_error_at"  # and when
FEED_UP_SINCE = "feed_up_since"  # when its current run came up
# what a new run of the collector clears first (an earlier run's feed)
FEED_FIELDS = (FEED, FEED_STATUS, FEED_RESTARTS, FEED_FAILURES, FEED_LAST_ERROR,
               FEED_LAST_ERROR_AT, FEED_UP_SINCE)  # fmt: skip

# -- the site epoch (epoch.lua writes, collector and workers alike; jobtap status reads) ---
EPOCH = "epoch"  # the epoch in force (events' ids carry it)
EPOCH_RUN_ID = "epoch_run_id"  # the Redis run_id it began on
EPOCH_BEGAN_AT = "epoch_began_at"  # when it began
EPOCH_CAUSE = "epoch_cause"  # why: empty, restart, behind
EPOCH_PREVIOUS = "epoch_previous"  # the epoch before it
EPOCHS = "epochs"  # epochs begun (HINCRBY)

# -- the lease (lease.py's acquire INCRs it; its fence, in the workers' write, reads it) --
LEASE_GENERATION = "lease_generation"

# -- the workers (workers/metrics.py writes; jobtap status reads) -------------------------
APPLIED_CHUNKS = "applied_chunks"  # chunks applied (HINCRBY)
APPLIED_OBJECTS = "applied_objects"  # objects in them (HINCRBY)
FENCED_CHUNKS = "fenced_chunks"  # chunks of a deposed lease generation, dropped (HINCRBY)
VERSION_CONFLICTS = "version_conflicts"  # writes retried after a conflict (HINCRBY)
LAST_APPLIED_AT = "last_applied_at"  # the last chunk with events: its observation time
LAST_PUBLISH_LAG_S = "last_publish_lag_s"  # its lag from observation to publish


# -- fields named after something (one function each, writer and reader alike) ------------
def count(name: str) -> str:
    """The last cycle's count of ``name`` (jobs, changed, chunks...: the cycle report)."""
    return f"count_{name}"


def stage_time(stage: str) -> str:
    """The last cycle's seconds in ``stage`` (the cycle report's timings)."""
    return f"time_{stage}_s"


def cycles_of(tier: str) -> str:
    """Cycles of ``tier`` (HINCRBY; collector/service.py writes, jobtap status reads)."""
    return f"cycles_{tier}"


def failures_of(cause: str) -> str:
    """Failed cycles of ``cause`` (HINCRBY; collector/service.py writes)."""
    return f"failures_{cause}"


def tier_last(tier: str, what: str) -> str:
    """``tier``'s last run: ``what`` is at, s, commands, bytes or jobs
    (collector/cycle.py's report writes; jobtap status reads)."""
    return f"{tier}_last_{what}"


def events_of(etype: str) -> str:
    """Events of ``etype`` published (HINCRBY; workers/metrics.py writes)."""
    return f"events_{etype}"


FIELDS: dict[str, str] = {
    name: value
    for name, value in dict(globals()).items()
    if name.isupper() and isinstance(value, str)
}
"""Every fixed field: its Python name -> the field."""


def lua_prelude() -> str:
    """Lua that defines ``META``, a table of :data:`FIELDS` (``META.EPOCH`` is
    ``'epoch'``), for the scripts that touch ``meta``."""
    pairs = ", ".join(f"{name} = '{value}'" for name, value in sorted(FIELDS.items()))
    return f"local META = {{{pairs}}}\n"
