"""`jobtap worker` rides out Redis going away: a restart under a running worker
process, a burst worker started while Redis is down, and a stop request while
Redis is unreachable (it must still stop, promptly and cleanly)."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading

from jobtap.cli.localredis import RedisServer
from jobtap.collector.ship import Shipper
from jobtap.keys import SiteKeys
from jobtap.workers.chunk import STATE, upsert
from jobtap.workers.service import run_worker
from tests.support.records import job_record
from tests.support.redisloss import restart_empty
from tests.support.wait import eventually

SITE = "wk"
K = SiteKeys(SITE)


def ship(r, cycle: int, jobs: list[str], state: str = "queued") -> None:
    recs = [job_record(j, "alice", state, SITE) for j in jobs]
    r.hset(K.meta, "cycle", cycle)  # as the collector counts its cycles
    items = [upsert(rec["id"], "fp", rec) for rec in recs]
    Shipper(r, K).ship(cycle, "2026-11-21T15:00:00+00:00", {(STATE, "job"): items})


def start_worker(server: RedisServer, log_path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "jobtap.cli", "worker", "--redis", server.url, "--site", SITE],
        stdout=subprocess.DEVNULL, stderr=open(log_path, "wb"),
    )  # fmt: skip


def stop_worker(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_worker_process_carries_on_after_redis_restarts_under_it(redis_server, tmp_path):
    r = redis_server.client()
    for cycle in range(1, 41):  # a backlog: the worker is busy when Redis goes
        ship(r, cycle, [f"{cycle}.{i}.pbs" for i in range(200)])
    proc = start_worker(redis_server, tmp_path / "worker.log")
    try:
        eventually(lambda: r.xlen(K.events) > 0, timeout=20, what="the backlog being applied")
        restart_empty(redis_server)
        r = redis_server.client()
        ship(r, 41, ["after.pbs"])
        after = K.job("alice", "after.pbs")
        eventually(lambda: r.exists(after), timeout=30, what="a chunk shipped after the restart")
        assert proc.poll() is None, (tmp_path / "worker.log").read_text()
        assert r.hget(K.meta, "epoch_cause") == b"empty"
    finally:
        status = stop_worker(proc)
    assert status == 0, (tmp_path / "worker.log").read_text()


def test_a_worker_asked_to_stop_while_redis_is_away_stops(redis_server, tmp_path):
    r = redis_server.client()
    proc = start_worker(redis_server, tmp_path / "worker.log")
    try:
        ship(r, 1, ["1.pbs"])
        eventually(lambda: r.xlen(K.events) == 1, timeout=20, what="chunk applied")
        redis_server.stop(kill=True)
        log = tmp_path / "worker.log"
        eventually(lambda: b"could not connect" in log.read_bytes(), timeout=20)
    finally:
        status = stop_worker(proc)
    assert status == 0, (tmp_path / "worker.log").read_text()


def test_a_burst_worker_started_while_redis_is_down_waits_for_it(durable_redis, caplog):
    durable = durable_redis
    r = durable.client()
    ship(r, 1, [f"{i}.pbs" for i in range(10)])
    durable.stop()  # clean: the AOF keeps the chunk

    def bring_redis_back() -> None:  # once the worker is waiting for it
        eventually(lambda: any("starting again" in m for m in caplog.messages), timeout=20)
        durable.start()

    with caplog.at_level(logging.WARNING, logger="jobtap.workers"):
        helper = threading.Thread(target=bring_redis_back)
        helper.start()
        worked = run_worker(r, r, SITE, burst=True, backoff=(0.05, 0.2))  # rq: main thread
        helper.join(30)
    assert worked and r.xlen(K.events) == 10
