"""The site stream's entries, as readers get them: a job's event is stored once.

A worker writes a job's event into its user's stream, and the site stream's
entry of the same id names that stream instead of holding the event again
(``workers/apply.lua``; the event is 1-2 KB, and the site stream and the users'
streams held every job event twice)::

    jobtap:{hpc1}:events          1764300000000-3  id …  type state  stream …:u:alice:events
    jobtap:{hpc1}:u:alice:events  1764300000000-3  id …  type state  event {…}

A node's or a queue's event, and every event a worker wrote before (or with
``jobtap worker --copy-events``), is held whole by the site stream.  Every reader
of the site stream reads it through :func:`resolve`: one pipelined round a batch,
an ``XRANGE`` per user's stream named (the users' streams are on the site's slot,
so a Redis Cluster answers it from one node); an admin does the same by hand::

    redis-cli XRANGE 'jobtap:{hpc1}:u:alice:events' 1764300000000-3 1764300000000-3

Reading the site stream takes read access to the users' streams too (the
operator user has it; a cluster user reads their own stream only).
"""

from __future__ import annotations

from collections.abc import Sequence

from .connection import AnyRedis
from .replies import Fields, text

EVENT = b"event"
"""The field of an entry that holds its event (JSON)."""
STREAM = b"stream"
"""The field of a site stream's entry that names the stream holding its event."""

Entries = list[tuple[str, Fields | None]]


def holder(fields: Fields | None) -> str | None:
    """The stream that holds the event of an entry that names it, else ``None``."""
    if not fields or EVENT in fields:
        return None
    named = fields.get(STREAM)
    return None if named is None else text(named)


def resolve(
    r: AnyRedis, items: Sequence[tuple[bytes | str | None, Fields | None]], *, run: bool = True
) -> Entries:
    """``items`` (stream id, fields: a reply of ``XRANGE`` and the like, or
    :func:`jobtap.replies.entries` of one of ``XREAD``), their ids as ``str``,
    with each entry that names its event's stream
    replaced by that stream's entry of the same id (its fields: ``id``, ``type``,
    ``event``), read in one pipelined round.  An entry whose event is gone (its
    user's stream was trimmed meanwhile, or deleted) comes back with ``None``, as
    an entry deleted from the stream does.

    ``run``: ``items`` are a run of the site stream, every entry between the
    first and the last, in the stream's order or its reverse (what ``XREAD``,
    ``XREADGROUP >`` and a scan's ``XREVRANGE`` page read):
    then one ``XRANGE`` per stream named, over the ids they span, which a user's
    stream, holding no entry the site stream lacks, answers with the run's
    events and nothing more.  Otherwise (a consumer's pending or claimed
    entries, which other consumers' entries may separate by hours) one
    ``XRANGE`` per entry, of its id alone."""
    out: Entries = [(text(sid), fields) for sid, fields in items]
    named = [(i, key) for i, (_, fields) in enumerate(out) if (key := holder(fields))]
    if not named:
        return out
    pipe = r.pipeline(transaction=False)
    reads: list[str] = []
    if run:  # in the stream's order or its reverse: the ends span them all
        low, high = sorted((out[named[0][0]][0], out[named[-1][0]][0]), key=parse_sid)
        reads = list(dict.fromkeys(key for _, key in named))
        for key in reads:
            pipe.xrange(key, min=low, max=high)
    else:
        for i, key in named:
            reads.append(key)
            pipe.xrange(key, min=out[i][0], max=out[i][0], count=1)
    held: dict[str, dict[bytes, Fields]] = {}  # stream -> its entries read, by id
    for key, reply in zip(reads, pipe.execute(), strict=True):
        held.setdefault(key, {}).update(reply or ())
    for i, key in named:
        sid = out[i][0]
        out[i] = (sid, held[key].get(sid.encode()))
    return out


def parse_sid(sid: str) -> tuple[int, int]:
    """A stream id as a pair that sorts as the stream does."""
    ms, _, seq = sid.partition("-")
    return int(ms), int(seq or 0)


def xrange_events(
    r: AnyRedis, key: str, min: str = "-", max: str = "+", count: int | None = None
) -> Entries:
    """``XRANGE`` of a stream of events, each entry with its event (:func:`resolve`)."""
    return resolve(r, r.xrange(key, min=min, max=max, count=count) or [])
