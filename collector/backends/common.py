"""Helpers the command-driven backends (``pbs``, ``slurm``, ``flux``) share.

What belongs here is logic that is the same in more than one backend, down to
its error messages: running a command through the backend's prefix
(:class:`CommandBackend`), loading a command's JSON output
(:func:`load_json`, :func:`load_object`), turning native fields into text,
numbers and objects the way the normalisers do (:func:`text_field`,
:func:`as_int`, :func:`parse_int`, :func:`mapping_field`,
:func:`check_record`), epoch seconds as ISO-8601 (:func:`epoch_iso`) and the
queue states (``QUEUE_*``, :func:`queue_state`).  Where backends differ in a
detail (what an empty text becomes, whether ``"42"`` is a number), the
difference is a keyword or a second function, so that each backend keeps its
own rule.

What does not belong here: anything one scheduler alone prints or means (state
tables, id formats, hostlist dialects: Slurm's and Flux's differ in what they
accept and how they fail), and ``journal_reader/flux_journal_reader.py``, which runs on its
own under ``flux python`` and imports nothing from the collector.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from .base import BadRecord, Cost, Native, PokedReads, StatError
from .run import run, run_full

__all__ = [
    "MAX_TEXT",
    "QUEUE_CLOSED",
    "QUEUE_OPEN",
    "QUEUE_STOPPED",
    "CommandBackend",
    "as_int",
    "check_record",
    "epoch_iso",
    "load_json",
    "load_object",
    "mapping_field",
    "parse_int",
    "queue_state",
    "text_field",
]

MAX_TEXT = 65536  # longest name, comment, account... accepted in a record

# Queue states (PBS's words, used by every backend): open = accepts and runs
# jobs; stopped = accepts jobs but starts none; closed = refuses new jobs.
QUEUE_OPEN = "open"
QUEUE_STOPPED = "stopped"
QUEUE_CLOSED = "closed"


def queue_state(enabled: bool, started: bool) -> str:
    """``open`` (enabled and started), ``stopped`` (enabled only) or ``closed``."""
    return (QUEUE_OPEN if started else QUEUE_STOPPED) if enabled else QUEUE_CLOSED


# Running ---------------------------------------------------------------------------
class CommandBackend:
    """A backend that runs its scheduler's commands, locally or through a
    prefix such as ``"ssh head1"`` (a string is split with shlex).  When the
    prefix runs ``ssh``, the command's words are shell-quoted, because ssh
    hands them to a remote shell that would glob ``2[1].vm``."""

    def __init__(self, *, prefix: str | Sequence[str] = (), timeout: float = 60.0) -> None:
        self.prefix: list[str] = shlex.split(prefix) if isinstance(prefix, str) else list(prefix)
        self.timeout = float(timeout)
        self._quote = bool(self.prefix) and self.prefix[0].rpartition("/")[2] == "ssh"
        self.cost = Cost()  # commands run and bytes read, for the collector's report

    def poked_reads(self) -> PokedReads:
        """Poked jobs are read with the scheduler's commands, one by one or
        with a listing, priced by their wall time (a backend with more ways
        says so by overriding this)."""
        return PokedReads()

    def _via(self) -> str:
        """`` via 'ssh head1'`` for ``__repr__``, or "" without a prefix."""
        return f" via {shlex.join(self.prefix)!r}" if self.prefix else ""

    def command(self, argv: Sequence[str]) -> list[str]:
        """The words handed to the prefix (shell-quoted when it is ssh)."""
        return [shlex.quote(word) for word in argv] if self._quote else list(argv)

    def _run(self, argv: Sequence[str], input: bytes | None = None) -> bytes:
        """The command's standard output (``input``: what to write to its
        standard input); every failure is a :class:`StatError`."""
        try:
            out = run(self.command(argv), prefix=self.prefix, timeout=self.timeout, input=input)
        except StatError:
            self.cost.add(0)
            raise
        self.cost.add(out)
        return out

    def _run_full(
        self, argv: Sequence[str], input: bytes | None = None
    ) -> tuple[int, bytes, bytes]:
        """``(returncode, stdout, stderr)``, for a caller that judges the exit status."""
        try:
            result = run_full(
                self.command(argv), prefix=self.prefix, timeout=self.timeout, input=input
            )
        except StatError:
            self.cost.add(0)
            raise
        self.cost.add(result[1])
        return result


# Loading JSON ----------------------------------------------------------------------
def load_json(
    raw: bytes | str, command: str, *, expected: str = "JSON", report_first_error: bool = False
) -> Any:
    """One ``orjson.loads`` of a whole command output.

    Schedulers copy job attributes (a user's environment, job names) byte for
    byte into their JSON; one job with a Latin-1 byte must not turn the whole
    stat into a failure.  So output that is not valid UTF-8 is parsed once more
    with the invalid bytes replaced.  Anything else that does not parse raises
    :class:`StatError` with the parser's complaint and a short excerpt: the
    complaint of the retry, or, with ``report_first_error``, that of the first
    attempt (the Slurm backend's wording).  ``expected`` says what an empty
    output should have been.
    """
    if not raw or not raw.strip():
        raise StatError(f"{command} printed nothing (expected {expected})")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as first:
        error: Exception = first
        if isinstance(raw, bytes | bytearray | memoryview):
            data = bytes(raw)
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                try:
                    return orjson.loads(data.decode("utf-8", errors="replace"))
                except orjson.JSONDecodeError as again:
                    if not report_first_error:
                        error = again
            text = data[:80].decode("utf-8", errors="replace")
        else:
            text = str(raw)[:80]
        excerpt = " ".join(text.split())
        message = f"{command} printed output that is not JSON ({error}): {excerpt!r}"
        raise StatError(message) from error


def load_object(
    raw: bytes | str, command: str, *, report_first_error: bool = False
) -> dict[str, Any]:
    """:func:`load_json` of an output that must be a JSON object."""
    doc = load_json(raw, command, expected="a JSON object", report_first_error=report_first_error)
    if not isinstance(doc, dict):
        raise StatError(f"{command} printed JSON that is not an object: {type(doc).__name__}")
    return doc


# Fields ----------------------------------------------------------------------------
def check_record(native: Any, what: str) -> Native:
    """``native`` if it is a JSON object; else :class:`BadRecord` naming the
    ``what`` (``"job"``, ``"node"``, ``"queue"``) of the record."""
    if not isinstance(native, dict):
        raise BadRecord(f"{what} record is a {type(native).__name__}, expected an object")
    return native


def text_field(
    native: Native, key: str, *, empty_is_none: bool = False, booleans: bool = True
) -> str | None:
    """A scalar attribute as text (None if absent).

    Schedulers' JSON turns some values into numbers (``-A 42`` can come back as
    ``42``), so numbers are spelled back; booleans become ``"true"``/``"false"``,
    or, without ``booleans``, are refused like any other non-scalar.  With
    ``empty_is_none`` the empty string is None.  Text longer than ``MAX_TEXT``
    and values that are not scalars raise :class:`BadRecord`.
    """
    value = native.get(key)
    if value is None or (empty_is_none and value == ""):
        return None
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise BadRecord(f"{key} longer than {MAX_TEXT} characters")
        return value
    if isinstance(value, bool):
        if booleans:
            return "true" if value else "false"
    elif isinstance(value, int | float):
        return str(value)
    raise BadRecord(f"{key} is a {type(value).__name__}, expected text: {value!r:.80}")


def mapping_field(native: Native, key: str) -> dict[str, Any]:
    """An object attribute ({} if absent); anything else raises :class:`BadRecord`."""
    value = native.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRecord(f"{key} is a {type(value).__name__}, expected an object")
    return value


def as_int(value: Any) -> int | None:
    """A JSON number with a whole value as int (``3.0`` -> 3); None for
    anything else, booleans and text included."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def parse_int(value: Any) -> int | None:
    """:func:`as_int`, and also text that holds a whole number (``" 42"``)."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return as_int(value)


# Times -----------------------------------------------------------------------------
def epoch_iso(seconds: float, timespec: str = "auto") -> str | None:
    """Seconds since the epoch as UTC ISO-8601 with offset; None where
    ``datetime`` cannot represent it."""
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec=timespec)
    except (OverflowError, OSError, ValueError):
        return None
