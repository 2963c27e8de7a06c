"""Small helpers shared by the end-to-end tests (real Redis, real rq)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import orjson
import redis

from sdk.keys import SiteKeys
from workers.service import run_worker

ROOT = Path(__file__).resolve().parent.parent
FAKE_BIN = ROOT / "tests" / "fakes" / "bin"


def drain(r: redis.Redis, site: str) -> None:
    """Apply every chunk waiting on the site's queues with a real rq worker (burst)."""
    level = logging.getLogger().level
    run_worker(r, r, site, burst=True)
    logging.getLogger().setLevel(level)


def site_events(r: redis.Redis, site: str) -> list[dict]:
    return [orjson.loads(f[b"event"]) for _, f in r.xrange(SiteKeys(site).events)]


def meta(r: redis.Redis, site: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(SiteKeys(site).meta).items()}


class FakePBS:
    """Controls the qstat/pbsnodes stand-in (tests/fakes) through its control file."""

    def __init__(self, tmp_path: Path, fixtures: Path, monkeypatch):
        self.control = tmp_path / "fake-pbs.json"
        self.fixtures = fixtures
        monkeypatch.setenv("JOBTAP_FAKE_PBS", str(self.control))
        self.set("00-empty")

    def set(self, stage: str, mode: str = "ok", **extra) -> None:
        doc = {"dir": str(self.fixtures), "stage": stage, "mode": mode, **extra}
        self.control.write_text(json.dumps(doc))

    def backend(self, **kw):
        from collector.backends.pbs import PBSBackend

        kw.setdefault("timeout", 10)
        return PBSBackend(
            qstat=str(FAKE_BIN / "qstat"), pbsnodes=str(FAKE_BIN / "pbsnodes"), tz="UTC", **kw
        )
