"""`jobtap top` in a real terminal (tmux): the counts on screen are the cache's,
a job finishing on the sim shows within a second, q exits cleanly; and an
ordinary user with their own credentials sees their own jobs only."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections import Counter, deque

import orjson
import pytest

import jobtap
from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.entries import xrange_events
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from sim.rig.pipeline import drain
from sim.rig.wait import eventually
from tests.support.terminal import Tmux

SITE = "top1"
K = SiteKeys(SITE)
JOBTAP = [sys.executable, "-m", "jobtap.cli"]
STATES = ("queued", "held", "waiting", "running", "suspended", "exiting")


def terminal_env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8", "TERM": "screen-256color", **extra}  # fmt: skip


def screen_counts(screen: str, table: str = "user") -> dict[str, int]:
    """The ``(all)`` row of the board's table of jobs by ``table``, by state."""
    lines = screen.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:1] == [table])
    names = lines[header].split()[1:]
    row = next(line for line in lines[header + 1 :] if line.split()[:1] == ["(all)"])
    counts = dict(zip(names, map(int, row.split()[1:])))
    counts.pop("total")
    return {state: n for state, n in counts.items() if n}


def cache_counts(client: jobtap.Client, **filters) -> dict[str, int]:
    return dict(Counter(j.state for j in client.jobs(**filters)))


def stream_end(r) -> str:
    last = r.xrevrange(K.events, count=1)
    return last[0][0].decode() if last else "0-0"


@pytest.fixture
def tmux(tmp_path):
    term = Tmux(tmp_path)
    yield term
    term.close()


class Screens(threading.Thread):
    """The terminal's screen, read every 20 ms in the background with the time of
    each reading (so that what the test thread does meanwhile, such as applying
    a cycle's chunks, does not delay the observation)."""

    def __init__(self, tmux: Tmux):
        super().__init__(daemon=True)
        self.tmux, self.shots = tmux, deque(maxlen=500)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.02):
            self.shots.append((time.monotonic(), self.tmux.screen()))

    def first(self, match, after: float) -> float | None:
        """When a screen read after ``after`` first matched."""
        return next((t for t, screen in list(self.shots) if t > after and match(screen)), None)


class Arrivals:
    """An SDK subscriber beside the board: when did each change reach a client."""

    def __init__(self):
        self.seen: list[tuple[float, jobtap.Change]] = []
        self.lock = threading.Lock()

    def __call__(self, change: jobtap.Change) -> None:
        with self.lock:
            self.seen.append((time.monotonic(), change))

    def last_final(self, after: int) -> tuple[float, jobtap.Change] | None:
        with self.lock:
            finals = [(t, c) for t, c in self.seen[after:] if c.type == "final"]
        return finals[-1] if finals else None


def test_top_shows_the_cache_and_a_finishing_job_within_a_second(
    redis_server, r, tmux, tmp_path, monkeypatch
):
    backend = SimBackend(jobs=300, nodes=30, tick=30)
    svc = CollectorService(Collector(backend, r, site=SITE, nodes_every=1), interval=2.0)
    assert svc.run_one()
    drain(r, SITE)
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "none"))
    client = jobtap.Client(redis_server.url, site=SITE)
    arrivals = Arrivals()
    client.subscribe(arrivals, all_jobs=True, initial=False)
    env = terminal_env(JOBTAP_REDIS=redis_server.url, JOBTAP_SITE=SITE,
                       JOBTAP_CREDENTIALS=str(tmp_path / "none"))  # fmt: skip
    tmux.start([*JOBTAP, "top"], env)
    try:
        screen = eventually(lambda: "(all)" in (s := tmux.screen()) and s, timeout=15,
                            what="the board")  # fmt: skip
        assert f"site {SITE} — every job" in screen
        eventually(lambda: "collector ok" in tmux.screen(), what="the collector's health")
        eventually(lambda: screen_counts(tmux.screen()) == cache_counts(client),
                   what="user counts = the cache")  # fmt: skip
        eventually(lambda: screen_counts(tmux.screen(), "queue") == cache_counts(client),
                   what="queue counts = the cache")  # fmt: skip
        # cycles on the sim until a job finishes; the board shows it within a second
        screens = Screens(tmux)
        screens.start()
        final = None
        for _ in range(20):
            before, last_id = len(arrivals.seen), stream_end(r)
            assert svc.run_one()
            drain(r, SITE)
            added = xrange_events(r, K.events, min=f"({last_id}")
            jobs = sum(1 for _, f in added if orjson.loads(f[b"event"])["kind"] == "job")
            eventually(lambda b=before, n=jobs: len(arrivals.seen) - b == n,
                       what="the cycle's job changes at a client")  # fmt: skip
            final = arrivals.last_final(before)
            if final is not None:
                break
        assert final is not None, "no job finished in 20 cycles of 30 simulated s"
        arrived, change = final
        line = re.compile(rf"{re.escape(change.object_id)}\s.*\bfinal\b.*→ {change.record.state}")
        seen_at = eventually(lambda: screens.first(line.search, after=arrived), timeout=5,
                             what=f"{change.object_id} final on the board")  # fmt: skip
        assert seen_at - arrived < 1.0, f"shown {seen_at - arrived:.2f}s after it reached a client"
        eventually(lambda: screen_counts(tmux.screen()) == cache_counts(client),
                   what="counts = the cache after the cycle")  # fmt: skip
        screens.stopped.set()
        tmux.send("q")
        assert eventually(lambda: tmux.exit_status() is not None, what="top exited") is not None
        assert tmux.exit_status() == 0
        assert "Traceback" not in tmux.screen()
    finally:
        client.close()


def test_top_for_a_user_shows_their_jobs_only(tmp_path, tmux):
    from tests.support.acl import AclServer, Writer, set_up_users

    server = AclServer(tmp_path / "redis").start()
    try:
        set_up_users(server, ["alice", "bob"])
        writer = Writer(server.as_user("writer", "writer-secret"), site="hpc1")
        writer.job("1.pbs", "alice", "running")
        writer.job("2.pbs", "alice")
        writer.job("3.pbs", "bob", "held")
        writer.node("n1", "down")
        cred = tmp_path / "alice.credentials"
        cred.write_text(f"url = redis://127.0.0.1:{server.port}/0\nusername = alice\n"
                        "password = pw-alice\nsite = hpc1\n")  # fmt: skip
        cred.chmod(0o600)
        tmux.start([*JOBTAP, "top", "--credentials", str(cred)], terminal_env())
        screen = eventually(lambda: "(all)" in (s := tmux.screen()) and s, timeout=15,
                            what="the board")  # fmt: skip
        assert "site hpc1 — jobs of alice" in screen
        assert screen_counts(screen) == {"queued": 1, "running": 1}
        assert "bob" not in screen
        eventually(lambda: re.search(r"n1\s+down", tmux.screen()), what="the node (everybody's)")
        eventually(lambda: "not visible to alice" in tmux.screen(), what="the health note")
        writer.job("2.pbs", "alice", "running")
        eventually(lambda: screen_counts(tmux.screen()) == {"running": 2},
                   what="alice's change on the board")  # fmt: skip
        tmux.send("q")
        eventually(lambda: tmux.exit_status() is not None, what="top exited")
        assert tmux.exit_status() == 0
    finally:
        server.stop()


def test_top_needs_a_terminal(redis_server):
    import subprocess

    res = subprocess.run([*JOBTAP, "top", "--redis", redis_server.url], capture_output=True,
                         text=True, timeout=30, stdin=subprocess.DEVNULL)  # fmt: skip
    assert res.returncode == 2 and "needs a terminal" in res.stderr


def test_top_filters_by_user_and_queue(redis_server, r, tmux, tmp_path, monkeypatch):
    svc = CollectorService(Collector(SimBackend(jobs=300, nodes=30, tick=30), r, site=SITE),
                           interval=2.0)  # fmt: skip
    assert svc.run_one()
    drain(r, SITE)
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "none"))
    with jobtap.Client(redis_server.url, site=SITE) as client:
        jobs = client.jobs()
        user = Counter(j.user for j in jobs).most_common(1)[0][0]
        queue = Counter(j.queue for j in jobs if j.user == user).most_common(1)[0][0]
        expect = dict(Counter(j.state for j in jobs if j.user == user and j.queue == queue))
    env = terminal_env(JOBTAP_REDIS=redis_server.url, JOBTAP_SITE=SITE,
                       JOBTAP_CREDENTIALS=str(tmp_path / "none"))  # fmt: skip
    tmux.start([*JOBTAP, "top", "--user", user, "--queue", queue], env)
    screen = eventually(lambda: "(all)" in (s := tmux.screen()) and s, timeout=15,
                        what="the board")  # fmt: skip
    assert f"jobs of {user} in queue {queue}" in screen
    assert screen_counts(screen) == screen_counts(screen, "queue") == expect
    tmux.send("q")
    eventually(lambda: tmux.exit_status() is not None, what="top exited")
    assert tmux.exit_status() == 0
