"""Issue 12's scenario, with real redis-server, rq worker and SDK: the sim
pipeline in real time with a supervised `jobtap worker`, a stream consumer, an
all-jobs subscriber and a wait() on a running job; Redis killed and started
empty in the middle of the flow, then sent back to an older RDB snapshot, then
the worker killed at random points in a burst.  Afterwards every event written
after each loss reached both consumers, every job that ended has its final at
the subscriber, the wait() returned, no id names two different events (every
entry of the site stream checked against its content, not only its id), and
versions count 1, 2, 3... within each epoch (sim.rig.lossrun).

What crosses each loss is placed, not left to chance: after the empty restart
the worker's first chunk holds several batches and was planned for the old
epoch; the snapshot holds chunks that were waiting in the queue (applied before
the loss and again after it); the snapshot loss cuts a cycle between its stat
and its shipment."""

from __future__ import annotations

import pytest

from sim.rig.lossrun import LossRun


@pytest.mark.timeout(180)
def test_the_contract_survives_redis_losing_data_and_the_worker_dying(
    redis_server, tmp_path, monkeypatch
):
    monkeypatch.setenv("JOBTAP_CREDENTIALS", str(tmp_path / "no-credentials"))
    run = LossRun(redis_server, tmp_path)
    try:
        run.start()
        run.cycles(10)
        run.lose_everything()  # mid-flow: Redis killed, started empty
        run.cycles(12)
        aside = run.put_aside()  # an RDB copy of now
        run.cycles(12)
        run.go_back(aside)  # mid-flow: Redis killed, started on the old copy
        run.kill_worker_in_a_burst(4)
        run.cycles(8)
    finally:
        run.finish()
    figures = run.check()
    print(figures)
    assert figures["epochs seen by the stream"] == 3 and figures["losses"] == 2
    assert figures["worker starts"] >= 5
    assert figures["lost (stream)"] == figures["lost (subscriber)"] == 0
    assert figures["reused ids (written twice)"] == figures["ids with two contents"] == 0
    # what the losses had in flight, each at least once
    assert figures["chunks of several batches after a loss"] >= 2, run.in_flight
    assert figures["chunks shipped before a loss, applied after"] >= 1, run.in_flight
    assert figures["cycles observed before a loss, shipped after"] == 1, run.in_flight
