"""Parsl's Slurm and PBS Pro providers with ``_status()`` from jobtap.

Parsl's ``ClusterProvider.status(job_ids)`` calls ``_status()``, which refreshes
``self.resources[job_id]["status"]`` for the blocks not yet terminal, then returns
those statuses.  Here ``_status()`` reads every such block from jobtap in one
round trip and follows the shared rules (:mod:`jobtap.integrations.rules`): a
block jobtap has not seen is left PENDING for ``jobtap_unseen_timeout`` seconds,
then asked of the scheduler with the provider's own query (``sacct``/``squeue``,
``qstat -x``), as is every block while jobtap cannot be reached, at most once per
``jobtap_fallback_interval`` seconds (Parsl's own 60 s).  Unlike the stock query, a
block missing from the scheduler's answer keeps its last status instead of
becoming COMPLETED (Parsl#1588: sacct does not know a job yet, squeue no longer).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from typing import Any

from parsl.jobs.states import JobState, JobStatus
from parsl.providers import PBSProProvider as _StockPBSPro
from parsl.providers import SlurmProvider as _StockSlurm
from parsl.providers.slurm.slurm import squeue_translate_table

import jobtap
from jobtap.integrations.rules import UNSEEN_TIMEOUT, Settings, Tracker

log = logging.getLogger("jobtap.parsl")

POLLING_INTERVAL = 5  # Parsl's default strategy period
FALLBACK_INTERVAL = 60.0  # the stock providers' status_polling_interval

# jobtap's live states -> Parsl's
LIVE = {
    "queued": JobState.PENDING,
    "waiting": JobState.PENDING,
    "held": JobState.HELD,
    "suspended": JobState.HELD,
    "running": JobState.RUNNING,
    "exiting": JobState.RUNNING,
}
# native states of a failed job that Parsl calls TIMEOUT (its sacct table's):
# a pilot job reaching its walltime is expected, not an error
TIMED_OUT = frozenset({"TIMEOUT", "DEADLINE", "PREEMPTED"})
TIME_REASONS = frozenset({"TimeLimit", "walltime"})


def parsl_status(record: jobtap.Job, stdout: str | None = None, stderr: str | None = None):
    """Parsl's status of a jobtap record; ``None`` for a final ``unknown`` (the job
    left the scheduler with no history: ask the scheduler instead)."""
    paths = {"stdout_path": stdout, "stderr_path": stderr}
    state = record.state
    if state in LIVE:
        return JobStatus(LIVE[state], **paths)
    if state == "completed":
        return JobStatus(JobState.COMPLETED, exit_code=record.exit_status, **paths)
    if state == "cancelled":
        message = record.reason or None
        return JobStatus(JobState.CANCELLED, message, exit_code=record.exit_status, **paths)
    if state == "failed":
        word = (record.native_state or "").split(" ")[0].upper()
        timed_out = word in TIMED_OUT or (record.reason or "") in TIME_REASONS
        message = record.reason or record.native_state or None
        state_ = JobState.TIMEOUT if timed_out else JobState.FAILED
        return JobStatus(state_, message, exit_code=record.exit_status, **paths)
    return None


def _mentions(text: str, job_id: str) -> bool:
    """Whether the scheduler's output names ``job_id`` (PBS: its number with or
    without the server's name)."""
    short = job_id.split(".")[0]
    return re.search(rf"(?<![\w.\[]){re.escape(short)}(?![\w\[])", text) is not None


class JobtapStatusMixin:
    """Placed before a Parsl cluster provider: status from jobtap, the stock query
    as the fallback.  The provider's class sets ``_stock_probe`` (a command the
    stock constructor runs to choose its status command, deferred to the first
    fallback) if any, and an ``__init__`` decorated with :func:`_init_options`
    that only calls this one (so that Parsl's repr shows the stock arguments)."""

    _stock_probe: str | None = None
    resources: dict[str, dict[str, Any]]

    def __init__(
        self,
        *args: Any,
        jobtap_redis: str | None = None,
        jobtap_site: str | None = None,
        jobtap_credentials: str | None = None,
        jobtap_user: str | None = None,
        jobtap_unseen_timeout: float = UNSEEN_TIMEOUT,
        jobtap_polling_interval: float = POLLING_INTERVAL,
        jobtap_fallback_interval: float = FALLBACK_INTERVAL,
        **kwargs: Any,
    ) -> None:
        """The ``jobtap_*`` keyword arguments (see :class:`SlurmProvider`), then the
        stock constructor with the others, its ``_stock_probe`` deferred."""
        self.jobtap_redis = jobtap_redis
        self.jobtap_site = jobtap_site
        self.jobtap_credentials = jobtap_credentials
        self.jobtap_user = jobtap_user
        self.jobtap_unseen_timeout = jobtap_unseen_timeout
        self.jobtap_polling_interval = jobtap_polling_interval
        self.jobtap_fallback_interval = jobtap_fallback_interval
        settings = Settings(
            redis_url=jobtap_redis,
            site=jobtap_site,
            credentials=jobtap_credentials,
            user=jobtap_user,
            unseen_timeout=jobtap_unseen_timeout,
        )
        self.jobtap = Tracker(
            settings, f"Parsl's {type(self).__name__}", jobtap_fallback_interval, log
        )
        self._jobtap_lock = threading.RLock()
        self._probe_deferred = False
        self.stock_queries = 0
        """Status queries run on the scheduler (the fallback), for tests and logs."""
        self._deferring = True
        try:
            super().__init__(*args, **kwargs)
        finally:
            self._deferring = False

    # -- the stock constructor's probe, deferred -----------------------------------------
    def execute_wait(self, cmd: str, timeout: float | None = None) -> tuple[int, str, str]:
        if getattr(self, "_deferring", False) and cmd == self._stock_probe:
            self._probe_deferred = True
            return 0, "", ""  # the stock choice (sacct); checked for real on first fallback
        return super().execute_wait(cmd, timeout)  # type: ignore[misc]

    def _run_deferred_probe(self) -> None:
        """Nothing here by default (see the Slurm provider)."""
        self._probe_deferred = False

    # -- submit and cancel: Parsl's, with the submission noted -------------------------
    def submit(self, command: str, tasks_per_node: int, job_name: str = "parsl") -> str:
        with self._jobtap_lock:
            before = time.time()
            job_id = super().submit(command, tasks_per_node, job_name)  # type: ignore[misc]
            if job_id is not None:
                self.jobtap.track(job_id, before)
            return job_id

    def cancel(self, job_ids: list[str]) -> list[bool]:
        with self._jobtap_lock:
            return super().cancel(job_ids)  # type: ignore[misc]

    @property
    def status_polling_interval(self) -> float:
        return self.jobtap_polling_interval

    # -- status ----------------------------------------------------------------------------
    def _status(self) -> None:
        with self._jobtap_lock:
            active = [jid for jid, r in self.resources.items() if not r["status"].terminal]
            if not active:
                return
            ask = []
            for jid, verdict in self.jobtap.read(active).items():
                res = self.resources[jid]
                status = None
                if verdict.kind == "record":
                    assert verdict.record is not None
                    status = parsl_status(
                        verdict.record, res.get("job_stdout_path"), res.get("job_stderr_path")
                    )
                    if status is None:
                        ask.append(jid)
                elif verdict.kind == "ask":
                    ask.append(jid)
                if status is not None:
                    res["status"] = status
                    if status.terminal:
                        self.jobtap.forget(jid)
            if ask:
                self._ask_scheduler(ask)

    def _ask_scheduler(self, job_ids: list[str]) -> None:
        """The stock ``_status()`` for ``job_ids`` only; a block missing from the
        scheduler's answer keeps its status (the stock code would call it COMPLETED)."""
        if self._probe_deferred:
            self._run_deferred_probe()
        everything = self.resources
        before = {jid: everything[jid]["status"] for jid in job_ids}
        outputs: list[str] = []
        original = self.execute_wait

        def capturing(cmd: str, timeout: float | None = None) -> tuple[int, str, str]:
            code, out, err = original(cmd, timeout)
            outputs.append(out)
            return code, out, err

        self.execute_wait = capturing  # type: ignore[method-assign]
        self.resources = {jid: everything[jid] for jid in job_ids}
        try:
            self.stock_queries += 1
            super()._status()  # type: ignore[misc]
        finally:
            self.resources = everything
            del self.execute_wait
        said = "\n".join(outputs)
        for jid in job_ids:
            if not _mentions(said, jid):
                everything[jid]["status"] = before[jid]
            elif everything[jid]["status"].terminal:
                self.jobtap.forget(jid)
        self.jobtap.asked(job_ids)


def _init_options(stock_init: Any):
    """Our ``__init__`` shows the stock one's arguments to Parsl's
    ``RepresentationMixin`` (which looks through ``__wrapped__``)."""

    def decorate(init: Any) -> Any:
        init.__wrapped__ = stock_init
        return functools.wraps(stock_init, assigned=("__doc__",), updated=())(init)

    return decorate


class SlurmProvider(JobtapStatusMixin, _StockSlurm):
    """Parsl's :class:`parsl.providers.SlurmProvider`, status from jobtap.

    Takes the stock provider's arguments, and keyword-only:

    - ``jobtap_redis``: the jobtap Redis (may name the site: ``redis://h/0?site=x``);
      default ``$JOBTAP_REDIS``, then the credential file's;
    - ``jobtap_site``: default the URL's ``?site=``, ``$JOBTAP_SITE``, the credential file's;
    - ``jobtap_credentials``: a credential file (default ``~/.config/jobtap/credentials``);
    - ``jobtap_user``: the blocks' owner (default: the credential file's user, the login name);
    - ``jobtap_unseen_timeout``: seconds a block jobtap has not seen stays PENDING
      before the scheduler is asked (15);
    - ``jobtap_polling_interval``: Parsl's ``status_polling_interval`` (5 s);
    - ``jobtap_fallback_interval``: the least time between two stock queries of one
      block (60 s, the stock provider's interval).
    """

    _stock_probe = "sacct -X"

    @_init_options(_StockSlurm.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

    def _run_deferred_probe(self) -> None:
        """What the stock constructor does with ``sacct -X``: without accounting,
        ask ``squeue`` instead."""
        self._probe_deferred = False
        code, _, _ = self.execute_wait("sacct -X")
        if code != 0:
            log.info("jobtap: sacct fails here: the fallback asks squeue")
            cmd = "squeue" + (f" --clusters={self.clusters}" if self.clusters else "")
            self._cmd = cmd + " --noheader --format='%i %t' --job '{0}'"
            self._translate_table = squeue_translate_table


class PBSProProvider(JobtapStatusMixin, _StockPBSPro):
    """Parsl's :class:`parsl.providers.PBSProProvider`, status from jobtap; the
    ``jobtap_*`` keyword arguments of :class:`SlurmProvider`.  A block cancelled
    with ``cancel()`` is CANCELLED (the stock provider says COMPLETED)."""

    @_init_options(_StockPBSPro.__init__)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

    def cancel(self, job_ids: list[str]) -> list[bool]:
        with self._jobtap_lock:
            done = super().cancel(job_ids)
            for jid, ok in zip(job_ids, done):
                if ok and jid in self.resources:
                    self.resources[jid]["status"] = JobStatus(JobState.CANCELLED)
            return done
