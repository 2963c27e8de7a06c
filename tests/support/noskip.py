"""A pytest plugin: the suite never skips.

A skip hides a missing prerequisite behind a green run: a clone without what a
test needs would pass with fewer tests.  Tests say what they need with
``tests.support.prereq.missing`` (a failure with the reason); a skip from
anywhere else (a library, a forgotten ``pytest.skip``) is reported as a failure
that carries its reason.  An empty parametrized list fails at collection
(``empty_parameter_set_mark`` in pyproject.toml).  tests/test_suite.py checks
both on a throwaway test file.
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """The suite never skips: a skip (a prerequisite test code forgot to
    require with tests.support.prereq.missing) is reported as a failure that
    carries its reason, so a bare clone never passes with fewer tests."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        _fail(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at import (``allow_module_level``)."""
    report = yield
    if report.skipped:
        _fail(report)
    return report


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped, and this suite does not skip: {reason.removeprefix('Skipped: ')}"
