"""Normalised job and node records as a backend would produce them, for tests
that drive the real apply step directly."""

from __future__ import annotations


def job_record(
    jid: str = "1.pbs", user: str = "alice", state: str = "queued", site: str = "t1", **extra
) -> dict:
    """A normalised job record as a backend would produce it (for tests that
    drive the real apply step directly)."""
    rec = {
        "id": jid, "site": site, "scheduler": "pbs", "user": user, "group": "g",
        "account": None, "name": "j", "queue": "workq", "state": state,
        "native_state": state[0].upper(), "reason": None, "comment": None,
        "submit_time": "2026-11-21T14:40:20+00:00", "start_time": None, "end_time": None,
        "exit_status": None, "requested": {"ncpus": 1}, "allocated": [],
        "resources_used": {}, "array_parent": None, "array_index": None, "priority": 0,
        "native": {"job_state": state[0].upper(), "Job_Owner": f"{user}@vm"},
    }  # fmt: skip
    rec.update(extra)
    return rec


def node_record(name: str = "n1", state: str = "free", site: str = "t1", **extra) -> dict:
    rec = {
        "id": name, "site": site, "scheduler": "pbs", "state": state, "native_state": state,
        "reason": None, "jobs": [], "resources": {}, "native": {"state": state},
    }  # fmt: skip
    rec.update(extra)
    return rec
