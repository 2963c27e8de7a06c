"""What a test does when something it needs is not there: it fails and says
what is missing.  The suite never skips, so a clone that lacks a prerequisite
shows it in red instead of passing with fewer tests (tests/conftest.py turns
any other skip into a failure too)."""

from __future__ import annotations

from typing import NoReturn

import pytest


def missing(what: str) -> NoReturn:
    pytest.fail(f"missing prerequisite: {what}", pytrace=False)
