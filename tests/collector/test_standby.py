"""A standby collector, fenced (jobtap.contract.lease, the lease fence, jobtap.contract.lease).

On the simulator, with two collector processes, a real worker and a tap of the
site stream (sim/rig/standby.py): the active collector SIGKILLed mid-burst
(right after a shipment, before it noted anything) is replaced within its
lease; SIGSTOPped with chunks in hand (and pokes waiting) past its lease, then
resumed, it writes nothing (its chunks are fenced by the apply step) and steps
down to a standby.  In both, what was written has no id with two contents, no
version gap or step back, and every job that ended has its final."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from click.testing import CliRunner

from jobtap.cli.status import status
from jobtap.collector.cycle import Collector
from jobtap.collector.service import AlreadyRunning, CollectorService
from jobtap.contract.lease import Lease, describe
from jobtap.keys import SiteKeys
from jobtap.sim import SimBackend
from sim.rig.epochs import check_finals_against_truth
from sim.rig.pipeline import meta
from sim.rig.standby import SITE, K, Site, proc_state, wait_holder
from sim.rig.wait import eventually


def _check(site: Site) -> dict[str, int]:
    written = site.tap.written
    assert not written.reused, written.two_contents()
    assert not written.twice(), written.twice()[:5]
    written.check_versions()  # per object and epoch: 1, 2, 3... (never back)
    finals = check_finals_against_truth(written, site.truth(), site.sim_end())
    return {"events": len(written.ids), "finals checked": finals}


def _status(url: str) -> str:
    out = CliRunner().invoke(status, ["--redis", url, "--site", SITE])
    assert out.exit_code == 0, out.output
    return out.output


@pytest.mark.timeout(150)
def test_standby_takes_over_a_collector_killed_mid_burst(redis_server, tmp_path):
    site = Site(redis_server.url, tmp_path, freeze=14.0, lease=1.5)
    try:
        site.start_worker()
        site.start("hostA", "--kill-file", str(tmp_path / "kill"))
        wait_holder(site, "hostA")
        site.start("hostB")
        eventually(lambda: "standby for site" in site.log("hostB"), timeout=30,
                   what="hostB waiting as a standby")  # fmt: skip
        lease = site.lease()
        assert [s["holder"].partition(":")[0] for s in lease["standbys"]] == ["hostB"]
        shown = _status(redis_server.url)
        assert "held by hostA:" in shown and "standby      hostB:" in shown, shown
        generation = lease["generation"]
        time.sleep(3)  # a few cycles of the flow (the scenario, not a wait)
        (tmp_path / "kill").touch()
        a = site.procs["hostA"]
        site.procs.pop("hostA")
        a.wait(30)  # it kills itself right after its next shipment
        a.wait()
        assert a.returncode == -signal.SIGKILL
        died = time.monotonic()
        took = wait_holder(site, "hostB", timeout=10) - died
        print(f"takeover {took:.2f} s after SIGKILL (lease {site.lease_s:g} s)")
        assert took <= site.lease_s + 1.0, took  # the lease, its poll and a loaded machine
        assert site.lease()["generation"] == generation + 1
        eventually(lambda: "holding the lease" in site.log("hostB").split("standby for")[-1],
                   timeout=10)  # fmt: skip
        site.until_frozen()
        eventually(lambda: meta(site.r, SITE).get("status") == "ok", timeout=30)
    finally:
        site.stop()
    print(_check(site))


@pytest.mark.timeout(150)
def test_a_collector_paused_past_its_lease_writes_nothing_and_steps_down(redis_server, tmp_path):
    site = Site(redis_server.url, tmp_path, freeze=16.0, lease=1.5)
    try:
        site.start_worker()
        a = site.start("hostA", "--pause-file", str(tmp_path / "pause"), "--follow")
        wait_holder(site, "hostA")
        site.start("hostB", "--follow")
        eventually(lambda: "standby for site" in site.log("hostB"), timeout=30)
        time.sleep(2)  # a few cycles of the flow
        (tmp_path / "pause").touch()
        eventually(lambda: proc_state(a.pid) == "T", timeout=30, interval=0.005,
                   what="hostA stopped with a shipment in hand")  # fmt: skip
        stopped = time.monotonic()
        took = wait_holder(site, "hostB", timeout=10) - stopped
        print(f"takeover {took:.2f} s after SIGSTOP (lease {site.lease_s:g} s)")
        assert took <= site.lease_s + 1.0, took
        b_holder = site.lease()["holder"]
        # pokes waiting for hostA (it reads them when resumed: a poke in hand)
        jobs = [j.decode() for j in site.r.hkeys(K.owner)[:5]]
        for jid in jobs:
            site.r.xadd(K.pokes, {"job": jid})
        eventually(lambda: meta(site.r, SITE).get("lease_holder") == b_holder, timeout=20)
        fenced_before = int(meta(site.r, SITE).get("fenced_chunks") or 0)
        a.send_signal(signal.SIGCONT)
        eventually(lambda: "stepping down" in site.log("hostA"), timeout=20,
                   what="hostA stepping down")  # fmt: skip
        # its chunks reached the queue and the worker dropped them unwritten
        eventually(
            lambda: int(meta(site.r, SITE).get("fenced_chunks") or 0) > fenced_before,
            timeout=20, what="hostA's chunks fenced",
        )  # fmt: skip
        after = site.log("hostA").split("lost the collector lease")[-1]
        assert not re.search(r"cycle \d+ done", after), after  # no cycle of its went through
        assert site.holder_name() == "hostB"
        assert meta(site.r, SITE)["lease_holder"] == b_holder  # hostA wrote no meta
        eventually(
            lambda: [s["holder"].partition(":")[0] for s in site.lease()["standbys"]] == ["hostA"],
            timeout=20, what="hostA a standby again",
        )  # fmt: skip
        assert "fenced       " in _status(redis_server.url)
        site.until_frozen()
    finally:
        site.stop()
    print(_check(site))


def test_lease_is_a_compare_and_set_on_holder_and_generation(r):
    keys = SiteKeys(SITE)
    a = Lease(r, keys, duration=5, host="a")
    b = Lease(r, keys, duration=5, host="b")
    assert a.acquire().ours and a.generation == 1
    other = b.acquire()
    assert not other.ours and other.holder == a.identity and other.generation == 1
    assert describe(r, keys)["standbys"][0]["holder"] == b.identity
    assert a.renew()
    r.delete(f"{keys.base}:collector")  # ran out, nobody took it: a takes it back as it was
    assert a.renew() and a.generation == 1
    r.pexpire(f"{keys.base}:collector", 1)
    eventually(lambda: b.acquire().ours, timeout=5)
    assert b.generation == 2 and describe(r, keys)["standbys"] == []
    assert not a.renew() and a.lost.is_set()  # b's now: a steps down
    guarded = a.guarded().hset(keys.meta, "x", "1")
    with pytest.raises(Exception, match="lease"):
        guarded.execute()
    assert r.hget(keys.meta, "x") is None  # nothing written
    b.guarded().hset(keys.meta, "x", "2").hincrby(keys.meta, "n", 2).execute()
    assert r.hmget(keys.meta, "x", "n") == [b"2", b"2"]
    b.release()
    assert describe(r, keys)["holder"] is None and describe(r, keys)["generation"] == 2


def test_a_second_collector_waits_as_a_standby_and_takes_over_when_the_first_stops(r):
    def service() -> CollectorService:
        col = Collector(SimBackend(jobs=20, nodes=4), r, site=SITE)
        return CollectorService(col, interval=0.2, lease=1.0)

    a, b = service(), service()
    a.acquire_lock()
    with pytest.raises(AlreadyRunning, match="another collector holds"):
        b.run(max_cycles=1)  # --once/--cycles: no waiting
    import threading

    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(b.run()), daemon=True)
    t.start()
    eventually(lambda: describe(r, K)["standbys"], timeout=10)
    a.release_lock()  # a clean stop: the standby takes over at its next poll
    eventually(lambda: describe(r, K)["holder"] == b.holder, timeout=5)
    eventually(lambda: meta(r, SITE).get("status") == "ok", timeout=10)
    b.stop_event.set()
    t.join(10)
    assert done == [0] and describe(r, K)["holder"] is None
    assert os.getpid()  # (same process: identities differ by their random part)
