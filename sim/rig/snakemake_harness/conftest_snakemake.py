"""Harness of ours beside the snakemake-executor-plugin-slurm sdist's
``tests/tests.py`` (copied unmodified into the run folder): the suite's workflow
classes name the executor ``slurm``; ``--executor-under-test jobtap-slurm`` makes
them run with jobtap's instead (the stock settings carried over into jobtap's
settings class, jobtap's Redis and site from $JOBTAP_REDIS/$JOBTAP_SITE), and
``--smk-results FILE`` writes each test's outcome and duration as JSON."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest


def pytest_addoption(parser):
    parser.addoption("--executor-under-test", default="slurm")
    parser.addoption("--smk-results", default=None)


def _switch(cls, executor: str) -> None:
    from jobtap.snakemake import ExecutorSettings

    stock_settings = cls.get_executor_settings

    def get_executor(self):
        return executor

    def get_executor_settings(self):
        stock = stock_settings(self)
        if stock is None:
            return ExecutorSettings()
        fields = {f.name: getattr(stock, f.name) for f in dataclasses.fields(stock) if f.init}
        return ExecutorSettings(**fields)

    cls.get_executor = get_executor
    cls.get_executor_settings = get_executor_settings


def pytest_collection_modifyitems(config, items):
    executor = config.getoption("--executor-under-test")
    if executor == "slurm":
        return
    seen = set()
    for item in items:
        cls = getattr(item, "cls", None)
        if cls is None or cls in seen or not hasattr(cls, "get_executor"):
            continue
        seen.add(cls)
        for klass in cls.__mro__:  # the class that says "slurm"
            if "get_executor" in vars(klass):
                _switch(klass, executor)
                break


_RESULTS: dict[str, dict] = {}
_STARTED: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _STARTED[item.nodeid] = time.monotonic()
    yield
    entry = _RESULTS.setdefault(item.nodeid, {"outcome": "passed"})
    entry["seconds"] = round(time.monotonic() - _STARTED[item.nodeid], 2)


def pytest_runtest_logreport(report):
    entry = _RESULTS.setdefault(report.nodeid, {"outcome": "passed"})
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        entry["message"] = str(report.longrepr)[-400:]
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--smk-results")
    if path:
        executor = session.config.getoption("--executor-under-test")
        with open(path, "w") as fh:
            json.dump({"executor": executor, "tests": _RESULTS}, fh, indent=1)
