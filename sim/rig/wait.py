"""Waiting in tests: one ``eventually()`` instead of hand-rolled deadline loops.

A test that must show that something did NOT happen does not sleep and look:
it makes something happen after it (a marker, a barrier) and waits for that;
whatever was going to arrive before the marker has arrived by then.  The
barriers that fit each part (an SDK subscription, a pub/sub channel, a poke
stream) live beside their helpers; they all wait with ``eventually()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    check: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.02,
    what: str | None = None,
) -> T:
    """Call ``check()`` until it returns something true, and return that.

    An ``AssertionError`` raised by ``check`` counts as "not yet"; after
    ``timeout`` seconds the last one is raised again (or, if ``check`` only
    returned false values, an ``AssertionError`` naming ``what`` and the last
    value).  Any other exception propagates at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
            failure: AssertionError | None = None
        except AssertionError as e:
            value, failure = None, e  # type: ignore[assignment]
        if failure is None and value:
            return value
        if time.monotonic() >= deadline:
            if failure is not None:
                raise failure
            label = what or getattr(check, "__name__", "condition")
            raise AssertionError(f"{label}: not true within {timeout:g}s (last: {value!r})")
        time.sleep(interval)
