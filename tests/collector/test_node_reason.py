"""A node of a running job goes bad: a node event, and an update event on the
job whose reason names the node; when the node comes back, the reason goes.

The scheduler here is a scripted one built from real OpenPBS records (a job
running on node ``vm`` from the 10-busy fixture), normalised by the real PBS
normaliser: only the node's state is changed between cycles.
"""

from __future__ import annotations

import copy

import orjson
import pytest

from jobtap.collector.backends.base import PokedReads
from jobtap.collector.backends.pbs import normalise_job, normalise_node, normalise_queue
from jobtap.collector.cycle import Collector
from jobtap.events import changes_of, record_of
from sim.rig.paths import fixtures_dir
from sim.rig.pipeline import drain, site_events

SITE = "nodes1"


class ScriptedPBS:
    scheduler = "pbs"

    def __init__(self, jobs: dict, nodes: dict):
        self.jobs, self.nodes = jobs, nodes

    def poked_reads(self):
        return PokedReads()

    def stat_jobs(self):
        return copy.deepcopy(self.jobs)

    def stat_nodes(self):
        return copy.deepcopy(self.nodes)

    def stat_queues(self):
        return {}

    def history(self, job_ids):
        return {}

    def normalise_job(self, job_id, native):
        return normalise_job(job_id, native, tz="UTC")

    def normalise_node(self, name, native):
        return normalise_node(name, native, tz="UTC")

    def normalise_queue(self, name, native):
        return normalise_queue(name, native, tz="UTC")


@pytest.fixture
def scripted():
    base = fixtures_dir() / "pbs"
    jobs = orjson.loads((base / "10-busy.qstat-f.json").read_bytes())["Jobs"]
    nodes = orjson.loads((base / "10-busy.pbsnodes-av.json").read_bytes())["nodes"]
    return ScriptedPBS({"1.vm": jobs["1.vm"], "3.vm": jobs["3.vm"]}, nodes)


def test_bad_node_names_itself_in_running_jobs(scripted, r):
    col = Collector(scripted, r, site=SITE, nodes_every=1)
    col.run_cycle()
    drain(r, SITE)
    scripted.nodes["vm"]["state"] = "offline"
    scripted.nodes["vm"]["comment"] = "bad DIMM"
    col.run_cycle()
    drain(r, SITE)
    # a restarted collector must neither clear nor repeat the reason
    col = Collector(scripted, r, site=SITE, nodes_every=1)
    col.run_cycle()
    drain(r, SITE)
    scripted.nodes["vm"]["state"] = "free"
    del scripted.nodes["vm"]["comment"]
    col.run_cycle()
    drain(r, SITE)

    events = site_events(r, SITE)
    node = [(e["type"], e["record"]["state"]) for e in events if e["kind"] == "node"]
    assert node == [("new", "busy"), ("state", "offline"), ("state", "free")]
    running = [e for e in events if e["object_id"] == "1.vm"]
    assert [(e["type"], record_of(e)["reason"]) for e in running] == [
        ("new", None),
        ("update", "node vm offline: bad DIMM"),
        ("update", None),
    ]
    assert changes_of(running[1])["reason"] == [None, "node vm offline: bad DIMM"]
    # the queued job on no node is untouched
    assert [e["type"] for e in events if e["object_id"] == "3.vm"] == ["new"]
