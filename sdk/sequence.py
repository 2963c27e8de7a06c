"""The version rule of jobtap's events, in one place.

Per object, ``version`` grows by one each time the stored record changes, so a
reader that remembers the last version it processed knows what comes next:

- the next version is ``last + 1``;
- an older or equal version was processed already (a duplicate, or covered by a
  snapshot);
- a larger jump is a *gap*: changes were missed and must be backfilled;
- an object that was removed and comes back (a node or queue deleted and created
  again) starts again at ``new``, version 1: after a ``removed``, a ``new`` event
  begins a new life whatever the last version was;
- versions count within a site *epoch* (see :mod:`jobtap.events`): a version of
  another epoch than the last one processed starts the count again, its next
  version being 1.  Which epoch is the current one is for the owner to say (a
  subscription follows the newest its streams hold); the sequence only never
  compares versions of two epochs.

A subscription (:mod:`jobtap.subscribe`) delivers in this order and backfills
gaps; the stream's de-duplication (:mod:`jobtap.dedupe`) drops what is not
newer.  Both keep a :class:`VersionSequence`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from enum import Enum
from typing import Generic, TypeVar

from .events import NEW, REMOVED

M = TypeVar("M")


class Step(Enum):
    """Where a version stands against the last one processed."""

    OLD = "old"
    """Processed already: the last version, or an earlier one."""
    NEXT = "next"
    """The next one: ``last + 1`` (1 for an unknown object or a new life)."""
    GAP = "gap"
    """Later than the next one: versions in between were missed."""


class VersionSequence(Generic[M]):
    """The last version processed per object (``key``: the event id's prefix),
    whether the object's last event removed it, and a *mark* per object that the
    owner keeps alongside (how to re-read it, or its stream position).

    With ``maxsize``, the objects least recently advanced are forgotten beyond
    that many (a forgotten object is unknown again: its next version is 1).
    """

    def __init__(self, maxsize: int | None = None):
        self.maxsize = maxsize
        self._last: OrderedDict[str, int] = OrderedDict()
        self._epochs: dict[str, str] = {}  # the epoch the last version counts in
        self._marks: dict[str, M] = {}
        self._removed: set[str] = set()

    # -- reading ------------------------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in self._last

    def __len__(self) -> int:
        return len(self._last)

    def keys(self) -> list[str]:
        return list(self._last)

    def last(self, key: str) -> int | None:
        """The last version processed of ``key`` (``None``: unknown)."""
        return self._last.get(key)

    def mark(self, key: str) -> M | None:
        return self._marks.get(key)

    def epoch(self, key: str) -> str | None:
        """The epoch of the last version processed of ``key`` (``None``: unknown)."""
        return self._epochs.get(key) if key in self._last else None

    def marks(self) -> dict[str, M]:
        """Every known object's mark."""
        return dict(self._marks)

    def removed(self, key: str) -> bool:
        """True if the last event processed for ``key`` removed it."""
        return key in self._removed

    def comes_back(self, key: str, etype: str) -> bool:
        """True if an event of type ``etype`` starts a new life of ``key``."""
        return etype == NEW and key in self._removed

    def base(self, key: str, epoch: str = "") -> int:
        """The version the next one of ``epoch`` follows (0 for an unknown object,
        or one whose last version counts in another epoch)."""
        if self._epochs.get(key, "") != epoch:
            return 0
        return self._last.get(key, 0)

    def step(self, key: str, version: int, etype: str, epoch: str = "") -> Step:
        """Where an event of ``key`` at ``version`` of ``epoch`` stands (see :class:`Step`)."""
        base = 0 if self.comes_back(key, etype) else self.base(key, epoch)
        if version <= base:
            return Step.OLD
        return Step.NEXT if version == base + 1 else Step.GAP

    def follows(self, key: str, versions: Sequence[int], epoch: str = "") -> bool:
        """True if ``versions`` (ascending, of ``epoch``) continue ``key`` with no gap."""
        start = self.base(key, epoch) + 1
        return list(versions) == list(range(start, start + len(versions)))

    def processed(self, key: str, version: int, epoch: str = "") -> bool | None:
        """For events found in the past (a stream scan): True if ``version`` of a
        known object was processed, False if not (a version of another epoch than
        the last one processed was not); ``None`` when it cannot be told: the
        object is unknown, or was removed and the version may be of an earlier
        life."""
        last = self._last.get(key)
        if last is None or (key in self._removed and version <= last):
            return None
        if self._epochs.get(key, "") != epoch:
            return False
        return version <= last

    # -- changing -----------------------------------------------------------------------
    def expect(self, key: str, version: int, mark: M, epoch: str = "") -> None:
        """Know ``key`` at ``version`` of ``epoch`` without an event (its record
        was read, or with 0: it is awaited at version 1)."""
        self._last[key] = version
        self._epochs[key] = epoch
        self._marks[key] = mark
        self._removed.discard(key)
        self._bound(key)

    def advance(
        self, key: str, version: int, etype: str, mark: M | None = None, epoch: str = ""
    ) -> bool:
        """Note the event of ``key`` at ``version`` of ``epoch`` as processed.  The
        last version (and the mark, when given) moves if the event starts a new
        life, is of another epoch, or is newer; True if it moved."""
        comes_back = self.comes_back(key, etype)
        last = self._last.get(key)
        other_epoch = self._epochs.get(key, "") != epoch
        moved = comes_back or last is None or other_epoch or version > last
        if moved:
            self._last[key] = version
            self._epochs[key] = epoch
            if mark is not None:
                self._marks[key] = mark
        if etype == REMOVED:
            self._removed.add(key)
        elif comes_back:
            self._removed.discard(key)
        self._bound(key)
        return moved

    def forget(self, key: str) -> None:
        """Make ``key`` unknown again (it finished, or starts over from its record)."""
        self._last.pop(key, None)
        self._epochs.pop(key, None)
        self._marks.pop(key, None)
        self._removed.discard(key)

    def clear(self) -> None:
        self._last.clear()
        self._epochs.clear()
        self._marks.clear()
        self._removed.clear()

    def _bound(self, key: str) -> None:
        """``key`` was just used: forget the least recently used beyond ``maxsize``."""
        self._last.move_to_end(key)
        if self.maxsize is not None and len(self._last) > self.maxsize:
            oldest, _ = self._last.popitem(last=False)
            self._epochs.pop(oldest, None)
            self._marks.pop(oldest, None)
            self._removed.discard(oldest)
