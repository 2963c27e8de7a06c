"""Checks of what was written across Redis losing data (several site epochs):
ids never reused, versions 1, 2, 3... per object within each epoch, and, against
the simulation's ground truth, a final for every job that ended."""

from __future__ import annotations

from collections import defaultdict

import orjson

from jobtap.schema import TERMINAL


class Written:
    """Every event a site's streams held, gathered before each loss and at the
    end (a loss takes events with it; what was gathered before still counts)."""

    def __init__(self, *, strict: bool = True) -> None:
        self.by_id: dict[str, bytes] = {}
        self.order: list[dict] = []
        self.strict = strict
        self.reused: list[str] = []  # ids found again with other content

    def gather(self, r, stream: str) -> int:
        """Add the stream's events not seen yet (in stream order); return how many.
        An id seen before with other content fails at once (``strict``), or is
        counted in ``reused``."""
        added = 0
        for _, fields in r.xrange(stream):
            event = orjson.loads(fields[b"event"])
            body = orjson.dumps(event, option=orjson.OPT_SORT_KEYS)
            known = self.by_id.setdefault(event["id"], body)
            if known != body:
                assert not self.strict, f"event id {event['id']} reused for another event"
                self.reused.append(event["id"])
            elif known is body:
                self.order.append(event)
                added += 1
        return added

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
        assert finals, (jid, "ended without a final", [e["id"] for e in evs])
        last = evs[-1]
        assert last["type"] == "final", (jid, "something after the last final", last["id"])
        rec = last["record"]
        if truth.purged or rec["reason"] == "vanished":
            assert rec["state"] in ("unknown", truth.final_state), (jid, rec)
        else:
            assert rec["state"] == truth.final_state, (jid, rec["state"], truth)
            assert rec["exit_status"] == truth.exit_status, (jid, rec, truth)
            assert rec["state"] in TERMINAL
        checked += 1
    return checked
