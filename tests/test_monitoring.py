"""deploy/prometheus and deploy/grafana: the alerting rules pass promtool (and
their unit tests fire each alert), the scrape config is valid, and every query of
the rules and the dashboard names a series the services export, every series
being on the dashboard."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from jobtap.collector.follow.feed import FeedThread
from jobtap.collector.follow.pokes import PokeReader
from jobtap.collector.metrics import CollectorMetrics
from jobtap.keys import SiteKeys
from jobtap.workers.metrics import WorkerMetrics
from sim.rig.paths import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "jobtap-dashboard.json"
SAMPLES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}
METRIC = re.compile(r"\bjobtap_[a-z0-9_]+\b")


def promtool(*args: str) -> subprocess.CompletedProcess:
    if shutil.which("promtool") is None:
        pytest.fail("promtool not found: deploy/setup-dev.sh installs Debian's prometheus")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=PROMETHEUS)


def exported(r) -> dict[str, str]:
    """Every sample name the collector and a worker export -> its family."""
    keys = SiteKeys("x")
    collector = CollectorMetrics("x")
    collector.start(5.0, {})
    collector.watch_pokes(PokeReader(r, keys))
    collector.watch_feed(FeedThread(None, r, keys))  # type: ignore[arg-type]  # never started
    names = {}
    for registry in (collector.registry, WorkerMetrics().registry):
        for family in registry.collect():
            for suffix in SAMPLES[family.type]:
                names[family.name + suffix] = family.name
    return names


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    for var in doc["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["query"]["query"])
    return exprs


def test_alerting_rules_pass_promtool_and_fire():
    res = promtool("check", "rules", "alerts.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    res = promtool("test", "rules", "alerts_test.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    res = promtool("check", "config", "prometheus.yml")
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_query_names_an_exported_series_and_every_series_is_shown(r):
    names = exported(r)
    queries = dashboard_queries()
    assert len(queries) > 20
    used = set()
    for expr in queries:
        found = METRIC.findall(expr)
        assert found, expr
        for name in found:
            assert name in names, f"{name} (in {expr!r}) is not exported"
            used.add(names[name])
    assert set(names.values()) <= used, set(names.values()) - used
    rules = (PROMETHEUS / "alerts.yml").read_text()
    for name in METRIC.findall(rules):
        assert name in names, f"alerts.yml: {name} is not exported"
