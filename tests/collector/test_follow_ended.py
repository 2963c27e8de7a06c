"""A job poked as ``ended`` (a PBS MoM's epilogue hook, before the server knows)
is looked at again every 0.1-0.5 s until the server shows it finished; a plain
poke of a job the server shows running is not.  Through the qstat stand-in,
switched from "running" to "finished" at a set moment as a real server would
record the job's end some time after its MoM saw it."""

from __future__ import annotations

import json
import time

from jobtap.collector.cycle import Collector
from jobtap.collector.follow.pokes import PokeReader, poke
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.schema import RUNNING, TERMINAL
from sim.rig.paths import fixtures_dir
from sim.rig.pipeline import FakePBS, drain, site_events
from sim.rig.wait import eventually

FIXTURES = fixtures_dir() / "pbs"
SITE = "pbsended"
K = SiteKeys(SITE)


def service(fake: FakePBS, r) -> CollectorService:
    svc = CollectorService(Collector(fake.backend(), r, site=SITE, nodes_every=10**6),
                           interval=3600, follow=True)  # fmt: skip
    svc.follower.pokes = PokeReader(r, K)
    assert svc.run_one()
    return svc


def state(svc: CollectorService, job: str = "1.vm") -> str:
    return svc.collector.ledger.of("job")[job].state


def test_only_an_ended_poke_of_a_running_job_plans_rechecks(tmp_path, monkeypatch, r):
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    fake.set("10-busy")
    svc = service(fake, r)
    poke(r, K, ["1.vm"])  # jobobit-like poke of a job the server shows running
    svc.follower.pokes.read(block_ms=1000)
    assert svc.follower.serve_pokes() and state(svc) == RUNNING
    assert svc.follower.rechecks == {}
    poke(r, K, ["1.vm"], ended=True)  # the MoM saw it end
    svc.follower.pokes.read(block_ms=1000)
    assert svc.follower.serve_pokes() and state(svc) == RUNNING
    assert list(svc.follower.rechecks) == ["1.vm"] and svc.follower.rechecks["1.vm"][1] == 1


def test_an_ended_job_is_final_soon_after_the_server_knows(tmp_path, monkeypatch, r):
    fake = FakePBS(tmp_path, FIXTURES, monkeypatch)
    log = tmp_path / "calls.jsonl"
    fake.set("10-busy", log=str(log))
    svc = service(fake, r)
    server_knows = time.time() + 1.5
    fake.set("10-busy", log=str(log), switch={"at": server_knows, "stage": "80-final"})
    poke(r, K, ["1.vm"], ended=True)

    def final() -> bool:
        svc.wait_serving_pokes(time.monotonic() + 0.2)
        return state(svc) in TERMINAL

    eventually(final, timeout=30, what="the final state from re-checks")
    late = time.time() - server_knows
    calls = [json.loads(x) for x in log.read_text().splitlines()]
    refreshes = [c for c in calls if "-x" in c["args"] and "1.vm" in c["args"]]
    print(f"\nfinal seen {late * 1000:.0f} ms after the server switched; "
          f"{len(refreshes)} qstat calls for it")  # fmt: skip
    assert 2 <= len(refreshes) <= 15  # re-checked, but not hammered
    assert int(r.hget(K.meta, "cycles_ok")) == 1  # no full cycle was needed
    assert "1.vm" not in svc.follower.rechecks and "1.vm" not in svc.follower.pokes.ended
    drain(r, SITE)
    events = [e for e in site_events(r, SITE) if e["object_id"] == "1.vm"]
    assert [e["type"] for e in events] == ["new", "final"]
