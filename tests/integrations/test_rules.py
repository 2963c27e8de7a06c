"""The rules every integration shares (jobtap.integrations.rules), on a real
redis-server with records written by the real Applier: a job jobtap has not seen
is pending, then asked of the scheduler once per period; a record older than the
submission is asked about; Redis refusing means asking, with one log line."""

from __future__ import annotations

import logging
import time

from jobtap.integrations.rules import Settings, Tracker, split_url
from jobtap.sim.localredis import free_port
from tests.support.sdk import SITE, Writer, job_record


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def tracker(url: str, clock: Clock, **settings) -> Tracker:
    s = Settings(redis_url=url, site=SITE, user="alice", **settings)
    return Tracker(s, "a tool", ask_every=60, clock=clock)


def test_records_unseen_jobs_and_older_records(r, redis_server):
    clock = Clock()
    t = tracker(redis_server.url, clock, unseen_timeout=15)
    submitted = time.time()
    Writer(r).jobs_at_once(
        [
            job_record("1", "alice", "running"),  # submitted 2026-11-21: an older job's
            job_record("2", "alice", "completed", exit_status=0, submit_time=None),
        ]
    )
    for jid in ("1", "2", "3"):
        t.track(jid, submitted)
    first = t.read(["1", "2", "3"])
    assert [first[j].kind for j in ("1", "2", "3")] == ["ask", "record", "wait"]
    assert first["2"].record.state == "completed"
    t.asked(["1"])
    clock.now += 16
    later = t.read(["1", "3"])
    assert (later["1"].kind, later["3"].kind) == ("keep", "ask")  # 1 asked 16 s ago
    assert "no record" in later["3"].reason
    t.asked(["3"])
    clock.now += 60
    assert {k: v.kind for k, v in t.read(["1", "3"]).items()} == {"1": "ask", "3": "ask"}
    t.close()


def test_redis_refusing_asks_the_scheduler_with_one_log_line(r, redis_server, caplog):
    clock = Clock()
    t = tracker(f"redis://127.0.0.1:{free_port()}/0", clock)
    with caplog.at_level(logging.INFO, "jobtap.integrations"):
        for _ in range(3):
            verdicts = t.read(["1", "2"])
            assert {v.kind for v in verdicts.values()} <= {"ask", "keep"}
            t.asked(["1", "2"])
    assert verdicts["1"].kind == "keep"  # asked a moment ago
    outage = [rec for rec in caplog.records if "cannot read the cache" in rec.getMessage()]
    assert len(outage) == 1 and "a tool" in outage[0].getMessage()
    t.close()


def test_the_url_may_name_the_site():
    assert split_url("redis://h:6379/0?site=hpc1") == ("redis://h:6379/0", "hpc1")
    client = Settings(redis_url="redis://h:6379/0?site=hpc1").client()
    assert client.site == "hpc1"
