"""Shipping to a queue Redis under Sentinel: a shipment counts only once a
replica has it (WAIT 1).  With every replica silent (SIGSTOP) the cycle fails,
says why, and changes nothing; once a replica answers again the next cycle
ships the same changes, and the workers apply each once."""

from __future__ import annotations

import pytest

from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.sentinel import set_wait_replicas, wait_replicas
from jobtap.sim import SimBackend
from jobtap.workers.service import run_worker
from sim.rig.pipeline import check_against_truth, site_events


def collector_of(r, queues, site="hpc2", jobs=60):
    backend = SimBackend(seed=7, nodes=8, jobs=jobs, tick=0)
    col = Collector(backend, r, queues, site=site, nodes_every=2, reconcile_every=0)
    col.shipper.wait_timeout = 0.3
    return CollectorService(col, interval=0), backend.simulation


@pytest.mark.timeout(60)
def test_a_shipment_no_replica_acknowledged_is_not_shipped(sentinel, queues, r):
    service, sim = collector_of(r, queues)
    stats: list[float] = []
    assert service.run_one()
    stats.append(sim.now)
    assert run_worker(queues, r, ["hpc2"], burst=True)
    sim.advance(300)
    for node in sentinel.replicas:
        sentinel.pause(node)
    try:
        assert not service.run_one()  # WAIT 1 timed out
        meta = {k.decode(): v.decode() for k, v in r.hgetall(SiteKeys("hpc2").meta).items()}
        assert meta["status"] == "failing"
        assert "acknowledged by 0 of the 1 queue replica(s)" in meta["last_error"]
        assert int(meta["failures_redis"]) == 1
    finally:
        for node in sentinel.replicas:
            sentinel.resume(node)
    assert service.run_one()  # the same changes, shipped again and acknowledged
    stats.append(sim.now)
    run_worker(queues, r, ["hpc2"], burst=True)
    by_job, _ = check_against_truth(r, "hpc2", sim, stats)
    assert by_job and len(site_events(r, "hpc2")) >= len(by_job)


def test_wait_replicas_follows_the_url_and_the_option(queues, redis_server):
    from jobtap.connection import redis_from_url

    plain = redis_from_url(redis_server.url)
    assert (wait_replicas(queues), wait_replicas(plain)) == (1, 0)
    set_wait_replicas(queues, 0)
    set_wait_replicas(plain, 2)
    assert (wait_replicas(queues), wait_replicas(plain)) == (0, 2)
    plain.close()


@pytest.mark.timeout(60)
def test_the_collector_command_waits_for_a_replica_unless_told_not_to(
    sentinel, redis_server, tmp_path
):
    import subprocess
    import sys

    base = [sys.executable, "-m", "jobtap.cli", "collector", "--backend", "sim", "--once",
            "--sim-jobs", "20", "--redis", redis_server.url,
            "--queue-redis", sentinel.url]  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "JOBTAP_CREDENTIALS": "/nonexistent"}
    for node in sentinel.replicas:
        sentinel.pause(node)
    try:
        waited = subprocess.run(
            [*base, "--state-dir", str(tmp_path / "a")], capture_output=True, text=True, env=env
        )
        told = subprocess.run(
            [*base, "--queue-wait-replicas", "0", "--state-dir", str(tmp_path / "b")],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
    finally:
        for node in sentinel.replicas:
            sentinel.resume(node)
    assert waited.returncode == 1, waited.stderr
    assert "acknowledged by 0 of the 1 queue replica(s)" in waited.stderr
    assert told.returncode == 0, told.stderr
    assert "--queue-wait-replicas 0: a chunk shipped just before" in told.stderr


def test_only_the_collector_offers_to_wait_for_replicas():
    """Only the collector ships chunks: the worker, status and doctor take the
    queue Redis but offer no --queue-wait-replicas that would do nothing."""
    from click.testing import CliRunner

    from jobtap.cli.app import main

    def offers(command: str) -> bool:
        out = CliRunner().invoke(main, [command, "--help"])
        assert out.exit_code == 0, out.output
        assert "--queue-redis" in out.output
        return "--queue-wait-replicas" in out.output

    assert offers("collector")
    assert not any(offers(c) for c in ("worker", "status", "doctor"))


@pytest.mark.timeout(60)
def test_status_reports_a_queue_primary_away_instead_of_failing(sentinel, queues, r, redis_server):
    """While the queue primary is away (killed, the replicas silent so that no
    failover can end it), `jobtap status` still shows the site and says why the
    backlogs are missing; it exits 0, as the site is there to report."""
    from click.testing import CliRunner

    from jobtap.cli.app import main

    service, _ = collector_of(r, queues)
    assert service.run_one()
    args = ["status", "--redis", redis_server.url, "--site", "hpc2", "--queue-redis", sentinel.url]
    env = {"JOBTAP_CREDENTIALS": "/nonexistent"}
    before = CliRunner().invoke(main, args, env=env)
    assert before.exit_code == 0 and "jobtap.hpc2.state:" in before.output, before.output
    for node in sentinel.replicas:
        sentinel.pause(node)
    try:
        sentinel.kill_primary()
        res = CliRunner().invoke(main, args, env=env)
        assert res.exit_code == 0, res.output
        assert "site hpc2: collector" in res.output and "jobtap.hpc2.state:" not in res.output
        (line,) = [x for x in res.output.splitlines() if x.startswith("  queues ")]
        assert "the queue Redis has no primary now (a Sentinel failover under way?)" in line
    finally:
        for node in sentinel.replicas:
            sentinel.resume(node)
