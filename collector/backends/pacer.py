"""Planning calls around a command that throttles itself within a wall-clock second.

OpenPBS ``qstat`` sleeps 200 ms when the same user ran ``qstat`` earlier in the
same wall-clock second (seen on OpenPBS 23.06.06: ``qstat -f -F json`` of 1,000
jobs, back to back, went from 181 ms to 401 ms; ``tests/fixtures/pbs/README.md``).
A collector that runs ``qstat`` twice in a cycle (the live stat, then the history
of the jobs that left it) or refreshes poked jobs in quick succession would pay
those 200 ms again and again.

:class:`SameSecondPacer` is asked before each call.  If the previous call started
in the same second and the next second begins sooner than the throttle would
end, it waits for the next second instead: the call then starts unthrottled and
answers earlier than it would have after the command's own sleep.  Otherwise it
does not wait (the command will sleep, but less than waiting for the next
second would cost).  Either way a call is never delayed by more than the
throttle.  The collector's other way around the throttle is to make fewer,
larger calls (all vanished jobs in one ``qstat -E``, all pending pokes in one
refresh).

It can only see its own calls: other ``qstat`` runs of the same user (an
operator's shell, another tool) still trigger the throttle.  Through a command
prefix such as ``ssh head1`` the remote clock decides; the pacer assumes the
clocks agree (NTP), and the cost of being wrong is the throttle it tries to avoid.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class SameSecondPacer:
    """Delays a call to the next wall-clock second when that is cheaper than the
    command's own same-second throttle of ``throttle`` seconds."""

    def __init__(
        self,
        throttle: float = 0.2,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if throttle < 0:
            raise ValueError("throttle must be >= 0")
        self.throttle = float(throttle)
        self.clock = clock
        self.sleep = sleep
        self.last: float | None = None  # when the previous call ended
        self.waited = 0.0  # total seconds spent waiting for a new second
        self.waits = 0

    def delay(self, now: float) -> float:
        """How long a call at ``now`` should wait (0 or less than the throttle).

        The command notes its own start, somewhere between the previous call's
        start and end; the end is the safe guess (a call that began late in one
        second and ended in the next may have started in either)."""
        if self.last is None or math.floor(now) != math.floor(self.last):
            return 0.0
        to_next = math.floor(now) + 1.0 - now
        return to_next if to_next < self.throttle else 0.0

    def before_call(self) -> float:
        """Wait if that is cheaper than the throttle; return the seconds waited."""
        wait = self.delay(self.clock())
        if wait > 0:
            # a hair past the boundary, so the command's own clock is in the new second
            wait += 0.002
            self.sleep(wait)
            self.waited += wait
            self.waits += 1
        return wait

    def after_call(self) -> None:
        self.last = self.clock()

    @contextmanager
    def call(self) -> Iterator[None]:
        """Around one run of the command."""
        self.before_call()
        try:
            yield
        finally:
            self.after_call()
