"""`jobtap status` shows the facts the services export as metrics, from meta."""

from __future__ import annotations

import re
from collections import Counter

from click.testing import CliRunner

from jobtap.cli.status import status
from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.sim import SimBackend
from sim.rig.pipeline import drain, meta, site_events

SITE = "st1"


def test_status_shows_cycles_failures_events_and_lag(redis_server, r):
    backend = SimBackend(jobs=150, nodes=10, tick=30)
    svc = CollectorService(Collector(backend, r, site=SITE), interval=0.1, backend_name="sim")
    for _ in range(2):
        assert svc.run_one()
        drain(r, SITE)
    backend.fault("fail")
    assert not svc.run_one()
    result = CliRunner().invoke(status, ["--redis", redis_server.url, "--site", SITE])
    assert result.exit_code == 0, result.output
    out = result.output
    m = meta(r, SITE)
    assert f"epoch {m['epoch']}" in out
    assert f"{m['chunks_shipped']} chunks shipped in all" in out
    assert "failures     1 bad_output" in out  # the sim's injected failure is not a command's
    by_type = Counter(e["type"] for e in site_events(r, SITE))
    shown = dict((t, int(n)) for n, t in re.findall(r"(\d+) (\w+)", out.split("events")[1]
                                                    .splitlines()[0]))  # fmt: skip
    assert shown == dict(by_type)
    assert re.search(r"lag\s+\d+\.\d+s from observation to publish", out)
    applied = f"{m['applied_chunks']} chunks, {m['applied_objects']} objects applied"
    assert re.search(rf"workers\s+{applied}", out)
