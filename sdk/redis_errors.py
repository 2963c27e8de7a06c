"""redis-py's errors as :mod:`jobtap.errors`: one line saying why Redis could not
be used, and the SDK error to raise."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from .errors import AuthenticationFailed, JobtapError, PermissionDenied, RedisUnavailable, TLSFailed
from .tls import tls_problem
from .urls import safe_url


def describe_error(exc: BaseException, url: str) -> str:
    """One line saying why Redis at ``url`` could not be used."""
    where = safe_url(url)
    if isinstance(exc, JobtapError):
        return str(exc)
    problem = tls_problem(exc, url)
    if problem is not None:
        return f"TLS with Redis at {where}: {problem}"
    text = " ".join(str(exc).split()) or type(exc).__name__
    low = text.lower()
    if url.startswith("redis://") and (
        "reset by peer" in low or "closed by server" in low or "connection closed" in low
    ):
        return (
            f"cannot reach Redis at {where}: {text} (a TLS port? then use rediss:// and "
            "ssl_ca_certs)"
        )
    return f"cannot reach Redis at {where}: {text}"


def translate_error(exc: BaseException, url: str) -> JobtapError:
    """The SDK error for a redis-py (or socket) error."""
    where = safe_url(url)
    if isinstance(exc, JobtapError):
        return exc
    problem = tls_problem(exc, url)
    if problem is not None:
        return TLSFailed(f"TLS with Redis at {where}: {problem}")
    if isinstance(exc, redis.AuthenticationError | redis.AuthenticationWrongNumberOfArgsError):
        return AuthenticationFailed(f"Redis at {where} refused the credentials: {exc}")
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return PermissionDenied(f"Redis at {where}: permission denied: {exc}")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return RedisUnavailable(describe_error(exc, url))
    return JobtapError(f"Redis at {where}: {exc}")


@contextmanager
def translated(url: str) -> Iterator[None]:
    """Turn redis-py errors raised inside the block into :mod:`jobtap.errors`."""
    try:
        yield
    except redis.RedisError as exc:
        raise translate_error(exc, url) from exc
