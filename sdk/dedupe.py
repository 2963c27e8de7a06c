"""Bounded memories for dropping duplicates from a stream.

Event ids name the object, the site epoch and the version, and versions grow by
one per change within an epoch, in stream order.  An event is a duplicate when

- its id was handed out already (a replayed batch, an entry read twice), or
- a newer version of its object came *earlier in the stream* (an old event
  appended again late).

An event that sits earlier in the stream than a newer version already handed out
is not a duplicate: it is one this consumer never had (claimed from a crashed
consumer of the group), and it is delivered, out of order.

What "newer" means, including a node or queue that is removed and comes back
(its versions start again at 1), is the rule of :mod:`jobtap.sequence`.  Versions
of two epochs are never compared: when Redis lost data and a new epoch began, the
memory of the old epoch stops counting (its ids are still known, so an old event
read again is still dropped) and the new epoch's events, from version 1, all go
through.
"""

from __future__ import annotations

from collections import OrderedDict

from .sequence import Step, VersionSequence

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
        self._versions: VersionSequence[StreamId] = VersionSequence(maxsize)
        self._ids = LRUSet(maxsize)
        self._lives: dict[str, int] = {}  # objects that were removed and came back

    def accept(
        self, prefix: str, version: int, etype: str, sid: StreamId = (0, 0), epoch: str = ""
    ) -> bool:
        """True (and remember it) if the event is new; False for a duplicate."""
        versions = self._versions
        comes_back = versions.comes_back(prefix, etype)
        if comes_back:  # a new life: its ids repeat those of the last one
            self._lives[prefix] = self._lives.get(prefix, 0) + 1
        life = self._lives.get(prefix)
        name = prefix if life is None else f"{prefix}#{life}"
        eid = f"{name}@{epoch}:{version}"
        if not comes_back:
            if eid in self._ids:
                return False
            where = versions.mark(prefix)
            if (
                where is not None
                and sid > where
                and versions.step(prefix, version, etype, epoch) is Step.OLD
            ):
                return False  # a newer version came earlier in the stream
        self._ids.add(eid)
        versions.advance(prefix, version, etype, mark=sid, epoch=epoch)
        return True

    def __len__(self) -> int:
        return len(self._versions)
