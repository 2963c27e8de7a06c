"""The errors the SDK raises: one hierarchy.  Every one derives from
:class:`JobtapError`, and also from the matching built-in (``LookupError``,
``TimeoutError``, ``ConnectionError``, ``PermissionError``, ``ValueError``) so
that generic handlers keep working::

    JobtapError
    ├── ConfigError (ValueError)
    │   ├── BadName
    │   └── CredentialsError
    ├── RedisUnavailable (ConnectionError)
    │   └── TLSFailed
    ├── AuthenticationFailed (PermissionError)
    ├── PermissionDenied (PermissionError)
    ├── JobNotFound (LookupError)
    ├── WaitTimeout (TimeoutError)
    └── StateNotReached

Errors of redis-py never reach the caller: they are translated into these
(see ``jobtap.redis_errors.translate_error``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .records import Job


class JobtapError(Exception):
    """Base class of every error raised by the SDK."""


class ConfigError(JobtapError, ValueError):
    """Bad arguments or configuration (site name, URL, options)."""


class BadName(ConfigError):
    """A site, user or object name that cannot be turned into a Redis key."""


class CredentialsError(ConfigError):
    """The credential file is unreadable, malformed or readable by others."""


class RedisUnavailable(JobtapError, ConnectionError):
    """Redis cannot be reached (or went away and did not come back in time)."""


class TLSFailed(RedisUnavailable):
    """The TLS link to Redis could not be made: the server's certificate is not
    trusted (wrong CA, expired, wrong name), the server wants a client
    certificate, or one side speaks TLS and the other plain text."""


class AuthenticationFailed(JobtapError, PermissionError):
    """Redis refused the user name or password."""


class PermissionDenied(JobtapError, PermissionError):
    """The Redis user may not read that key or channel (see the site's ACLs)."""


class JobNotFound(JobtapError, LookupError):
    """The job is not in the cache (never collected, or purged after retention)."""


class WaitTimeout(JobtapError, TimeoutError):
    """:meth:`Client.wait` gave up; ``job`` is the last record seen (or ``None``)."""

    def __init__(self, message: str, job: Job | None = None):
        super().__init__(message)
        self.job = job


class StateNotReached(JobtapError):
    """The job finished (its ``final`` event went out) in a state other than the
    ones waited for, or it left the cache; ``job`` is its last record."""

    def __init__(self, message: str, job: Job | None = None):
        super().__init__(message)
        self.job = job
