"""One worker for several sites (``jobtap worker --site A --site B``) or for
every site with queues (``--all-sites``): the real Shipper enqueues, a real rq
worker applies.  Any site's state chunk goes before any site's update chunk,
the sites of a priority take turns, and a site that appears while the worker
runs is picked up at its next maintenance pass."""

from __future__ import annotations

import logging

import pytest
from click.testing import CliRunner

from jobtap.cli.worker import worker as worker_cli
from jobtap.collector.ship import Shipper
from jobtap.contract.chunk import STATE, UPDATE, upsert
from jobtap.keys import SiteKeys
from jobtap.workers import apply, service
from sim.rig.pipeline import site_events
from sim.rig.records import job_record


def ship(r, site: str, priority: str, cycle: int, jid: str) -> None:
    rec = job_record(jid, "alice", "running" if priority == STATE else "queued", site)
    Shipper(r, SiteKeys(site)).ship(
        cycle, "2026-11-21T15:00:00+00:00", {(priority, "job"): [upsert(jid, "fp", rec)]}
    )


def applied(r, site: str) -> list[str]:
    return [e["object_id"] for e in site_events(r, site)]


def run(r, sites, **kw) -> bool:
    level = logging.getLogger().level
    try:
        return service.run_worker(r, r, sites, burst=True, **kw)
    finally:
        logging.getLogger().setLevel(level)


def test_several_sites_and_no_other(r):
    for site in ("a", "b", "c"):
        ship(r, site, STATE, 1, f"1.{site}")
    assert run(r, ["a", "b"])
    assert applied(r, "a") == ["1.a"] and applied(r, "b") == ["1.b"]
    assert applied(r, "c") == []  # not served: still waiting on its queue
    assert r.llen(f"rq:queue:{SiteKeys('c').rq_queue(STATE)}") == 1


def test_any_state_chunk_before_any_update_chunk(r):
    ship(r, "a", UPDATE, 1, "u.a")
    ship(r, "b", UPDATE, 1, "u.b")
    ship(r, "b", STATE, 2, "s.b")
    ship(r, "a", STATE, 2, "s.a")
    run(r, ["a", "b"], max_jobs=2)
    assert applied(r, "a") == ["s.a"] and applied(r, "b") == ["s.b"]
    run(r, ["a", "b"])
    assert sorted(applied(r, "a")) == ["s.a", "u.a"] and sorted(applied(r, "b")) == ["s.b", "u.b"]


def test_sites_take_turns_within_a_priority(r):
    for cycle in (1, 2, 3):
        ship(r, "a", STATE, cycle, f"{cycle}.a")
    ship(r, "b", STATE, 1, "1.b")
    run(r, ["a", "b"], max_jobs=2)
    assert applied(r, "a") == ["1.a"] and applied(r, "b") == ["1.b"]  # not a, a


def test_all_sites_with_queues(r):
    assert not run(r, None)  # no site has queues yet: nothing to do
    ship(r, "x", STATE, 1, "1.x")
    ship(r, "y.with.dots", UPDATE, 1, "1.y")
    assert service.sites_with_queues(r) == ["x", "y.with.dots"]
    assert run(r, None)
    assert applied(r, "x") == ["1.x"] and applied(r, "y.with.dots") == ["1.y"]


def test_a_new_site_is_served_from_the_next_maintenance_pass(r):
    ship(r, "x", STATE, 1, "1.x")
    apply.configure(r)
    queues = service.site_queues(r, ["x"])
    w = service.JobtapWorker(queues, connection=r, sites=["x"], discover=True,
                             maintenance_interval=5, default_result_ttl=0)  # fmt: skip
    assert w.dequeue_timeout <= 5  # it wakes up for the pass even with nothing to do
    ship(r, "late", STATE, 1, "1.late")
    w.clean_registries()  # what the maintenance pass runs
    assert w.sites == ["x", "late"]
    assert [q.name for q in w.queues] == [
        "jobtap.x.state", "jobtap.late.state", "jobtap.x.update", "jobtap.late.update",
    ]  # fmt: skip
    level = logging.getLogger().level
    w.work(burst=True)
    logging.getLogger().setLevel(level)
    assert applied(r, "late") == ["1.late"]


def test_queue_names_of_other_applications_are_not_sites():
    assert service.site_of_queue("jobtap.hpc1.state") == "hpc1"
    assert service.site_of_queue("jobtap.a.b.update") == "a.b"
    for name in ("default", "jobtap.hpc1.low", "jobtap..state", "other.hpc1.state"):
        assert service.site_of_queue(name) is None, name


@pytest.mark.parametrize(
    "args, message",
    [
        (["--all-sites", "--site", "a"], "do not also give --site"),
        (["--site", "a b"], "must be 1-64 characters"),
    ],
)
def test_worker_command_refuses(redis_server, args, message):
    result = CliRunner().invoke(worker_cli, ["--redis", redis_server.url, "--burst", *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_worker_command_serves_several_sites(redis_server, r):
    ship(r, "a", STATE, 1, "1.a")
    ship(r, "b", STATE, 1, "1.b")
    ship(r, "c", STATE, 1, "1.c")
    args = ["--redis", redis_server.url, "--burst", "--site", "a", "--site", "b"]
    result = CliRunner().invoke(worker_cli, args)
    assert result.exit_code == 0, result.output
    assert applied(r, "a") == ["1.a"] and applied(r, "b") == ["1.b"] and applied(r, "c") == []
    result = CliRunner().invoke(worker_cli, ["--redis", redis_server.url, "--burst", "--all-sites"])
    assert result.exit_code == 0, result.output
    assert applied(r, "c") == ["1.c"]
