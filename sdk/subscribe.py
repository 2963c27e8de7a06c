"""Subscriptions: what :meth:`jobtap.Client.subscribe` returns.

List-then-watch, per subscription (carried out by the client's background thread,
:mod:`jobtap.dispatcher`):

1. SUBSCRIBE to its channels and wait for Redis to confirm;
2. note each relevant stream's newest entry id (the *sync position*), then read
   the current records (HGETALL) and deliver them as ``initial``;
3. deliver each channel event whose version is exactly one more than the last one
   delivered for that object; drop older or equal ones (duplicates of what the
   snapshot already had).  See :mod:`jobtap.sequence` for the rule.

A gap (the version jumped, the connection dropped, Redis cut a slow subscriber off
at its output-buffer limit) triggers a *resync*: re-read the hashes, then scan the
streams backwards for the events missed since the last processed one (see
:mod:`jobtap.backfill`) and deliver them in order; what the streams no longer hold is
delivered as one ``resync`` change built from the hash (:mod:`jobtap.catchup`).  A
job whose hash expired meanwhile is looked up in the streams, so its ``final`` is
never missed.

A subscription too far behind is not replayed event by event: it *catches up by
state* (:mod:`jobtap.dispatcher` has the bound, ``Client(max_lag=2.0,
queue_limit=10_000)``).  The client reads messages into each subscription's queue
and calls back from it between reads; a subscription whose oldest queued event was
read more than ``max_lag`` seconds ago, whose queue passes ``queue_limit`` events,
whose catch-up after a gap finds more than ``queue_limit`` missed events, or
whose connection Redis closed while still running (the output-buffer limit)
drops its queue, scans its streams for what it missed, reads the records of the
objects that moved in one pipelined read, and is called once per object that moved,
finals first (:func:`jobtap.catchup.plan_state`), each change carrying
:attr:`Change.missed`.  Those changes are delivered in turns; events arriving
meanwhile are not queued but caught up with by the next catch-up, which starts as
soon as a final waits behind changes that are not finals (or ``max_lag`` passes)
and takes over what this one did not deliver.  Later events continue from the
versions delivered: nothing comes twice, nothing is lost.  ``max_lag=None``: no
queue, every missed event replayed.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import JobtapError
from .feed import Feed


class Subscription:
    """A live subscription made by :meth:`Client.subscribe`.

    Its callback runs on the client's background thread: first with the current
    record of every watched object (``initial``), then with every change, in
    version order, once.  A subscription to named jobs ends by itself after the
    last one's ``final`` change.  Use it as a context manager, or call
    :meth:`close`.
    """

    def __init__(self, feed: Feed, close: Callable[[Feed], None]):
        self._feed = feed
        self._close = close

    def close(self) -> None:
        """Stop the subscription: no callback runs for it after this returns
        (unless called from another thread while its callback is running)."""
        self._close(self._feed)

    @property
    def closed(self) -> bool:
        """True once closed, or ended by itself after its jobs' final changes."""
        return self._feed.closed

    def wait_closed(self, timeout: float | None = None) -> bool:
        """Block until the subscription ends; False on timeout."""
        return self._feed.wait_closed(timeout)

    def add_done_callback(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` once the subscription has ended (at once if it has): on the
        client's background thread, or in the thread that closes the client."""
        self._feed.add_end_callback(fn)

    @property
    def error(self) -> JobtapError | None:
        """Why the subscription ended, if it did not end normally (a channel refused
        by the ACL, credentials revoked…)."""
        return self._feed.error

    @property
    def jobs(self) -> frozenset[str]:
        """The named jobs still watched (their final change not yet delivered)."""
        return self._feed.jobs

    @property
    def resyncs(self) -> int:
        """How many times this subscription resynchronised after a gap."""
        return self._feed.resyncs

    @property
    def caught_up_by_state(self) -> int:
        """How many of those resyncs caught up by state (it was too far behind, or
        cut off): one change per object that moved, with :attr:`Change.missed`."""
        return self._feed.state_resyncs

    @property
    def skipped(self) -> int:
        """How many events it dropped from its queue to catch up by state instead."""
        return self._feed.skipped

    @property
    def queue_peak(self) -> int:
        """The most changes that waited at once for its callback."""
        return self._feed.queue_peak

    @property
    def delivered(self) -> int:
        """How many changes its callback was given."""
        return self._feed.delivered

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Subscription {self._feed.phase.value} sites={sorted(self._feed.targets)}>"
