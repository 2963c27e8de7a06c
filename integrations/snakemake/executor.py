"""``jobtap-slurm``: snakemake-executor-plugin-slurm's executor with status from
jobtap.

Submission (``sbatch``, arrays included), cancellation (``scancel``), options and
resources are the stock plugin's: :class:`Executor` subclasses it and overrides
two things only.

- ``check_active_jobs`` (one status round): every active job of the round is read
  from jobtap in one pipelined read, no ``sacct``/``squeue``/``scontrol``; a record
  is mapped to the Slurm state the stock round would have read from ``sacct`` and
  handled as the stock round handles it (COMPLETED: success, its log removed
  unless kept; the failure states: error, with jobtap's reason and exit code;
  NODE_FAIL: the node excluded, requeue honoured; PREEMPTED: one warning).  Jobs
  the shared rules (:mod:`jobtap.integrations.rules`) hand back, because Redis
  cannot be reached or jobtap has not seen them within ``unseen_timeout``, go
  through the stock round (its ``sacct`` query), at most once per
  ``init_seconds_before_status_checks`` each.
- ``sleep`` (between rounds): instead of 40 s growing to 180 s, wait until a job
  of this run changes in jobtap (a subscription to the user's jobs), at most
  ``max_wait`` seconds.  While Redis is away, the stock sleep and backoff apply.
"""

# No ``from __future__ import annotations``: Snakemake reads the settings' field
# types at run time to build its command-line options.
import argparse
import asyncio
import logging
import re
import sys
import threading
import time
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Optional

from snakemake_executor_plugin_slurm import Executor as StockExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings as StockSettings
from snakemake_executor_plugin_slurm import common_settings
from snakemake_interface_common.exceptions import WorkflowError

import jobtap
from jobtap.integrations.rules import UNREACHABLE, UNSEEN_TIMEOUT, Settings, Tracker, watch_user

__all__ = ["Executor", "ExecutorSettings", "common_settings", "slurm_state"]

log = logging.getLogger("jobtap.snakemake")

MAX_WAIT = 30  # seconds between two rounds when nothing changes (a safety net)
RESUBSCRIBE_EVERY = 30.0  # seconds between attempts to subscribe while Redis is away
TICK = 0.05  # how often the sleeping round looks at its wake-up flag

# The states the stock round reads from sacct and acts on.
FAIL_STATI = (
    "BOOT_FAIL",
    "CANCELLED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "TIMEOUT",
    "ERROR",
)
KNOWN_FINALS = frozenset({"COMPLETED", "PREEMPTED", *FAIL_STATI})
JOBTAP_FINALS = {"completed": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED"}


def slurm_state(record: jobtap.Job) -> str | None:
    """The state the stock round would have read from ``sacct`` for this record,
    once it is final (``UNKNOWN`` for a job that left Slurm with no history, as
    the stock round treats it); ``None`` while it is pending or running."""
    if record.state not in jobtap.TERMINAL and not record.final:
        return None
    word = (record.native_state or "").split(" ")[0].upper()
    if word in KNOWN_FINALS:
        return word
    return JOBTAP_FINALS.get(record.state or "", "UNKNOWN")


def _setting(default: Any, help: str) -> Any:
    """A field of :class:`ExecutorSettings`: Snakemake makes it the option
    ``--jobtap-slurm-<name>``, neither required nor read from the environment (as
    the stock plugin's own)."""
    return field(default=default, metadata={"help": help, "env_var": False, "required": False})


NAME = "jobtap-slurm"
STOCK_PREFIX = "--slurm-"
OUR_PREFIX = f"--{NAME}-"


def _respelled(cls: type) -> type:
    """The stock plugin's settings declared again on ``cls`` with their help
    spelled as Snakemake spells this plugin's options: Snakemake names every
    setting of an executor plugin ``--<executor>-<name>``, so the stock
    ``--slurm-logdir`` is ``--jobtap-slurm-logdir`` here, and the stock help's
    "Use as: --slurm-array-jobs=..." would send users to the stock executor's
    option, which ``--executor jobtap-slurm`` never reads."""
    annotations = cls.__dict__.get("__annotations__", {})
    for stock in fields(StockSettings):
        if stock.name in annotations:
            continue
        metadata = dict(stock.metadata)
        metadata["help"] = re.sub(r"(?<![\w-])--slurm-", OUR_PREFIX, metadata["help"])
        annotations[stock.name] = stock.type
        setattr(
            cls,
            stock.name,
            field(default=stock.default, default_factory=stock.default_factory, metadata=metadata),
        )
    cls.__annotations__ = annotations
    return cls


def stock_spellings(args: argparse.Namespace) -> list[str]:
    """The stock executor's options given in ``args`` (Snakemake's parsed command
    line and profiles), as the user spelled them: ``--executor jobtap-slurm``
    never reads them."""
    given = []
    for stock in fields(StockSettings):
        value = getattr(args, f"slurm_{stock.name}", MISSING)
        if value is not MISSING:
            given.append(STOCK_PREFIX + stock.name.replace("_", "-"))
    return given


def _parsed_command_line() -> argparse.Namespace | None:
    """Snakemake's parsed command line while it builds these settings from it
    (``Plugin.get_settings(args)``, called by ``snakemake.cli.args_to_api``), or
    None when the settings are made otherwise (Snakemake's API, tests)."""
    frame = sys._getframe(1)
    for _ in range(8):  # __post_init__, the dataclass's __init__, get_settings
        if frame is None:
            break
        args = frame.f_locals.get("args")
        if isinstance(args, argparse.Namespace) and getattr(args, "executor", None) == NAME:
            return args
        frame = frame.f_back
    return None


@dataclass
@_respelled
class ExecutorSettings(StockSettings):
    """The stock plugin's settings and jobtap's, all spelled
    ``--jobtap-slurm-<name>`` on Snakemake's command line (as Snakemake spells
    every executor plugin's settings); a stock ``--slurm-<name>`` given with
    ``--executor jobtap-slurm`` is refused, with the spelling to use."""

    redis: Optional[str] = _setting(  # noqa: UP045 (Snakemake reads the annotation)
        None,
        "The jobtap Redis (redis://[user:password@]host:port/db, may end in "
        "?site=NAME). Default: $JOBTAP_REDIS, then the jobtap credential file.",
    )
    site: Optional[str] = _setting(  # noqa: UP045
        None,
        "The jobtap site. Default: the URL's ?site=, $JOBTAP_SITE, "
        "then the jobtap credential file.",
    )
    credentials: Optional[str] = _setting(  # noqa: UP045
        None, "A jobtap credential file (default ~/.config/jobtap/credentials)."
    )
    unseen_timeout: Optional[int] = _setting(  # noqa: UP045
        int(UNSEEN_TIMEOUT),
        "Seconds a submitted job may stay unknown to jobtap before the "
        "stock status query (sacct) is asked about it.",
    )
    max_wait: Optional[int] = _setting(  # noqa: UP045
        MAX_WAIT,
        "Longest time in seconds between two status rounds when no job "
        "of the run changes in jobtap.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        args = _parsed_command_line()
        given = stock_spellings(args) if args is not None else []
        if given:
            respelled = ", ".join(OUR_PREFIX + o.removeprefix(STOCK_PREFIX) for o in given)
            raise WorkflowError(
                f"{', '.join(given)}: the stock slurm executor's option(s), which "
                f"--executor {NAME} does not read; spell them {respelled} "
                f"(Snakemake prefixes an executor's options with its name)"
            )


class Executor(StockExecutor):
    """The stock Slurm executor, status from jobtap (see the module's docstring)."""

    def __post_init__(self, test_mode: bool = False) -> None:
        super().__post_init__(test_mode)
        s = self.workflow.executor_settings
        settings = Settings(
            redis_url=getattr(s, "redis", None),
            site=getattr(s, "site", None),
            credentials=getattr(s, "credentials", None),
            unseen_timeout=float(getattr(s, "unseen_timeout", None) or UNSEEN_TIMEOUT),
        )
        ask_every = float(getattr(s, "init_seconds_before_status_checks", None) or 40)
        self.jobtap = Tracker(
            settings,
            "Snakemake's jobtap-slurm executor",
            ask_every,
            self.logger,  # type: ignore[arg-type]
        )
        self._max_wait = float(getattr(s, "max_wait", None) or MAX_WAIT)
        self._run_jobs: set[str] = set()
        self._wake = threading.Event()
        self._subscription: jobtap.Subscription | None = None
        self._subscribe_after = 0.0
        self.stock_rounds = 0
        """Rounds that asked the stock query (the fallback)."""

    # -- submissions ----------------------------------------------------------------------
    def report_job_submission(self, job_info: Any) -> None:
        jid = job_info.external_jobid
        if jid:
            self._run_jobs.add(jid)
            # the record of an older job with this id was submitted before this (a
            # reused id); the report comes just after sbatch, clock_skew covers it
            self.jobtap.track(jid, time.time())
        super().report_job_submission(job_info)
        self._wake.set()  # a round now: it subscribes (off the submit path) and reads

    # -- the subscription that wakes the status loop --------------------------------------
    def _on_change(self, change: jobtap.Change) -> None:
        if change.record.id in self._run_jobs:
            self._wake.set()

    def _ensure_subscribed(self) -> None:
        if self._subscription is not None and not self._subscription.closed:
            return
        if time.monotonic() < self._subscribe_after:
            return
        try:
            self._subscription = watch_user(
                self.jobtap.settings, self._on_change, self.jobtap.client
            )
        except UNREACHABLE as exc:
            self._subscribe_after = time.monotonic() + RESUBSCRIBE_EVERY
            self.jobtap.outage.failed(exc)

    async def sleep(self) -> None:
        if getattr(self, "jobtap", None) is None:  # the wait thread starts before __post_init__
            await asyncio.sleep(TICK)
            return
        if self.jobtap.outage.reason is not None:
            await super().sleep()  # jobtap away: the stock pace
            return
        deadline = time.monotonic() + self._max_wait
        while not self._wake.is_set() and time.monotonic() < deadline and self.wait:
            await asyncio.sleep(TICK)
        self._wake.clear()

    # -- one status round --------------------------------------------------------------------
    async def check_active_jobs(self, active_jobs: list[Any]):  # type: ignore[override]
        if not active_jobs:
            return
        await asyncio.to_thread(self._ensure_subscribed)
        ids = [j.external_jobid for j in active_jobs]
        async with self.status_rate_limiter:
            verdicts = await asyncio.to_thread(self.jobtap.read, ids)
        ask = []
        for j in active_jobs:
            verdict = verdicts[j.external_jobid]
            if verdict.kind == "ask":
                ask.append(j)
            elif verdict.kind == "record" and verdict.record is not None:
                state = slurm_state(verdict.record)
                if state is None or not self._handle(j, state, verdict.record):
                    yield j
            else:  # not seen yet, or asked lately: still queued or running
                yield j
        if ask:
            self.stock_rounds += 1
            async for j in super().check_active_jobs(ask):
                yield j
            self.jobtap.asked(j.external_jobid for j in ask)

    def _handle(self, j: Any, status: str, record: jobtap.Job) -> bool:
        """What the stock round does with a job ``sacct`` says is ``status``;
        whether the job is done with (else it stays active)."""
        logfile = j.aux.get("slurm_logfile")
        logs = [str(logfile) if logfile is not None else None]
        jid = j.external_jobid
        if status in ("COMPLETED", "UNKNOWN"):
            self.report_job_success(j)
            if status == "COMPLETED" and not self.workflow.executor_settings.keep_successful_logs:
                try:
                    if logfile is not None and logfile.exists():
                        logfile.unlink()
                except OSError as e:
                    self.logger.warning(f"Could not remove SLURM log file {logfile}: {e}")
            return self._done(jid)
        if status == "PREEMPTED":
            if not self._preemption_warning:
                self._preemption_warning = True
                self.logger.warning(
                    "===== A Job preemption occured! =====\nLeave Snakemake running, if "
                    "possible. Otherwise Snakemake needs to restart this job upon a "
                    "Snakemake restart.\n\nWe leave it to SLURM to resume your job(s)"
                )
            return False
        reason = record.reason or "Unknown"
        exit_code = f" (exit code {record.exit_status})" if record.exit_status is not None else ""
        if status == "NODE_FAIL":
            for node in _nodes(record):
                self._failed_nodes.add(node)
            if self.workflow.executor_settings.requeue:
                self.logger.warning(
                    f"Job '{jid}' failed with status 'NODE_FAIL', but requeue is enabled. "
                    "Leaving it to SLURM to requeue the job. Failed node will be excluded "
                    "from future submissions."
                )
                return False
        msg = (
            f"SLURM-job '{jid}' failed, SLURM status is: '{status}'. "
            f"Reason: {reason}{exit_code} (from jobtap). "
        )
        self.report_job_error(j, msg=msg, aux_logs=logs)
        return self._done(jid)

    def _done(self, jid: str) -> bool:
        self.jobtap.forget(jid)
        self._run_jobs.discard(jid)
        return True

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            if self._subscription is not None:
                self._subscription.close()
            self.jobtap.close()


def _nodes(record: jobtap.Job) -> list[str]:
    """The nodes a record says the job ran on (best effort: Slurm's ``nodes``)."""
    allocated = record.allocated
    if isinstance(allocated, dict):
        nodes = allocated.get("nodes") or allocated.get("hosts")
        if isinstance(nodes, str):
            return [nodes]
        if isinstance(nodes, list):
            return [str(n) for n in nodes]
    return []
