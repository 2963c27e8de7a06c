"""The PBS stand-ins as a live server with jobtap's collector and worker: the
fixtures of the PSI/J PBS executor's tests (tests/psij/conftest.py)."""

from tests.psij.conftest import SITE, jobtap_pbs, pbs

__all__ = ["SITE", "jobtap_pbs", "pbs"]
