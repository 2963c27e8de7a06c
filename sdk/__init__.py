"""jobtap SDK: read the job cache instead of polling the scheduler, subscribe to
changes with callbacks, wait for a job, consume the deduplicated event stream.

    import jobtap

    client = jobtap.Client()                       # $JOBTAP_REDIS, $JOBTAP_SITE, credentials
    job = client.job("12.pbs")                  # jobtap.Job | None
    client.subscribe(print, jobs=["12.pbs"])    # initial record, then every change
    client.wait("12.pbs", timeout=600)          # -> jobtap.Job in a terminal state

``jobtap.aio`` has the same API for asyncio.  The submodules ``jobtap.keys``,
``jobtap.schema`` and ``jobtap.events`` are the contract with the writers (key names,
the normalised record, the event).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The names below load on first use: `import jobtap.keys` (the contract, used by
# `jobtap poke` in scheduler hooks) must not pay for redis-py and the client.
_LAZY = {
    "Client": ".client",
    "Credentials": ".credentials",
    "AuthenticationFailed": ".errors",
    "ConfigError": ".errors",
    "CredentialsError": ".errors",
    "JobNotFound": ".errors",
    "JobtapError": ".errors",
    "PermissionDenied": ".errors",
    "RedisUnavailable": ".errors",
    "StateNotReached": ".errors",
    "WaitTimeout": ".errors",
    "INITIAL": ".records",
    "RESYNC": ".records",
    "Change": ".records",
    "Job": ".records",
    "Node": ".records",
    "Queue": ".records",
    "TERMINAL": ".schema",
    "EventStream": ".stream",
    "Subscription": ".subscribe",
}

if TYPE_CHECKING:
    from .client import Client
    from .credentials import Credentials
    from .errors import (
        AuthenticationFailed,
        ConfigError,
        CredentialsError,
        JobNotFound,
        JobtapError,
        PermissionDenied,
        RedisUnavailable,
        StateNotReached,
        WaitTimeout,
    )
    from .records import INITIAL, RESYNC, Change, Job, Node, Queue
    from .schema import TERMINAL
    from .stream import EventStream
    from .subscribe import Subscription


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sdk' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AuthenticationFailed",
    "Change",
    "Client",
    "ConfigError",
    "Credentials",
    "CredentialsError",
    "EventStream",
    "INITIAL",
    "Job",
    "JobNotFound",
    "JobtapError",
    "Node",
    "PermissionDenied",
    "Queue",
    "RESYNC",
    "RedisUnavailable",
    "StateNotReached",
    "Subscription",
    "TERMINAL",
    "WaitTimeout",
]
