"""Slurm's ways of writing a value, read alike whatever the release: epoch
seconds, host lists (``n[1-3],gpu01``), array task lists (``2-5%2``), wait
statuses and ``EXIT:SIGNAL`` texts, TRES strings, time limits in minutes.

Nothing here depends on the generation of the JSON (that is :mod:`.versions`):
these are the values inside it, unchanged since 22.05.
"""

from __future__ import annotations

import pwd
import re
from collections.abc import Iterator
from functools import lru_cache, partial
from itertools import product
from typing import Any

from ..common import epoch_iso, parse_int, text_field

__all__ = [
    "JOB_ID",
    "MAX_ARRAY_TASKS",
    "duration",
    "exit_status_from_text",
    "exit_status_from_wait",
    "expand_hostlist",
    "expand_task_ids",
    "jobtap_id",
    "slurm_time",
    "text",
    "tres",
    "user_of_uid",
    "walltime",
]

MAX_ARRAY_TASKS = 100_000
# jobtap's ids of Slurm jobs: a number, or ARRAY_TASK for an array task.
JOB_ID = re.compile(r"^\d+(?:_\d+)?$")
_NO_NODES = frozenset({"", "None assigned", "(null)"})

# A text attribute; the empty string is None.
text = partial(text_field, empty_is_none=True)


def jobtap_id(job_id: Any, array_id: int | None, task: int | None) -> str | None:
    """jobtap's id of a job Slurm numbers ``job_id``: ``ARRAY_TASK`` for an
    array's task (``array_id`` set, ``task`` known), else the number; None
    for a record without a usable number."""
    number = parse_int(job_id)
    if number is None or number < 0:
        return None
    if array_id and task is not None:
        return f"{array_id}_{task}"
    return str(number)


def slurm_time(value: Any) -> str | None:
    """Seconds since the epoch as UTC ISO-8601 with offset; None for 0, absent or odd."""
    seconds = parse_int(value)
    if seconds is None or seconds <= 0:
        return None
    return epoch_iso(seconds)


def expand_task_ids(spec: str, limit: int = MAX_ARRAY_TASKS) -> list[int] | None:
    """Slurm's array task string as task ids: ``"2-5%2"`` -> [2, 3, 4, 5],
    ``"1,3,7-11:2"`` -> [1, 3, 7, 9, 11].  None if it does not parse or holds
    more than ``limit`` tasks."""
    spec = spec.partition("%")[0].strip()
    if not spec:
        return None
    ids: list[int] = []
    for part in spec.split(","):
        rng, _, step_text = part.partition(":")
        first, dash, last = rng.partition("-")
        try:
            lo = int(first)
            hi = int(last) if dash else lo
            step = int(step_text) if step_text else 1
        except ValueError:
            return None
        if lo < 0 or hi < lo or step < 1:
            return None
        if len(ids) + (hi - lo) // step + 1 > limit:
            return None
        ids.extend(range(lo, hi + 1, step))
    return ids


def _hostlist_items(value: str) -> Iterator[str]:
    """Split at the commas that are not inside brackets."""
    depth, start = 0, 0
    for i, ch in enumerate(value):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            yield value[start:i]
            start = i + 1
    yield value[start:]


def _expand_ranges(body: str) -> list[str]:
    values: list[str] = []
    for part in body.split(","):
        first, dash, last = part.partition("-")
        if not dash:
            values.append(first)
            continue
        width = len(first)
        lo, hi = int(first), int(last)
        if hi < lo or hi - lo > 100_000:
            raise ValueError(part)
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


_BRACKET = re.compile(r"\[([^\]]*)\]")


@lru_cache(maxsize=4096)
def _expand_one(item: str) -> tuple[str, ...]:
    pieces = _BRACKET.split(item)  # text, ranges, text, ranges, ..., text
    choices: list[list[str]] = []
    for i, piece in enumerate(pieces):
        choices.append(_expand_ranges(piece) if i % 2 else [piece])
    return tuple("".join(combo) for combo in product(*choices))


def expand_hostlist(value: Any) -> list[str]:
    """Slurm's host list as names: ``"n[1-3],gpu01"`` -> ``["n1", "n2", "n3", "gpu01"]``;
    zero padding (``n[01-02]``) and several brackets (``r[1-2]n[1-2]``) too.  An
    empty list for ``""``, ``"None assigned"`` or anything else that is not text;
    a malformed part is kept as printed."""
    if not isinstance(value, str) or value.strip() in _NO_NODES:
        return []
    names: dict[str, None] = {}
    for item in _hostlist_items(value.strip()):
        item = item.strip()
        if not item:
            continue
        try:
            expanded = _expand_one(item) if "[" in item else (item,)
        except ValueError:
            expanded = (item,)
        for name in expanded:
            names[name] = None
    return list(names)


def exit_status_from_wait(value: Any) -> int | None:
    """A wait status as an exit status: ``768`` -> 3, ``15`` (killed by
    SIGTERM) -> 271 (256 + signal, PBS's convention)."""
    status = parse_int(value)
    if status is None or status < 0 or status > 0xFFFF:
        return None
    signal = status & 0x7F
    if signal and signal != 0x7F:
        return 256 + signal
    return (status >> 8) & 0xFF


def exit_status_from_text(value: Any) -> int | None:
    """sacct's ``ExitCode`` text ``"EXIT:SIGNAL"``: ``"3:0"`` -> 3, ``"0:9"`` -> 265."""
    if not isinstance(value, str):
        return None
    code, _, signal = value.partition(":")
    code_n, signal_n = parse_int(code), parse_int(signal) if signal else 0
    if code_n is None or signal_n is None:
        return None
    return 256 + signal_n if signal_n else code_n


def walltime(minutes: int | None) -> str | None:
    """A time limit in minutes as ``HH:MM:SS`` (PBS's walltime format); None = no limit."""
    if minutes is None or minutes < 0 or minutes >= 0xFFFFFFFE:
        return None
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def duration(seconds: Any) -> str | None:
    s = parse_int(seconds)
    if s is None or s < 0:
        return None
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def tres(value: Any) -> dict[str, str]:
    """``"cpu=16,mem=4000M,node=4"`` -> ``{"cpu": "16", "mem": "4000M", "node": "4"}``."""
    out: dict[str, str] = {}
    if isinstance(value, str):
        for part in value.split(","):
            key, eq, val = part.partition("=")
            if eq and key:
                out[key.strip()] = val.strip()
    return out


@lru_cache(maxsize=1024)
def user_of_uid(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return None
