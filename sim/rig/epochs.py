"""Checks of what was written across Redis losing data (several site epochs):
ids never reused, versions 1, 2, 3... per object within each epoch, and, against
the simulation's ground truth, a final for every job that ended."""

from __future__ import annotations

import hashlib
import threading
from collections import defaultdict
from typing import Any

import orjson

from jobtap.entries import xrange_events
from jobtap.events import record_of
from jobtap.schema import TERMINAL


def content(event: dict[str, Any]) -> bytes:
    """What an event says, all of it (type, version, changes, record...), as a
    digest of its canonical JSON: two events are the same event iff equal."""
    body = orjson.dumps(event, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(body, digest_size=16).digest()


def slim(event: dict[str, Any]) -> dict[str, Any]:
    """What the checks read of an event (a long soak keeps hundreds of thousands)."""
    rec = event.get("record") or {}
    kept = {k: event[k] for k in ("id", "epoch", "kind", "object_id", "version", "type")}
    kept["observed_at"] = event.get("observed_at")
    kept["record"] = {k: rec.get(k) for k in ("state", "reason", "exit_status")}
    return kept


class Written:
    """Every event a site's stream held, each stream entry noted once, whoever
    read it: a tap following the stream as it grows (sim.rig.lossrun), and
    gatherings of the whole stream (what a later loss takes away still counts).

    Every event is checked against its content, not only its id: an id found
    again with other content (type, version, record...) is a failure, and one
    found in two stream entries is an id written twice."""

    def __init__(self, *, strict: bool = True) -> None:
        self.by_id: dict[str, bytes] = {}  # id -> the first content (see content())
        self.entries: dict[str, set[str]] = defaultdict(set)  # id -> stream entry ids
        self.order: list[dict] = []  # the first event of each id, slim(), stream order
        self.first: dict[str, dict] = {}  # id -> that event
        self.strict = strict
        self.reused: list[str] = []  # ids found again with other content
        self.others: dict[str, list[dict]] = {}  # those ids: every event found (slim)
        self.lock = threading.Lock()

    def add(self, sid: str, event: dict, *, strict: bool | None = None) -> bool:
        """Note the stream entry ``sid`` holding ``event``; return whether its id is
        new.  An entry noted already is ignored.  An id seen before with other
        content fails at once (``strict``, by default the instance's), or is
        counted in ``reused``."""
        body = content(event)
        eid = event["id"]
        with self.lock:
            if sid in self.entries[eid]:
                return False
            self.entries[eid].add(sid)
            known = self.by_id.setdefault(eid, body)
            if known is body:
                self.first[eid] = slim(event)
                self.order.append(self.first[eid])
                return True
            if known != body:
                if self.strict if strict is None else strict:
                    raise AssertionError(f"event id {eid} reused for another event")
                self.reused.append(eid)
                self.others.setdefault(eid, [self.first[eid]]).append(slim(event))
            return False

    def gather(self, r, stream: str) -> int:
        """Add the stream's entries not noted yet (in stream order); return how
        many new ids."""
        return sum(
            self.add(sid, orjson.loads(fields[b"event"]))
            for sid, fields in xrange_events(r, stream)
            if fields
        )

    def twice(self) -> list[str]:
        """The ids found in more than one stream entry (written twice)."""
        with self.lock:
            return [eid for eid, sids in self.entries.items() if len(sids) > 1]

    def two_contents(self, limit: int = 5) -> list[str]:
        """Up to ``limit`` ids with two contents, each with what it named."""
        out = []
        with self.lock:
            for eid, seen in list(self.others.items())[:limit]:
                out.append(f"{eid}: " + " / ".join(_summary(e) for e in seen))
        return out

    @property
    def ids(self) -> set[str]:
        return set(self.by_id)

    def epochs(self) -> list[str]:
        return list(dict.fromkeys(e["epoch"] for e in self.order))

    def version_gaps(self) -> list[tuple[tuple[str, str, str], list[int]]]:
        """The objects whose versions within an epoch are not 1, 2, 3... with no gap."""
        seq: dict[tuple[str, str, str], list[int]] = defaultdict(list)
        for e in self.order:
            seq[(e["epoch"], e["kind"], e["object_id"])].append(e["version"])
        return [(k, vs) for k, vs in seq.items() if vs != list(range(1, len(vs) + 1))]

    def check_versions(self) -> None:
        """Per object and epoch: 1, 2, 3... with no gap."""
        gaps = self.version_gaps()
        assert not gaps, gaps[:5]

    def jobs(self) -> dict[str, list[dict]]:
        out: dict[str, list[dict]] = defaultdict(list)
        for e in self.order:
            if e["kind"] == "job":
                out[e["object_id"]].append(e)
        return out


def _summary(event: dict) -> str:
    return (f"{event['type']} v{event['version']} observed {event['observed_at']} "
            f"state {event['record']['state']}")  # fmt: skip


def check_finals_against_truth(written: Written, sim, last_stat: float) -> int:
    """Every job that ended before ``last_stat`` and was ever seen ends with a
    final of the right state; no live job has one.  Return how many were checked."""
    checked = 0
    for jid, evs in written.jobs().items():
        truth = sim.truth[jid]
        ended_at = truth.transitions[-1][0] if truth.final_state else None
        finals = [e for e in evs if e["type"] == "final"]
        if ended_at is None or ended_at > last_stat:
            assert not finals, (jid, "final for a job that has not ended", truth)
            continue
        assert finals, (jid, "ended without a final", f"ended at {ended_at}, last stat "
                        f"{last_stat}", truth.transitions[-3:], [_summary(e) for e in evs[-3:]],
                        [e["id"] for e in evs])  # fmt: skip
        last = evs[-1]
        assert last["type"] == "final", (jid, "something after the last final", last["id"])
        rec = record_of(last)
        if truth.purged or rec["reason"] == "vanished":
            assert rec["state"] in ("unknown", truth.final_state), (jid, rec)
        else:
            assert rec["state"] == truth.final_state, (jid, rec["state"], truth)
            assert rec["exit_status"] == truth.exit_status, (jid, rec, truth)
            assert rec["state"] in TERMINAL
        checked += 1
    return checked
