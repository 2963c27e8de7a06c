"""Where things are: the repository, the test stand-ins, the real schedulers'
captured output (``../shared/fixtures`` beside the checkout, or
``$JOBTAP_FIXTURES``)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"
FAKE_BIN = FAKES / "bin"


def fixtures_dir() -> Path:
    return Path(os.environ.get("JOBTAP_FIXTURES", ROOT.parent / "shared" / "fixtures"))
