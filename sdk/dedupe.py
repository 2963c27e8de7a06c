"""Bounded memories for dropping duplicates from a stream.

Event ids are ``<object prefix>:<version>`` and versions grow by one per change,
in stream order.  An event is a duplicate when

- its id was handed out already (a replayed batch, an entry read twice), or
- a newer version of its object came *earlier in the stream* (an old event
  appended again late).

An event that sits earlier in the stream than a newer version already handed out
is not a duplicate: it is one this consumer never had (claimed from a crashed
consumer of the group), and it is delivered, out of order.

Nodes and queues that are removed and come back start again at version 1; a
``new`` event after a ``removed`` one is therefore accepted whatever its version.
"""

from __future__ import annotations

from collections import OrderedDict

from .events import NEW, REMOVED

StreamId = tuple[int, int]


class LRUSet:
    """A set that forgets its oldest members beyond ``maxsize``."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._items: OrderedDict[str, None] = OrderedDict()

    def add(self, item: str) -> None:
        self._items[item] = None
        self._items.move_to_end(item)
        if len(self._items) > self.maxsize:
            self._items.popitem(last=False)

    def discard(self, item: str) -> None:
        self._items.pop(item, None)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __len__(self) -> int:
        return len(self._items)


class VersionMemory:
    """What a stream consumer handed out: the last version (and its stream
    position) per object and the recent event ids, for at most ``maxsize`` of
    each (the least recent are forgotten first)."""

    def __init__(self, maxsize: int = 200_000):
        self.maxsize = maxsize
        self._last: OrderedDict[str, tuple[int, StreamId]] = OrderedDict()
        self._ids = LRUSet(maxsize)
        self._removed: set[str] = set()
        self._lives: dict[str, int] = {}  # objects that were removed and came back

    def accept(self, prefix: str, version: int, etype: str, sid: StreamId = (0, 0)) -> bool:
        """True (and remember it) if the event is new; False for a duplicate."""
        comes_back = etype == NEW and prefix in self._removed
        if comes_back:  # a new life: its versions start again
            self._lives[prefix] = self._lives.get(prefix, 0) + 1
        life = self._lives.get(prefix)
        eid = f"{prefix}:{version}" if life is None else f"{prefix}#{life}:{version}"
        if not comes_back:
            if eid in self._ids:
                return False
            last = self._last.get(prefix)
            if last is not None and version <= last[0] and sid > last[1]:
                return False
        self._ids.add(eid)
        last = self._last.get(prefix)
        if comes_back or last is None or version > last[0]:
            self._last[prefix] = (version, sid)
        self._last.move_to_end(prefix)
        if etype == REMOVED:
            self._removed.add(prefix)
        elif comes_back:
            self._removed.discard(prefix)
        if len(self._last) > self.maxsize:
            old, _ = self._last.popitem(last=False)
            self._removed.discard(old)
        return True

    def __len__(self) -> int:
        return len(self._last)
