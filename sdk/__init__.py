"""jobtap SDK: read the job cache instead of polling the scheduler, subscribe to
changes with callbacks, wait for a job, consume the deduplicated event stream.

    import jobtap

    client = jobtap.Client()                    # $JOBTAP_REDIS, $JOBTAP_SITE, credentials
    job = client.job("12.pbs")                  # jobtap.Job | None
    client.subscribe(print, jobs=["12.pbs"])    # initial record, then every change
    client.wait("12.pbs", timeout=600)          # -> jobtap.Job in a terminal state

A :class:`Change`'s ``type`` is one of ``jobtap.NEW``, ``STATE``, ``UPDATE``,
``FINAL``, ``REMOVED`` (written by the workers), ``INITIAL`` or ``RESYNC`` (made by
a subscription).  Every error raised is a :class:`JobtapError`.

``jobtap.aio`` has the same API for asyncio.  The submodules ``jobtap.keys``,
``jobtap.schema`` and ``jobtap.events`` are the contract with the writers (key names,
the normalised record, the event).  ``jobtap.__version__`` is the installed version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers: `X as X` marks each name as exported
    __version__: str
    from .client import Client as Client
    from .credentials import Credentials as Credentials
    from .errors import AuthenticationFailed as AuthenticationFailed
    from .errors import BadName as BadName
    from .errors import ConfigError as ConfigError
    from .errors import CredentialsError as CredentialsError
    from .errors import JobNotFound as JobNotFound
    from .errors import JobtapError as JobtapError
    from .errors import PermissionDenied as PermissionDenied
    from .errors import RedisUnavailable as RedisUnavailable
    from .errors import StateNotReached as StateNotReached
    from .errors import TLSFailed as TLSFailed
    from .errors import WaitTimeout as WaitTimeout
    from .events import CHANGE_TYPES as CHANGE_TYPES
    from .events import FINAL as FINAL
    from .events import INITIAL as INITIAL
    from .events import NEW as NEW
    from .events import REMOVED as REMOVED
    from .events import RESYNC as RESYNC
    from .events import STATE as STATE
    from .events import UPDATE as UPDATE
    from .records import Change as Change
    from .records import Job as Job
    from .records import Missed as Missed
    from .records import Node as Node
    from .records import Queue as Queue
    from .records import Record as Record
    from .schema import TERMINAL as TERMINAL
    from .stream import EventStream as EventStream
    from .subscribe import Subscription as Subscription

# The public names, by the module they live in.  They load on first use:
# `import jobtap.keys` (the contract, used by `jobtap poke` in scheduler hooks)
# must not pay for redis-py and the client.
_HOMES = {
    # the client and what it hands out
    ".client": ("Client",),
    ".subscribe": ("Subscription",),
    ".stream": ("EventStream",),
    ".records": ("Change", "Job", "Missed", "Node", "Queue", "Record"),
    ".credentials": ("Credentials",),
    # change types (Change.type), job states
    ".events": ("NEW", "STATE", "UPDATE", "FINAL", "REMOVED", "INITIAL", "RESYNC", "CHANGE_TYPES"),
    ".schema": ("TERMINAL",),
    # errors: one hierarchy under JobtapError
    ".errors": (
        "JobtapError",
        "ConfigError",
        "BadName",
        "CredentialsError",
        "RedisUnavailable",
        "TLSFailed",
        "AuthenticationFailed",
        "PermissionDenied",
        "JobNotFound",
        "WaitTimeout",
        "StateNotReached",
    ),
}
_LAZY = {name: module for module, names in _HOMES.items() for name in names}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's (pyproject.toml's) version
        from importlib.metadata import version

        globals()[name] = value = version("jobtap")
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jobtap' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
