"""``sdiag``: slurmctld's own time per RPC type, the price the collector's read
budget (collector/plan.py) puts on a listing and on a job read on its own.
The text of its "Remote Procedure Call statistics by message type" section has
kept its form from 22.05 to 25.11."""

from __future__ import annotations

import re

from ..base import StatError

__all__ = ["LISTING_RPCS", "LOCAL_SINGLE_RPCS", "SINGLE_RPCS", "parse_sdiag_rpcs"]

# slurmctld's RPCs behind a listing and behind a job read on its own (slurmrestd's
# GET /job/N: before 23.11 slurm_load_job() asks for the federation first, not
# being --local; from 23.11 the request says LOCAL: versions.Format.rest_local).
LISTING_RPCS = ("REQUEST_JOB_INFO",)
SINGLE_RPCS = ("REQUEST_JOB_INFO_SINGLE", "REQUEST_FED_INFO")
LOCAL_SINGLE_RPCS = ("REQUEST_JOB_INFO_SINGLE",)
_SDIAG_RPC = re.compile(
    r"^\s*([A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)"
)


def parse_sdiag_rpcs(raw: bytes | str) -> dict[str, tuple[int, int]]:
    """``sdiag``'s "Remote Procedure Call statistics by message type":
    ``{type: (count, total microseconds)}``.  Output without that section
    raises :class:`StatError`."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes | bytearray) else raw
    out: dict[str, tuple[int, int]] = {}
    in_section = False
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            in_section = True
            continue
        if in_section and line and not line[0].isspace():
            break
        match = _SDIAG_RPC.match(line) if in_section else None
        if match:
            out[match[1]] = (int(match[2]), int(match[3]))
    if not in_section:
        raise StatError("sdiag printed no RPC statistics by message type")
    return out
