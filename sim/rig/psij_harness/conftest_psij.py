"""PSI/J's pytest set-up (its ``conftest.py``, which its sdist does not ship),
written for jobtap; copied as ``conftest.py`` beside the sdist's test files.

``--executors A:single,B:single`` runs every test that takes ``execparams`` once per
executor, side by side.  At the end it prints one row per test with each
executor's outcome and seconds, the columns' totals, and writes them as JSON to
``--psij-results FILE`` for the caller.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from executor_test_params import ExecutorTestParams

_results: dict[str, dict[str, dict]] = defaultdict(dict)  # test -> executor -> result


def pytest_addoption(parser):
    parser.addoption(
        "--executors",
        default="local:single",
        help="executors (EXECUTOR[:LAUNCHER[:URL]], comma-separated) to run the tests on",
    )
    parser.addoption("--psij-results", default=None, help="write the results here (JSON)")


def _executors(config) -> list[str]:
    return [e.strip() for e in config.getoption("executors").split(",") if e.strip()]


def pytest_generate_tests(metafunc):
    if "execparams" in metafunc.fixturenames:
        params = [ExecutorTestParams(spec) for spec in _executors(metafunc.config)]
        metafunc.parametrize("execparams", params, ids=str)


def _split(item) -> tuple[str, str]:
    """(test name, executor spec or "-") of a test item."""
    spec = getattr(item, "callspec", None)
    params = spec.params if spec is not None else {}
    if "execparams" in params:
        return item.originalname, str(params["execparams"])
    return item.name, "-"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Sum each test's phases' seconds per executor; keep a failure's last line."""
    report = (yield).get_result()
    test, executor = _split(item)
    entry = _results[test].setdefault(executor, {"outcome": "passed", "seconds": 0.0})
    entry["seconds"] = round(entry["seconds"] + report.duration, 2)
    if report.outcome != "passed" and entry["outcome"] != "failed":
        entry["outcome"] = report.outcome
        entry["message"] = str(report.longrepr).strip().splitlines()[-1][:300]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    executors = [str(ExecutorTestParams(e)) for e in _executors(config)]
    width = max([len(t) for t in _results] + [20])
    tr = terminalreporter
    tr.section("PSI/J tests, side by side")
    tr.write_line(f"{'test':<{width}}  " + "  ".join(f"{e:>24}" for e in executors))
    totals = dict.fromkeys(executors, 0.0)
    for test, by_exec in _results.items():
        if "-" in by_exec:
            continue
        cells = []
        for e in executors:
            r = by_exec.get(e)
            if r is None:
                cells.append(f"{'':>24}")
                continue
            totals[e] += r["seconds"]
            cells.append(f"{r['outcome'] + ' ' + format(r['seconds'], '.1f') + 's':>24}")
        tr.write_line(f"{test:<{width}}  " + "  ".join(cells))
    tr.write_line(f"{'total':<{width}}  " + "  ".join(f"{totals[e]:>23.1f}s" for e in executors))
    path = config.getoption("psij_results")
    if path:
        with open(path, "w") as fh:
            json.dump({"executors": executors, "tests": _results, "totals": totals}, fh, indent=1)
