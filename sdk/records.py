"""Typed records (:class:`Job`, :class:`Node`, :class:`Queue`) and the
:class:`Change` a subscription or a stream delivers.

The records carry every field of the normalised record (see :mod:`jobtap.schema`),
decoded: integers as ``int``, timestamps as timezone-aware ``datetime``, lists and
dicts as Python objects, and ``native``: the scheduler's own record, whole.

    >>> job = client.job("12.pbs")
    >>> job.state, job.terminal, job.native["Job_Owner"]
    ('running', False, 'alice@login1')

Where ``native`` is, and where it is not: a record read from the cache's hashes
(``Client.job``, ``jobs``, ``jobs_by_id``, ``node``, ``nodes``, ``queue``,
``queues``) has it.  A :class:`Change`'s record never has it (``None``),
whatever the change came from: events of format 2 leave it in the hash (see
:mod:`jobtap.events`), and the SDK drops it from the rest too (format-1 events,
``initial`` and ``resync`` changes made from a hash), so that a callback or a
stream sees the same record for every change of every job, and code that works
during an upgrade works after it.  Which of its keys changed is in
:attr:`Change.native_changed` (:meth:`Change.changed` names them as
``native.KEY`` beside the normalised attributes); the whole of it, when
needed, is one read away:
``client.native(job_id)``, or ``client.stream(native=True)`` for a stream.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, Self, Union, cast

import orjson

from . import events as ev
from .events import INITIAL, RESYNC
from .schema import BOOKKEEPING, JOB, NODE, QUEUE, TERMINAL
from .schema import from_hash as decode_hash

__all__ = ["INITIAL", "RESYNC", "Change", "Job", "Missed", "Node", "Queue", "Record"]


def _parse_time(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _int_or_none(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    """The record fields of a record type, except ``final`` (cached)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls) if f.name != "final")
    return names


class _Record:
    """Shared constructors of the three record types."""

    __slots__ = ()
    KIND: ClassVar[str]
    _TIMES: ClassVar[frozenset[str]] = frozenset()
    _INTS: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def from_record(
        cls, record: Mapping[str, Any], *, final: bool | None = None, native: bool = True
    ) -> Self:
        """Build from a decoded record (an event's ``record``, or a decoded hash);
        ``native=False`` leaves ``native`` out (``None``)."""
        names = _field_names(cls)
        kw: dict[str, Any] = {name: record.get(name) for name in names}
        if not native:
            kw["native"] = None
        for name in cls._TIMES:
            kw[name] = _parse_time(kw[name])
        for name in cls._INTS:
            value = kw[name]
            if value is not None and type(value) is not int:
                kw[name] = _int_or_none(value)
        if kw["version"] is None:
            kw["version"] = 0
        if final is None:
            final = bool(_int_or_none(record.get("final")))
        kw["final"] = final
        return cls(**kw)

    @classmethod
    def from_hash(cls, raw: Mapping[str | bytes, str | bytes]) -> Self | None:
        """Build from an ``HGETALL`` reply; ``None`` if the hash is empty (no such key)."""
        if not raw:
            return None
        return cls.from_record(decode_hash(raw))

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Self:
        """Build from an event (``jobtap.events.Event``, either format): its
        ``record``, with ``final`` set when the event is the object's final one,
        and without ``native`` (see the module docstring)."""
        record = ev.record_of(event)
        return cls.from_record(record, final=event.get("type") == ev.FINAL, native=False)

    def to_dict(self) -> dict[str, Any]:
        """The record as plain JSON-able data (timestamps back to ISO-8601)."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat()
            out[f.name] = value
        return out


@dataclass(slots=True)
class Job(_Record):
    """A job's normalised record, as cached by jobtap."""

    KIND: ClassVar[str] = JOB
    _TIMES: ClassVar[frozenset[str]] = frozenset(
        {"submit_time", "start_time", "end_time", "updated_at"}
    )
    _INTS: ClassVar[frozenset[str]] = frozenset(
        {"exit_status", "array_index", "priority", "version"}
    )

    id: str
    site: str | None = None
    scheduler: str | None = None
    user: str | None = None
    group: str | None = None
    account: str | None = None
    name: str | None = None
    queue: str | None = None
    state: str | None = None
    native_state: str | None = None
    reason: str | None = None
    comment: str | None = None
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    exit_status: int | None = None
    requested: dict[str, Any] | None = None
    allocated: Any = None
    resources_used: dict[str, Any] | None = None
    array_parent: str | None = None
    array_index: int | None = None
    priority: int | None = None
    version: int = 0
    updated_at: datetime | None = None
    native: dict[str, Any] | None = field(default=None, repr=False)
    final: bool = False
    """True once the job's ``final`` event went out: nothing follows it."""

    @property
    def terminal(self) -> bool:
        """True in a terminal state (completed, failed, cancelled)."""
        return self.state in TERMINAL


@dataclass(slots=True)
class Node(_Record):
    """A compute node's normalised record."""

    KIND: ClassVar[str] = NODE
    _TIMES: ClassVar[frozenset[str]] = frozenset({"updated_at"})
    _INTS: ClassVar[frozenset[str]] = frozenset({"version"})

    id: str
    site: str | None = None
    scheduler: str | None = None
    state: str | None = None
    native_state: str | None = None
    reason: str | None = None
    jobs: list[Any] | None = None
    resources: dict[str, Any] | None = None
    version: int = 0
    updated_at: datetime | None = None
    native: dict[str, Any] | None = field(default=None, repr=False)
    final: bool = False


@dataclass(slots=True)
class Queue(_Record):
    """A queue's (Slurm: partition's) normalised record."""

    KIND: ClassVar[str] = QUEUE
    _TIMES: ClassVar[frozenset[str]] = frozenset({"updated_at"})
    _INTS: ClassVar[frozenset[str]] = frozenset({"version"})

    id: str
    site: str | None = None
    scheduler: str | None = None
    state: str | None = None
    native_state: str | None = None
    counts: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None
    version: int = 0
    updated_at: datetime | None = None
    native: dict[str, Any] | None = field(default=None, repr=False)
    final: bool = False


Record = Union[Job, Node, Queue]  # noqa: UP007 (a runtime alias)
RECORD_TYPES: dict[str, type[Job] | type[Node] | type[Queue]] = {JOB: Job, NODE: Node, QUEUE: Queue}


def record_from_hash(kind: str, raw: Mapping[str | bytes, str | bytes]) -> Record | None:
    return RECORD_TYPES[kind].from_hash(raw)


def parse_event_id(eid: str) -> tuple[str, int]:
    """``("S:12.pbs", 3)`` from ``"S:EPOCH:12.pbs:3"``: the object's prefix and the
    version (see :func:`jobtap.events.split_event_id`)."""
    prefix, _, version = ev.split_event_id(eid)
    return prefix, version


object_prefix = ev.object_prefix


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[int | str, ...]:
    """Sort key that puts ``9.pbs`` before ``10.pbs``."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))


@dataclass(frozen=True, slots=True)
class Missed:
    """What a subscription skipped of one object when it caught up by state
    (:attr:`Change.missed`): it was too far behind to be given each missed
    event, so it is given the object's current record once, with this summary.

    ``events``: how many versions it skipped, the one delivered included (the
    version delivered minus the last one it had, in the same epoch; exact even
    when the streams no longer hold them).  ``fields``: the names that changed
    in the skipped events (:meth:`Change.changed`), ``states``: the states
    the object passed through, in order (consecutive repeats folded).  Both come
    from the events still in the streams: ``complete`` says whether they held
    every skipped one.
    """

    events: int
    fields: frozenset[str]
    states: tuple[str, ...]
    complete: bool


class Change:
    """One change of one job, node or queue, as delivered to a callback or by a
    stream: the event the workers wrote, decoded lazily.

    ``type`` is one of ``new``, ``state``, ``update``, ``final``, ``removed``
    (written by the workers), or, from a subscription only, ``initial`` (the
    current record, delivered first) and ``resync`` (the record re-read after
    changes were missed that no stream holds any more; ``changes`` is empty).

    Attributes: ``id`` (``site:EPOCH:JOBID:VERSION``: deterministic, so a consumer
    can drop duplicates), ``type``, ``version`` (within ``epoch``), ``epoch`` (the
    site epoch, see :mod:`jobtap.events`), ``kind``, ``site``, ``object_id``,
    ``user``, ``observed_at``, ``changes`` (``{attr: [old, new]}``), ``record``
    (a :class:`Job`, :class:`Node` or :class:`Queue`, without ``native``: see the
    module docstring), ``final``, ``event`` (the event as a dict, the
    ``jobtap.events.Event`` schema, as it was written: a format-1 event still has
    ``record.native`` there), ``json`` (the same as bytes) and ``stream_id`` (the
    Redis stream entry id, for ``stream(since=...)``; ``None`` for pub/sub
    deliveries).

    ``missed`` (a :class:`Missed`, else ``None``): set on the change a subscription
    delivers when it catches up *by state* (it was cut off, or too far behind):
    that change is the object's current record, a ``resync`` (or, for a job that
    ended, its ``final``), and ``missed`` summarises the events it stands for.
    """

    __slots__ = (
        "id", "type", "version", "stream_id", "missed", "_event", "_json", "_record", "_final",
        "_changes",
    )  # fmt: skip

    def __init__(
        self,
        eid: str,
        etype: str,
        version: int,
        *,
        event: dict[str, Any] | None = None,
        json: bytes | None = None,
        stream_id: str | None = None,
        final: bool | None = None,
    ):
        self.id = eid
        self.type = etype
        self.version = version
        self.stream_id = stream_id
        self.missed: Missed | None = None
        self._event = event
        self._json = json
        self._record: Record | None = None
        self._final = final
        self._changes: dict[str, list[Any]] | None = None

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def from_event(cls, event: dict[str, Any], json: bytes | None = None) -> Change:
        return cls(event["id"], event["type"], int(event["version"]), event=event, json=json)

    @classmethod
    def from_json(cls, raw: bytes, stream_id: str | None = None) -> Change:
        event = orjson.loads(raw)
        return cls(
            event["id"], event["type"], int(event["version"]), event=event, json=raw,
            stream_id=stream_id,
        )  # fmt: skip

    @classmethod
    def synthesize(
        cls, etype: str, kind: str, site: str, record: dict[str, Any], *, final: bool
    ) -> Change:
        """An ``initial`` or ``resync`` change from a decoded hash: an event of
        the format workers write by default (no ``native``, no bookkeeping)."""
        version = int(record.get("version") or 0)
        event: dict[str, Any] = dict(
            ev.make_event(
                site=site, epoch=str(record.get("epoch") or ""), kind=kind, type=etype,
                object_id=str(record.get("id")), user=record.get("user") if kind == JOB else None,
                version=version, observed_at=cast(str, record.get("updated_at")), changes={},
                record={k: v for k, v in record.items() if k not in BOOKKEEPING},
            )
        )  # fmt: skip
        return cls(event["id"], etype, version, event=event, final=final)

    # -- lazy views -------------------------------------------------------------------------
    @property
    def event(self) -> dict[str, Any]:
        if self._event is None:
            event: dict[str, Any] = orjson.loads(self._json or b"{}")
            self._event = event
        return self._event

    @property
    def json(self) -> bytes:
        if self._json is None:
            self._json = orjson.dumps(self._event)
        return self._json

    @property
    def kind(self) -> str:
        kind: str = self.event.get("kind", JOB)
        return kind

    @property
    def site(self) -> str:
        site: str = self.event["site"]
        return site

    @property
    def object_id(self) -> str:
        object_id: str = self.event["object_id"]
        return object_id

    @property
    def user(self) -> str | None:
        user: str | None = self.event.get("user")
        return user

    @property
    def observed_at(self) -> datetime | None:
        return _parse_time(self.event.get("observed_at"))

    @property
    def changes(self) -> dict[str, list[Any]]:
        """``{attr: [old, new]}``, from either event format (``jobtap.events.changes_of``)."""
        if self._changes is None:
            self._changes = ev.changes_of(self.event)
        return self._changes

    @property
    def native_changed(self) -> tuple[str, ...]:
        """The keys of the scheduler's native record that changed in this
        version (their values are in the object's hash: ``Client.native()``),
        from either event format (format 1 has them in ``changes`` as
        ``native.KEY``, with their values).  Empty for a ``new`` change: every
        key is new."""
        if self.type == ev.NEW:
            return ()
        named = self.event.get("native_changed")
        if named is None:
            _, named = ev.split_native(self.changes)
        return tuple(named)

    def changed(self) -> frozenset[str]:
        """The names of what changed: the normalised attributes and, as
        ``native.KEY``, the native keys, from either event format."""
        normalised, _ = ev.split_native(self.changes)
        return frozenset(normalised) | {f"native.{key}" for key in self.native_changed}

    @property
    def epoch(self) -> str:
        """The site epoch ``version`` counts in (``""`` for an event written before
        epochs existed)."""
        return ev.split_event_id(self.id)[1]

    @property
    def final(self) -> bool:
        """True for the job's last change: nothing follows it."""
        if self._final is not None:
            return self._final
        return self.type == ev.FINAL

    @property
    def record(self) -> Record:
        if self._record is None:
            cls = RECORD_TYPES.get(self.kind, Job)
            record = ev.record_of(self.event)
            self._record = cls.from_record(record, final=self.final, native=False)
        return self._record

    def __repr__(self) -> str:
        return f"<Change {self.type} {self.id}>"
