"""`jobtap worker` rides out Redis going away: a restart under a running worker
process, a burst worker started while Redis is down, and a stop request while
Redis is unreachable (it must still stop, promptly and cleanly)."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import threading

from rq import Queue, Worker

from jobtap.collector.ship import Shipper
from jobtap.contract.chunk import STATE, upsert
from jobtap.keys import SiteKeys
from jobtap.sim.localredis import RedisServer
from jobtap.workers.service import run_worker
from sim.rig.records import job_record
from sim.rig.redisloss import restart_empty
from sim.rig.wait import eventually

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


def until_idle(r) -> None:
    """Until the worker waits for chunks: rq marks itself idle as it goes back to
    its queues, done with the last chunk's bookkeeping.  Redis lost then is
    retried by rq's loop ("could not connect ... retrying in 1 seconds"); lost
    during the bookkeeping, it ends rq's loop and the worker starts a new one."""
    idle = lambda: [w.get_state() for w in Worker.all(connection=r)] == ["idle"]  # noqa: E731
    eventually(idle, timeout=20, what="the worker waiting for chunks")


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
        until_idle(r)
        redis_server.stop(kill=True)
        log = tmp_path / "worker.log"
        # rq's loop retries, or (Redis gone during its heartbeat after a chunk: rq
        # quits) the worker's own loop starts it again
        eventually(lambda: re.search(RETRIED, log.read_text()), timeout=20, what="a retry")
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


def test_a_chunk_taken_by_a_worker_killed_before_starting_it_is_applied(redis_server, caplog):
    """rq takes a chunk by moving its id to the queue's intermediate list and
    records it as started a few round trips later; a worker SIGKILLed in
    between leaves it there, which rq fails only after a minute.  The next
    worker hands it back (a second look STUCK_AFTER later) and applies it."""
    from rq import Queue

    from jobtap.workers.service import taken_unstarted

    r = redis_server.client()
    ship(r, 1, [f"{i}.pbs" for i in range(10)])
    queue = Queue(K.rq_queue(STATE), connection=r)
    assert r.lmove(queue.key, queue.intermediate_queue_key) is not None  # rq's own take
    assert [job.id for job in taken_unstarted(queue)] == queue.intermediate_queue.get_job_ids()
    with caplog.at_level(logging.WARNING, logger="jobtap.workers"):
        worked = run_worker(r, r, SITE, burst=True)
    assert worked and r.xlen(K.events) == 10
    assert taken_unstarted(queue) == [] and queue.count == 0
    assert any("taken by a worker that died before starting it" in m for m in caplog.messages)


def test_chunks_are_taken_from_several_queues_into_their_intermediate_list(redis_server):
    """rq pops from several queues with BLPOP (a chunk popped by a worker killed
    a moment later is gone); ChunkQueue moves it to its queue's intermediate
    list as it takes it, from the first non-empty queue, and with nothing to
    take waits on the queues' bells."""
    import pytest
    from rq.exceptions import DequeueTimeout

    from jobtap.contract.chunk import UPDATE
    from jobtap.workers.service import site_queues

    r = redis_server.client()
    state, update = site_queues(r, [SITE])
    assert update.name == K.rq_queue(UPDATE)
    r.hset(K.meta, "cycle", 1)
    items = [upsert("1.pbs", "fp", job_record("1.pbs", "alice", "running", SITE))]
    Shipper(r, K).ship(1, "2026-11-21T15:00:00+00:00", {(UPDATE, "job"): items})
    assert r.llen(update.bell_key) == 1  # the push rang the update queue's bell
    job, queue = type(state).dequeue_any([state, update], 1, connection=r)
    assert queue.name == update.name
    assert update.intermediate_queue.get_job_ids() == [job.id] and update.count == 0
    with pytest.raises(DequeueTimeout):
        type(state).dequeue_any([state, update], 1, connection=r)


def test_rqs_lines_for_every_chunk_are_at_debug(redis_server, caplog):
    """rq wrote four INFO lines per chunk (taken, completed, "Job OK", result
    discarded): nearly all of a busy worker's log.  At INFO none names a chunk;
    at DEBUG they are all there."""
    r = redis_server.client()
    queue = Queue(K.rq_queue(STATE), connection=r)

    def burst(level: int, cycle: int) -> list[logging.LogRecord]:
        ship(r, cycle, [f"{cycle}.{i}.pbs" for i in range(3)])
        ship(r, cycle + 1, [f"{cycle + 1}.pbs"])
        ids = queue.get_job_ids()
        caplog.clear()
        with caplog.at_level(level):
            assert run_worker(r, r, SITE, burst=True)
        return [
            rec for rec in caplog.records
            if rec.name.startswith("rq") and any(i in rec.getMessage() for i in ids)
        ]  # fmt: skip

    assert [rec.getMessage() for rec in burst(logging.INFO, 1)] == []
    # the worker's start and end: no chunk (nor maintenance pass) adds a line
    said = [rec.getMessage() for rec in caplog.records if rec.name.startswith("rq")]
    assert len(said) == 3 and "started with PID" in said[0] and "done, quitting" in said[2], said
    per_chunk = burst(logging.DEBUG, 3)
    assert len(per_chunk) >= 4 * 2 and {rec.levelno for rec in per_chunk} == {logging.DEBUG}
    assert any("Job OK" in rec.getMessage() for rec in per_chunk)


# A try again after losing Redis: rq's worker loop's, or the worker's own when rq's
# loop quit (Redis went away in a call rq does not guard, its heartbeat after a chunk)
RQ_RETRY = r"retrying in (\d+) seconds"
OWN_RETRY = r"starting again in ([\d.]+) s"
RETRIED = f"{RQ_RETRY}|{OWN_RETRY}"


def test_a_worker_without_redis_retries_in_one_loop(redis_server, tmp_path):
    """With Redis down, rq's worker loop waits 1, 2, 4, ... s between tries; the
    thread of rq's command channel retried every 2 s besides, and the two loops'
    lines interleaved ("retrying in 2 seconds", "in 16 seconds").  If Redis goes
    during rq's heartbeat after the chunk, rq quits and the worker's own loop
    tries instead, with waits that grow as well: one loop either way."""
    r = redis_server.client()
    log = tmp_path / "worker.log"
    proc = start_worker(redis_server, log)
    try:
        ship(r, 1, ["1.pbs"])
        eventually(lambda: r.xlen(K.events) == 1, timeout=20, what="chunk applied")
        until_idle(r)
        redis_server.stop(kill=True)

        def waits() -> list[float]:
            found = re.findall(RETRIED, log.read_text())
            return [float(rq or own) for rq, own in found]

        def rq_tried() -> bool:
            return re.search(RQ_RETRY, log.read_text()) is not None

        # the worker loop's third try (1 + 2 s after the first): the command
        # channel's thread, had it run, would have tried at least twice by then
        # (a bound for a loaded machine: a clean make test once took over 30 s)
        try:
            eventually(lambda: len(waits()) >= 3, timeout=90, what="three tries")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the worker's log:\n{log.read_text()}") from None
        first = waits()[:3]
        if rq_tried():
            assert first == [1, 2, 4], log.read_text()
        assert first[0] < first[1] < first[2], log.read_text()
    finally:
        status = stop_worker(proc)
    assert status == 0, log.read_text()


def test_an_idle_worker_waits_on_its_queues_without_timing_out(redis_server, caplog):
    """Waiting for chunks, the worker blocks on its queues' bells up to 5 s at a
    time; the connection `jobtap worker` opened first kept redis-py's default
    socket timeout (5 s) where rq had raised the pool's, and every wait ended
    in "could not connect to Redis instance: Timeout reading from socket" and a
    backoff.  Two waits go by (Redis counts the BLPOPs), then a chunk comes."""
    from jobtap.cli.options import connect

    r = connect(redis_server.url)  # as `jobtap worker` opens it
    probe = redis_server.client()

    def blpops() -> int:
        stats = probe.info("commandstats").get("cmdstat_blpop", {})
        return int(stats.get("calls", 0))

    def chunk_after_two_waits() -> None:
        eventually(lambda: blpops() >= 2, timeout=30, interval=0.2, what="two waits on the bells")
        ship(probe, 1, ["1.pbs"])

    with caplog.at_level(logging.INFO, logger="rq.worker"):
        helper = threading.Thread(target=chunk_after_two_waits)
        helper.start()
        assert run_worker(r, r, SITE, max_jobs=1, maintenance=30)  # rq: main thread
        helper.join(30)
    assert probe.xlen(K.events) == 1
    assert not [m for m in caplog.messages if "could not connect" in m], caplog.messages
