"""Changes as people read them: which ones matter, and one aligned line each.

Shared by ``jobtap watch`` (one line per change) and ``jobtap top`` (the board's
list of the last changed jobs).  What a person wants to see by default is what
``kubectl get -w`` shows: objects appearing, changing state and ending; the
attribute-only updates (usage figures, comments, the scheduler's own fields)
are there on request, named by their normalised fields.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import IO

import click

import jobtap
from jobtap.events import FINAL, NEW, REMOVED, STATE, UPDATE
from jobtap.records import INITIAL, RESYNC
from jobtap.schema import BAD_NODE_STATES, COMPLETED

# Types shown without --updates.
MAIN_TYPES = frozenset({INITIAL, NEW, STATE, FINAL, REMOVED, RESYNC})
TYPE_WIDTH = 7  # "initial", "removed"

STATE_COLOURS = {
    "running": "green", "queued": "blue", "waiting": "blue", "held": "magenta",
    "suspended": "magenta", "exiting": "cyan", COMPLETED: "green", "failed": "red",
    "cancelled": "yellow", "unknown": "red", "free": "green", "busy": "cyan",
    **{s: "red" for s in BAD_NODE_STATES},
}  # fmt: skip
TYPE_COLOURS = {NEW: "cyan", STATE: "yellow", UPDATE: "white", REMOVED: "red", RESYNC: "red"}


def normalised_fields(change: jobtap.Change) -> list[str]:
    """The normalised fields a change touched (not the scheduler's ``native.*``)."""
    return sorted(f for f in change.changes if f != "native" and not f.startswith("native."))


def wanted(change: jobtap.Change, updates: bool) -> bool:
    """Whether a person watching wants this change: new, state changes, finals,
    removals and resyncs always; attribute-only updates with ``updates``, and only
    when a normalised field changed."""
    if change.type in MAIN_TYPES:
        return True
    return updates and change.type == UPDATE and bool(normalised_fields(change))


def transition(change: jobtap.Change) -> tuple[str | None, str]:
    """``(old, new)`` state; ``old`` is None when the state did not change."""
    state = change.record.state or "-"
    moved = change.changes.get("state")
    if moved and change.type in (STATE, FINAL) and moved[0] != moved[1]:
        return str(moved[0]), str(moved[1])
    return None, state


def reason(change: jobtap.Change) -> str:
    """The why of a change: the exit status and reason of a final, the reason of
    a state change, the fields of an update."""
    rec = change.record
    if change.type == UPDATE:
        return ", ".join(normalised_fields(change))
    parts = []
    if change.final and change.kind == "job" and getattr(rec, "exit_status", None) is not None:
        parts.append(f"exit {rec.exit_status}")
    if getattr(rec, "reason", None) and change.type != INITIAL:
        parts.append(str(rec.reason))
    if change.type == RESYNC:
        parts.append("resync: changes missed")
    return "; ".join(parts)


def object_name(change: jobtap.Change) -> str:
    return change.object_id if change.kind == "job" else f"{change.kind}:{change.object_id}"


def local_time(change: jobtap.Change) -> str:
    when = change.observed_at
    return when.astimezone().strftime("%H:%M:%S") if isinstance(when, datetime) else "--:--:--"


def state_colour(state: str | None) -> str | None:
    return STATE_COLOURS.get(state or "")


def final_colour(change: jobtap.Change) -> str:
    return "green" if change.record.state == COMPLETED else "red"


def use_colour(out: IO[str]) -> bool:
    """Colour on a terminal, unless NO_COLOR is set (no-color.org)."""
    return out.isatty() and not os.environ.get("NO_COLOR")


def arrow(out: IO[str]) -> str:
    encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "")
    return " → " if encoding == "utf8" else " -> "


class LineFormatter:
    """One line per change, in columns (time, site, job, user, type, old → new
    state, reason) that widen as longer values come and stay that wide."""

    def __init__(self, out: IO[str]):
        self.colour = use_colour(out)
        self.arrow = arrow(out)
        self.widths = {"site": 4, "job": 8, "user": 6, "states": 9}

    def _fit(self, column: str, text: str) -> str:
        self.widths[column] = max(self.widths[column], len(text))
        return text.ljust(self.widths[column])

    def _style(self, text: str, colour: str | None, **kw) -> str:
        return click.style(text, fg=colour, **kw) if self.colour and colour else text

    def header(self) -> str:
        w = self.widths
        cols = ["time".ljust(8), "site".ljust(w["site"]), "job".ljust(w["job"]),
                "user".ljust(w["user"]), "type".ljust(TYPE_WIDTH), "state".ljust(w["states"]),
                "reason"]  # fmt: skip
        return self._style("  ".join(cols).rstrip(), "white", dim=True)

    def line(self, change: jobtap.Change) -> str:
        old, new = transition(change)
        states = new if old is None else f"{old}{self.arrow}{new}"
        padded = self._fit("states", states)
        if self.colour:  # colour the state names, keep the padding
            pad = padded[len(states) :]
            new_c = self._style(new, state_colour(new), bold=True)
            states_c = new_c if old is None else (
                self._style(old, state_colour(old)) + self.arrow + new_c
            )  # fmt: skip
            padded = states_c + pad
        etype = change.type
        colour = final_colour(change) if etype == FINAL else TYPE_COLOURS.get(etype)
        cols = [
            local_time(change),
            self._fit("site", change.site or "-"),
            self._style(self._fit("job", object_name(change)), "white", bold=True),
            self._fit("user", change.user or "-"),
            self._style(etype.ljust(TYPE_WIDTH), colour),
            padded,
            reason(change),
        ]
        return "  ".join(cols).rstrip()
