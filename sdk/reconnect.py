"""The reconnect policy (tenacity: exponential backoff with jitter and a cap),
and the errors after which reconnecting makes sense."""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential,
    wait_random,
)
from tenacity.stop import stop_base

from .errors import RedisUnavailable

# Errors after which reconnecting makes sense.
TRANSIENT = (redis.ConnectionError, redis.TimeoutError, OSError, RedisUnavailable)


class _StopWhen(stop_base):
    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()


def reconnecting(
    stop: threading.Event,
    *,
    initial: float = 0.05,
    cap: float = 5.0,
    deadline: float | None = None,
    on_retry: Callable[[RetryCallState], None] | None = None,
) -> Retrying:
    """The reconnect policy: retry transient errors with exponential backoff and
    jitter, up to ``cap`` seconds between attempts; give up when ``stop`` is set or
    after ``deadline`` seconds (never by default)."""
    stopper: stop_base = _StopWhen(stop)
    stopper = stopper | (stop_after_delay(deadline) if deadline is not None else stop_never)

    def sleep(seconds: float) -> None:  # wakes up at once when stopping
        stop.wait(seconds)

    return Retrying(
        # A refused login is no passing fault: the user was revoked or the
        # password changed.  Retrying would hide that forever.
        retry=retry_if_exception_type(TRANSIENT)
        & retry_if_not_exception_type(redis.AuthenticationError),
        wait=wait_exponential(multiplier=initial, max=cap) + wait_random(0, initial),
        stop=stopper,
        sleep=sleep,
        before_sleep=on_retry,
        reraise=True,
    )
