"""Many clients in one process (bench/latency.py runs five hundred a process):
their sockets get file descriptors above 1023, which ``select()`` refuses.  The
dispatcher used to call it, catch the refusal and go round again at once: a
busy loop per client, which starved them all (a thousand clients never
finished setting up).  It waits with ``poll()`` now."""

from __future__ import annotations

import socket
import time

import jobtap
from tests.support.sdk import SITE, Recorder


def test_a_client_whose_sockets_are_above_1023_waits_and_delivers(redis_server, writer, hermetic):
    spare = [socket.socket() for _ in range(1100)]  # the next descriptors are above 1023
    try:
        client = jobtap.Client(redis_server.url, site=SITE, backoff=(0.05, 0.5))
        rec = Recorder()
        with client, client.subscribe(rec, user="alice"):
            dispatcher = client._dispatcher
            assert dispatcher is not None
            fds = [link.sock().fileno() for link in dispatcher.links if link.sock()]
            assert fds and min(fds) > 1023
            writer.job("1.pbs", "alice")
            writer.job("1.pbs", state="running")
            rec.wait_for(lambda cs: [c.version for c in cs] == [1, 2])
            # Nothing to read and nothing to do: one round of the loop sleeps
            # until its timeout (one second) instead of coming straight back.
            started = time.monotonic()
            dispatcher.submit(lambda: None).result(5)  # a command, then nothing
            dispatcher._poll()
            assert time.monotonic() - started >= 0.5
    finally:
        for s in spare:
            s.close()


def calls(r, command: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_subscription_to_many_jobs_locates_them_in_one_command(redis_server, r, writer, hermetic):
    """jobs=[...] finds the owners of all the jobs with one HMGET of the owner
    index, not one HGET per job (part of the set-up cost of bench.latency)."""
    for n in range(50):
        writer.job(f"{n}.pbs", "alice" if n % 2 else "bob")
    before = {c: calls(r, c) for c in ("hget", "hmget")}
    with jobtap.Client(redis_server.url, site=SITE) as client:
        rec = Recorder()
        with client.subscribe(rec, jobs=[f"{n}.pbs" for n in range(50)]):
            rec.wait_count(50)
    assert calls(r, "hget") == before["hget"]
    assert calls(r, "hmget") == before["hmget"] + 1
    assert {c.record.user for c in rec.changes} == {"alice", "bob"}
