"""The ``jobtap`` command: a click group; each subcommand lives in its own module
beside what it drives (services: ``collector``, ``worker``; for people:
``watch``, ``show``, ``wait``, ``export``, ``status``, ``top``, ``demo``; for admins:
``acl``, ``doctor``).  Every command takes ``--redis URL`` (default ``$JOBTAP_REDIS``, then
redis://127.0.0.1:6379/0) and ``--site`` (default ``$JOBTAP_SITE``, then
``default``).  Expected failures are one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import sys

import click

from . import acl, demo, doctor, jobs, status, top
from .collector import collector
from .worker import worker


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
# `jobtap --version`: "jobtap VERSION", the installed distribution's version (pyproject.toml's)
@click.version_option(package_name="jobtap", prog_name="jobtap", message="%(prog)s %(version)s")
def main() -> None:
    """jobtap: one collector per HPC site in front of the workload manager;
    a Redis cache, change streams and push notifications for every job."""


# -- poke ----------------------------------------------------------------------------------
@main.command(
    context_settings={"ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def poke(args):
    """Tell a collector in follow mode that these jobs just changed (for
    scheduler hooks; `jobtap poke --help` for its options)."""
    from .poke import main as fast_poke

    sys.exit(fast_poke(list(args)))


main.add_command(collector)
main.add_command(worker)
main.add_command(status.status)
main.add_command(doctor.doctor)
main.add_command(demo.demo)
main.add_command(top.top)
jobs.register(main)
acl.register(main)
