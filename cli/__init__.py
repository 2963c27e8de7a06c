"""The ``jobtap`` command (``python -m jobtap.cli`` works too).

``jobtap poke`` runs from scheduler hooks for every job start and end, so it
takes a short way that loads neither click nor redis-py (cli/poke.py);
everything else goes to the click application in cli/app.py.
"""

from __future__ import annotations

import sys


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "poke":
        from .poke import main as poke

        sys.exit(poke(sys.argv[2:]))
    from .app import main as cli

    cli()
