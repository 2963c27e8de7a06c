"""``jobtap top``: a live full-screen board of a site, like ``top`` for jobs.

Everything on it is pushed: one SDK subscription (every job of the site for an
operator, else the user's own jobs, plus the nodes) delivers the current records
and then each change; the collector's health comes on the site's health channel
after each cycle.  Nothing polls Redis in a loop: between pushes the board only
redraws its clocks.  Shown: live jobs by state per user and per queue, the jobs
that changed last, nodes in trouble, the collector's health, and the lag from
the collector's observation to this board.  ``q`` quits.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
import threading
import time
import tty
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import click
import orjson
import redis
from redis.cluster import RedisCluster
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

import jobtap
from jobtap.connection import Server
from jobtap.contract import meta as meta_field
from jobtap.events import FINAL, NEW, REMOVED, STATE
from jobtap.keys import SiteKeys
from jobtap.records import INITIAL, RESYNC
from jobtap.schema import BAD_NODE_STATES, JOB, NODE
from jobtap.urls import SiteConfig, resolve

from .changes import object_name, reason, state_colour, transition
from .jobs import connection_options, make_client, require_written, sdk_errors

STATES = ("queued", "held", "waiting", "running", "suspended", "exiting")
SHOWN_TYPES = frozenset({NEW, STATE, FINAL, REMOVED, RESYNC})
LAG_WINDOW = 60.0  # seconds of lag samples summarised on the board
KEY_WAIT = 0.05  # seconds between two looks at the keyboard and the board's change flag
REDRAW = 0.1  # at most this often (seconds) after a change
TICK = 1.0  # redraw the clocks this often without changes


def _ts(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


@dataclass
class Seen:
    """What the board keeps of a job (not the whole record)."""

    user: str
    queue: str
    state: str


@dataclass
class Board:
    """The board's model.  Fed on the SDK's thread (changes) and the health
    thread; read by the drawing loop.  ``queue``: count only this queue's jobs."""

    queue: str | None = None
    jobs: dict[str, Seen] = field(default_factory=dict)
    by_user: Counter = field(default_factory=Counter)  # (user, state) -> live jobs
    by_queue: Counter = field(default_factory=Counter)  # (queue, state) -> live jobs
    finished: Counter = field(default_factory=Counter)
    recent: deque = field(default_factory=lambda: deque(maxlen=50))
    bad_nodes: dict[str, tuple[str, str]] = field(default_factory=dict)
    lags: deque = field(default_factory=lambda: deque(maxlen=100_000))
    health: dict[str, Any] = field(default_factory=dict)
    health_note: str = "waiting for the collector's next cycle"
    changed: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    # -- fed by pushes ------------------------------------------------------------------
    def on_change(self, change: jobtap.Change) -> None:
        with self.lock:
            if change.kind == NODE:
                self._node(change)
            elif change.kind == JOB:
                self._job(change)
        self.changed.set()

    def _job(self, change: jobtap.Change) -> None:
        rec = change.record
        if self.queue is not None and rec.queue != self.queue:
            return
        if change.type not in (INITIAL, RESYNC) and change.observed_at is not None:
            self.lags.append((time.time(), time.time() - change.observed_at.timestamp()))
        self._count(self.jobs.pop(change.object_id, None), -1)
        if change.final or change.type == REMOVED:
            if change.type != INITIAL:
                self.finished[rec.state or "unknown"] += 1
        else:
            seen = Seen(change.user or "-", rec.queue or "-", rec.state or "unknown")
            self.jobs[change.object_id] = seen
            self._count(seen, 1)
        if change.type in SHOWN_TYPES:
            self.recent.appendleft(change)

    def _count(self, seen: Seen | None, n: int) -> None:
        if seen is not None:
            self.by_user[seen.user, seen.state] += n
            self.by_queue[seen.queue, seen.state] += n

    def forget_all(self) -> None:
        """Drop everything (a refused subscription may have delivered some)."""
        with self.lock:
            self.jobs.clear()
            self.by_user.clear()
            self.by_queue.clear()
            self.bad_nodes.clear()

    def _node(self, change: jobtap.Change) -> None:
        rec = change.record
        if change.type != REMOVED and rec.state in BAD_NODE_STATES:
            self.bad_nodes[change.object_id] = (rec.state, rec.reason or "")
        else:
            self.bad_nodes.pop(change.object_id, None)

    def on_health(self, fields: dict[str, Any]) -> None:
        with self.lock:
            self.health.update(fields)
            self.health_note = ""
        self.changed.set()

    def no_health(self, note: str) -> None:
        with self.lock:
            self.health_note = note
        self.changed.set()

    # -- read by the drawing ------------------------------------------------------------
    def counts(self) -> tuple[Counter, Counter]:
        """``(user, state)`` and ``(queue, state)`` counts of the live jobs."""
        return +self.by_user, +self.by_queue  # without the zeros

    def lag_summary(self, now: float) -> tuple[int, float, float] | None:
        """``(samples, p50, p99)`` of the lag over the last LAG_WINDOW seconds."""
        while self.lags and self.lags[0][0] < now - LAG_WINDOW:
            self.lags.popleft()
        if not self.lags:
            return None
        values = sorted(lag for _, lag in self.lags)
        pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
        return len(values), pick(0.5), pick(0.99)


class HealthFeed(threading.Thread):
    """The collector's health: ``meta`` once, then each cycle's message on the
    site's health channel.  A user whose ACL refuses both gets a note instead."""

    def __init__(self, config: SiteConfig, keys: SiteKeys, board: Board):
        super().__init__(name="jobtap-top-health", daemon=True)
        self.config, self.keys, self.board = config, keys, board
        self.stopped = threading.Event()

    def run(self) -> None:
        backoff = 0.5
        while not self.stopped.is_set():
            try:
                self._listen()
                return
            except redis.exceptions.NoPermissionError:
                who = self.config.username or "this user"
                self.board.no_health(f"not visible to {who} (the health channel is for operators)")
                return
            except redis.RedisError as exc:
                self.board.no_health(f"health channel: {exc}; retrying")
                self.stopped.wait(backoff)
                backoff = min(5.0, backoff * 2)

    def _listen(self) -> None:
        server = Server(self.config)
        try:
            r = server.redis
            meta = r.hgetall(self.keys.meta)
            if meta:
                self.board.on_health({k.decode(): v.decode() for k, v in meta.items()})
            ps = r.pubsub(ignore_subscribe_messages=True)
            if isinstance(r, RedisCluster):  # a sharded channel, on the site's shard
                ps.ssubscribe(self.keys.health_channel)
                read = ps.get_sharded_message
            else:
                ps.subscribe(self.keys.health_channel)
                read = ps.get_message
            while not self.stopped.is_set():
                msg = read(timeout=1.0)  # waits on the socket: no command is sent
                if msg is not None and msg["type"] in ("message", "smessage"):
                    self.board.on_health(orjson.loads(msg["data"]))
        finally:
            server.close()

    def stop(self) -> None:
        self.stopped.set()


# -- drawing ---------------------------------------------------------------------------------
def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def health_line(board: Board, now: float) -> Text:
    h = board.health
    text = Text("collector ")
    if not h:
        return text.append(board.health_note, style="dim")
    status = str(h.get("status", "?"))
    text.append(status, style={"ok": "bold green", "failing": "bold red"}.get(status, "yellow"))
    last_ok = _ts(h.get(meta_field.LAST_OK_AT))
    interval = float(h.get("interval") or 0) or None
    if last_ok is not None:
        ago = now - last_ok
        stale = interval is not None and ago > 3 * interval
        text.append(f"  last cycle {h.get(meta_field.LAST_CYCLE, '?')} ")
        text.append(f"{_ago(ago)} ago", style="bold red" if stale else "")
        text.append(f", took {float(h.get(meta_field.LAST_DURATION_S) or 0):.2f}s")
    if interval is not None:
        text.append(f", every {interval:g}s")
    if status == "failing" and h.get(meta_field.LAST_ERROR):
        text.append(f"  error: {str(h[meta_field.LAST_ERROR])[:120]}", style="red")
    if board.health_note:
        text.append(f"  ({board.health_note})", style="dim")
    return text


def lag_line(board: Board, now: float) -> Text:
    summary = board.lag_summary(now)
    text = Text("lag (observed → shown) ")
    if summary is None:
        return text.append(f"no changes in the last {LAG_WINDOW:.0f}s", style="dim")
    n, p50, p99 = summary
    style = "bold red" if p99 > 5 else ("yellow" if p99 > 1 else "green")
    text.append(f"p50 {p50:.2f}s  p99 {p99:.2f}s", style=style)
    return text.append(f"  ({n} changes in {LAG_WINDOW:.0f}s)", style="dim")


def count_table(title: str, what: str, counts: Counter, rows: int) -> Table:
    """Live jobs by state, one row per ``what`` (user or queue), biggest first,
    after a ``(all)`` row."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  expand=False, title_style="bold")  # fmt: skip
    table.add_column(what)
    extra = sorted({s for _, s in counts} - set(STATES))
    states = [*STATES, *extra]
    for state in states:
        table.add_column(state, justify="right", style=state_colour(state) or "")
    table.add_column("total", justify="right", style="bold")
    totals: Counter = Counter()
    per_name: dict[str, Counter] = {}
    for (name, state), n in counts.items():
        per_name.setdefault(name, Counter())[state] += n
        totals[state] += n
    table.add_row("(all)", *(str(totals[s]) for s in states), str(sum(totals.values())),
                  style="bold")  # fmt: skip
    ranked = sorted(per_name.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    for name, c in ranked[:rows]:
        table.add_row(name, *(str(c[s]) for s in states), str(sum(c.values())))
    if len(ranked) > rows:
        table.add_row(f"… {len(ranked) - rows} more", *([""] * (len(states) + 1)), style="dim")
    return table


def changes_table(board: Board, rows: int) -> Table:
    table = Table(title="last changes", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, title_style="bold")  # fmt: skip
    for name in ("time", "job", "user", "queue", "type", "state", "reason"):
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    for change in list(board.recent)[:rows]:
        old, new = transition(change)
        states = Text()
        if old is not None:
            states.append(old, style=state_colour(old) or "").append(" → ")
        states.append(new, style=f"bold {state_colour(new) or ''}".strip())
        when = change.observed_at
        table.add_row(
            when.astimezone().strftime("%H:%M:%S") if when else "-",
            object_name(change), change.user or "-", change.record.queue or "-",
            change.type, states, reason(change)[:60],
        )  # fmt: skip
    return table


def nodes_table(board: Board, rows: int) -> Table | Text:
    if not board.bad_nodes:
        return Text("node trouble: none", style="green")
    table = Table(title=f"node trouble ({len(board.bad_nodes)})", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, title_style="bold red")  # fmt: skip
    for name in ("node", "state", "reason"):
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    for name, (state, why) in sorted(board.bad_nodes.items())[:rows]:
        table.add_row(name, Text(state, style=state_colour(state) or ""), why[:80])
    return table


def render(board: Board, heading: str, notes: list[str], height: int) -> Group:
    now = time.time()
    with board.lock:
        by_user, by_queue = board.counts()
        finished = ", ".join(f"{n} {s}" for s, n in sorted(board.finished.items())) or "none"
        # rows for each part, so that the board fits the terminal's height
        spare = max(3, height - 16 - len(notes))
        users = max(2, spare // 4)
        queues = max(1, spare // 6)
        recent = max(3, spare - users - queues - min(len(board.bad_nodes), spare // 6))
        parts = [
            Text.assemble(
                (heading, "bold"),
                "  ",
                (datetime.now(UTC).astimezone().strftime("%H:%M:%S"), "dim"),
            ),  # fmt: skip
            health_line(board, now),
            lag_line(board, now),
            Text(f"finished while watching: {finished}", style="dim"),
            count_table("jobs by user", "user", by_user, users),
            count_table("jobs by queue", "queue", by_queue, queues),
            changes_table(board, recent),
            nodes_table(board, max(1, spare // 6)),
        ]
    footer = Text("q quit", style="reverse")
    for note in notes:
        footer.append("\n" + note, style="dim")
    return Group(*parts, footer)


# -- the terminal -----------------------------------------------------------------------------
class Keys:
    """Single key presses from the terminal (cbreak mode), restored on exit."""

    def __init__(self, stream=sys.stdin):
        self.fd = stream.fileno()
        self.saved = termios.tcgetattr(self.fd)

    def __enter__(self) -> Keys:
        tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc: object) -> None:
        termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def read(self, timeout: float) -> str:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        return os.read(self.fd, 32).decode(errors="replace") if ready else ""


def subscribe(client: jobtap.Client, board: Board, user: str | None) -> tuple[Any, str]:
    """The board's subscription and what it covers: ``user``'s jobs, else every
    job of the site, falling back to the client's own jobs when its ACL refuses
    the site-wide channel (an ordinary user)."""
    kinds = ("job", "node")
    if user is not None:
        return client.subscribe(board.on_change, user=user, kinds=kinds), f"jobs of {user}"
    try:
        return client.subscribe(board.on_change, all_jobs=True, kinds=kinds), "every job"
    except jobtap.PermissionDenied:
        if client.user is None:
            raise
    board.forget_all()
    sub = client.subscribe(board.on_change, user=client.user, kinds=kinds)
    return sub, f"jobs of {client.user}"


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@click.command()
@click.option("--user", "-u", default=None, help="Only this user's jobs.")
@click.option("--queue", "-q", "queue_name", default=None, help="Only this queue's jobs.")
@click.option("--note", "notes", multiple=True, hidden=True, help="A line under the board.")
@connection_options
def top(redis_url, site, credentials, user, queue_name, notes):
    """A live board of the site: jobs by state per user and queue, the last
    changes, node trouble, the collector's health and the lag.  Pushed by
    subscriptions (nothing polls).  Press q to quit.

    An operator sees every job; a user with their own credentials sees their
    own jobs (and the nodes)."""
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        raise click.UsageError("jobtap top needs a terminal (try `jobtap watch` in a pipe)")
    client = make_client(redis_url, site, credentials)
    with sdk_errors():
        require_written(client)
        configs, default = resolve(redis_url, site=site, credentials=credentials)
    config = next(c for c in configs if c.site == default)
    signal.signal(signal.SIGTERM, _interrupt)  # a kill restores the terminal too
    board = Board(queue=queue_name)
    health = HealthFeed(config, SiteKeys(client.site), board)
    console = Console()
    try:
        with sdk_errors():
            sub, covers = subscribe(client, board, user)
        health.start()
        heading = f"jobtap top — site {client.site} — {covers}"
        if queue_name:
            heading += f" in queue {queue_name}"
        with Keys() as keys, Live(console=console, screen=True, auto_refresh=False) as live:
            drawn = 0.0
            while True:
                key = keys.read(KEY_WAIT)
                if "q" in key or "Q" in key or sub.closed:
                    break
                now = time.monotonic()
                due = now - drawn >= (REDRAW if board.changed.is_set() else TICK)
                if due or key:
                    board.changed.clear()
                    live.update(render(board, heading, list(notes), console.height),
                                refresh=True)  # fmt: skip
                    drawn = now
        if sub.error is not None:
            raise click.ClickException(str(sub.error))
    except KeyboardInterrupt:
        pass
    finally:
        health.stop()
        client.close()
