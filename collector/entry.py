"""The ``jobtap`` command's entry point.

``jobtap poke`` runs from scheduler hooks for every job start and end, so it
takes a short way that loads neither click nor redis-py (collector/poke.py);
everything else goes to the click application in collector/cli.py.
"""

from __future__ import annotations

import sys


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "poke":
        from .poke import main as poke

        sys.exit(poke(sys.argv[2:]))
    from .cli import main as cli

    cli()
