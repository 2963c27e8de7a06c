"""A real Prometheus (Debian's package) scraping a collector and a worker on the
sim every second: the series move, and once the pipeline is drained they match
what it did (events applied = the site stream's length, cycles = meta's count).
The alerting rules of deploy/prometheus load in it and evaluate."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from jobtap.keys import SiteKeys
from jobtap.sim.localredis import free_port
from sim.rig.paths import ROOT
from sim.rig.pipeline import meta
from sim.rig.wait import eventually

SITE = "prom1"
K = SiteKeys(SITE)
JOBTAP = [sys.executable, "-m", "jobtap.cli"]
PROMETHEUS_RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"


def start(args: list[str], log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTAP_")}
    out = open(log, "ab")
    return subprocess.Popen(args, stdout=out, stderr=out, env=env, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


class PromAPI:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> dict:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}" if params else self.base + path
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + "/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def value(self, query: str) -> float | None:
        """The query's one value now (None: no series)."""
        result = self.get("/api/v1/query", query=query)["data"]["result"]
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_the_services_and_they_match_the_pipeline(redis_server, r, tmp_path):
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus not found: deploy/setup-dev.sh installs Debian's prometheus")
    cport, wport, pport = free_port(), free_port(), free_port()
    common = ["--redis", redis_server.url, "--site", SITE]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ["{PROMETHEUS_RULES}"]
scrape_configs:
  - job_name: jobtap-collector
    static_configs: [{{targets: ["127.0.0.1:{cport}"]}}]
  - job_name: jobtap-worker
    static_configs: [{{targets: ["127.0.0.1:{wport}"]}}]
"""
    )
    procs = [
        start([*JOBTAP, "worker", *common, "--metrics-port", str(wport)], tmp_path / "worker.log"),
        start(
            [
                *JOBTAP,
                "collector",
                *common,
                "--backend",
                "sim",
                "--interval",
                "1",
                "--sim-jobs",
                "300",
                "--sim-nodes",
                "30",
                "--metrics-port",
                str(cport),
            ],
            tmp_path / "collector.log",
        ),  # fmt: skip
        start(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{pport}",
                "--log.level=warn",
            ],
            tmp_path / "prometheus.log",
        ),  # fmt: skip
    ]
    collector = procs[1]
    api = PromAPI(pport)
    try:
        eventually(api.ready, timeout=20, what="prometheus ready")
        both_up = 'sum(up{job=~"jobtap-collector|jobtap-worker"})'
        eventually(lambda: api.value(both_up) == 2, timeout=15, what="both targets up")
        # full stats (tier "full") and probe cycles (tier "probe") alike
        cycles = f'sum(jobtap_collector_cycle_duration_seconds_count{{site="{SITE}"}})'
        events = f'sum(jobtap_worker_events_total{{site="{SITE}"}})'
        first = eventually(lambda: api.value(cycles), timeout=15, what="a cycle scraped")
        first_events = eventually(lambda: api.value(events), timeout=15, what="events scraped")
        eventually(lambda: (api.value(cycles) or 0) >= first + 2, timeout=15, what="cycles move")
        eventually(lambda: (api.value(events) or 0) > first_events, timeout=15, what="events move")
        lag = f'jobtap_worker_publish_lag_seconds_count{{site="{SITE}"}}'
        assert eventually(lambda: api.value(lag), timeout=10, what="lag observed") > 0
        p99 = (
            "histogram_quantile(0.99, sum by (le) "
            f'(rate(jobtap_worker_publish_lag_seconds_bucket{{site="{SITE}"}}[1m])))'
        )
        assert eventually(lambda: api.value(p99), timeout=10, what="lag p99") < 5
        jobs = f'jobtap_collector_objects_seen{{site="{SITE}", kind="job"}}'
        assert eventually(lambda: api.value(jobs), what="jobs seen") > 100
        # a scrape between two cycles shows exactly the cycles meta counted
        eventually(lambda: api.value(cycles) == int(meta(r, SITE)["cycles_ok"]), timeout=15,
                   what="cycles scraped = meta's cycles_ok")  # fmt: skip
        # Stop the collector, let the worker drain, then the series equal the pipeline's.
        stop(collector)
        eventually(lambda: r.llen(f"rq:queue:{K.rq_queue('state')}") == 0
                   and r.llen(f"rq:queue:{K.rq_queue('update')}") == 0, timeout=30,
                   what="queues drained")  # fmt: skip
        stream = r.xlen(K.events)
        assert stream > 300
        eventually(lambda: api.value(events) == r.xlen(K.events) == stream, timeout=15,
                   what="events applied = the site stream's length")  # fmt: skip
        # the alerting rules loaded and evaluate without error
        groups = api.get("/api/v1/rules")["data"]["groups"]
        rules = [rule for g in groups for rule in g["rules"]]
        assert len(rules) == 5 and all(rule["health"] == "ok" for rule in rules), rules
    finally:
        for proc in reversed(procs):
            stop(proc)
