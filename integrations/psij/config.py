"""The executors' configuration, the PSI/J way: a ``JobExecutorConfig`` subclass, and
the executor URL (a Redis URL that may name the site: ``redis://host:6379/0?site=hpc1``).
What neither says comes from jobtap's own defaults (``$JOBTAP_REDIS``, ``$JOBTAP_SITE``,
the user's credential file), resolved by :class:`jobtap.Client`."""

from __future__ import annotations

from pathlib import Path

from psij import JobExecutorConfig
from psij.executors.batch.batch_scheduler_executor import BatchSchedulerExecutorConfig

import jobtap
from jobtap.integrations.rules import (
    CLOCK_SKEW,
    SUBSCRIBE_TIMEOUT,
    UNSEEN_TIMEOUT,
    Settings,
    split_url,
)

__all__ = ["JobtapExecutorConfig", "job_owner", "make_client", "settings", "split_url"]


class JobtapExecutorConfig(BatchSchedulerExecutorConfig):
    """Configuration of the ``jobtap-*`` executors.

    Besides PSI/J's batch settings (``work_directory``, ``keep_files``, and
    ``queue_polling_interval``/``initial_queue_polling_delay``, which now only pace
    the fallback polling of jobs jobtap cannot report):

    Args:
        redis_url: the jobtap Redis; default: the executor URL, ``$JOBTAP_REDIS``,
            the credential file's ``url``.
        site: the jobtap site; default: the URL's ``?site=``, ``$JOBTAP_SITE``, the
            credential file's.
        credentials: a credential file (default ``~/.config/jobtap/credentials``).
        user: whose channel to listen on: the owner of the jobs as the scheduler
            names it; default: the credential file's user name, else the login name.
        subscribe_timeout: seconds to wait for Redis when subscribing a job; on
            failure the job falls back to polling.
        unseen_timeout: seconds after which a job jobtap has no record of (it ran
            between two of the collector's stats, or is past retention) is asked
            of the scheduler (``squeue`` and ``sacct``, ``qstat -x``), once, and
            again after as many seconds while it is alive.
        exit_code_wait: seconds to wait for PSI/J's exit-code file of a job that
            finished (a shared filesystem may show it a moment late).
        clock_skew: seconds of difference allowed between this host's clock and the
            scheduler's when telling a reused job id's old record from the new job.
    """

    def __init__(
        self,
        launcher_log_file: Path | None = None,
        work_directory: Path | None = None,
        queue_polling_interval: int = 30,
        initial_queue_polling_delay: int = 2,
        queue_polling_error_threshold: int = 2,
        keep_files: bool = False,
        *,
        redis_url: str | None = None,
        site: str | None = None,
        credentials: str | Path | None = None,
        user: str | None = None,
        subscribe_timeout: float = SUBSCRIBE_TIMEOUT,
        unseen_timeout: float = UNSEEN_TIMEOUT,
        exit_code_wait: float = 5.0,
        clock_skew: float = CLOCK_SKEW,
    ):
        super().__init__(
            launcher_log_file,
            work_directory,
            queue_polling_interval,
            initial_queue_polling_delay,
            queue_polling_error_threshold,
            keep_files,
        )
        self.redis_url = redis_url
        self.site = site
        self.credentials = credentials
        self.user = user
        self.subscribe_timeout = subscribe_timeout
        self.unseen_timeout = unseen_timeout
        self.exit_code_wait = exit_code_wait
        self.clock_skew = clock_skew

    @classmethod
    def _from_config(cls, config: JobExecutorConfig) -> JobtapExecutorConfig:
        """Take over what another PSI/J configuration says (a Slurm or PBS one)."""
        new = cls()
        new.work_directory = config.work_directory
        new.launcher_log_file = config.launcher_log_file
        if isinstance(config, BatchSchedulerExecutorConfig):
            new.queue_polling_interval = config.queue_polling_interval
            new.initial_queue_polling_delay = config.initial_queue_polling_delay
            new.queue_polling_error_threshold = config.queue_polling_error_threshold
            new.keep_files = config.keep_files
        return new


def settings(config: JobtapExecutorConfig, url: str | None) -> Settings:
    """The shared settings (:mod:`jobtap.integrations.rules`) of one executor: the
    configuration's, then the executor URL's, then jobtap's defaults."""
    url_redis, url_site = split_url(url)
    return Settings(
        redis_url=config.redis_url or url_redis,
        site=config.site or url_site,
        credentials=config.credentials,
        user=config.user,
        timeout=config.subscribe_timeout,
        unseen_timeout=config.unseen_timeout,
        clock_skew=config.clock_skew,
    )


def make_client(config: JobtapExecutorConfig, url: str | None) -> jobtap.Client:
    """The jobtap client of one executor (nothing connects until it subscribes)."""
    return settings(config, url).client()


def job_owner(config: JobtapExecutorConfig, client: jobtap.Client) -> str:
    """The user whose jobs these are, as jobtap names them."""
    return settings(config, None).owner(client)
