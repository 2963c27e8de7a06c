"""Which nodes are bad, and which running jobs sit on them.

When a node of a running job goes down, drains or goes offline, the job's
``reason`` names it ("node n3 drain: bad DIMM"), so the job gets an ``update``
event: the signal that big-job users need to act before their job is
requeued.  When the node comes back, the reason goes away again (another
``update``).  The scheduler's own record of the job does not change in either
case, so the collector has to decide which jobs to refresh itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobtap.schema import BAD_NODE_STATES, EXITING, RUNNING, SUSPENDED

ON_NODES = frozenset({RUNNING, SUSPENDED, EXITING})


def bad_reason(record: dict[str, Any]) -> str | None:
    """The text a job on this node gets, or None if the node is fine."""
    state = record.get("state")
    if state not in BAD_NODE_STATES:
        return None
    why = record.get("reason")
    return f"node {record['id']} {state}" + (f": {why}" if why else "")


class NodeWatch:
    def __init__(self) -> None:
        self.bad: dict[str, str] = {}  # node -> reason text
        self.job_nodes: dict[str, tuple[str, ...]] = {}  # running job -> its nodes

    def plan(
        self, changed: Iterable[dict[str, Any]], removed: Iterable[str]
    ) -> tuple[dict[str, str], set[str]]:
        """The bad-node map after these node changes, and the nodes whose
        badness (or reason) changed."""
        bad = dict(self.bad)
        for record in changed:
            reason = bad_reason(record)
            if reason is None:
                bad.pop(record["id"], None)
            else:
                bad[record["id"]] = reason
        for name in removed:
            bad.pop(name, None)
        delta = {n for n in bad.keys() | self.bad.keys() if bad.get(n) != self.bad.get(n)}
        return bad, delta

    def jobs_on(self, nodes: set[str]) -> set[str]:
        return {jid for jid, on in self.job_nodes.items() if nodes.intersection(on)}

    def overlay(self, record: dict[str, Any], bad: dict[str, str]) -> None:
        """Name the bad nodes of a running job in its ``reason``."""
        if record.get("state") not in ON_NODES:
            return
        reasons = [bad[n] for n in record.get("allocated") or () if n in bad]
        if reasons:
            record["reason"] = "; ".join(reasons)

    def note(self, job_id: str, record: dict[str, Any]) -> None:
        nodes = record.get("allocated") or ()
        if record.get("state") in ON_NODES and nodes:
            self.job_nodes[job_id] = tuple(nodes)
        else:
            self.job_nodes.pop(job_id, None)
