"""``jobtap watch``, ``show``, ``wait`` and ``export``: the SDK on the command line.

These commands use the public SDK only (``jobtap.Client``), like any in-house tool.
Expected failures (Redis unreachable, unknown job, bad credential file) are one
line on stderr and a non-zero exit status.

- ``jobtap watch [JOBID...] [--user U] [--all] [--nodes] [--updates] [--json]``:
  one aligned line per change (time, site, job, user, type, old → new state,
  reason; coloured on a terminal, plain when piped): new jobs, state changes and
  finals, plus attribute-only updates with ``--updates``; or every event's JSON
  with ``--json``.  With job ids it ends after their final changes (a job not in
  the cache for the user is waited for, said once on stderr); ``--all``
  watches every job of the site (operators); with neither, the user's own jobs.
- ``jobtap show JOBID [--json] [--native]``: the cached record (with
  ``--native`` also the scheduler's own record, which events leave out).
- ``jobtap wait JOBID [--timeout S] [--state S]``: exits with the job's exit
  status (0-255; killed by signal N: 128+N), 124 on timeout.
- ``jobtap export [--group G] [--since ID] [--native]``: the deduplicated stream as
  NDJSON on stdout, one event a line, flushed: ``jobtap export | kcat -P -t jobs``;
  ``--native`` joins each event's native record in from the hashes.
"""

from __future__ import annotations

import functools
import os
import queue
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import orjson

import jobtap
from jobtap.redis_errors import translated
from jobtap.schema import JOB_STATES

from .changes import LineFormatter, use_colour, wanted
from .options import unwritten
from .passwords import looked_at, password_file_option, with_password

TIMEOUT_STATUS = 124  # like timeout(1)


# -- options and errors ---------------------------------------------------------------------
def connection_options(f: Callable) -> Callable:
    f = click.option(
        "--credentials",
        type=click.Path(dir_okay=False),
        default=None,
        help="Credential file (default ~/.config/jobtap/credentials if present; mode 0600).",
    )(f)
    f = click.option(
        "--site",
        envvar="JOBTAP_SITE",
        default=None,
        help="Site name (default: $JOBTAP_SITE, the credential file's, then 'default').",
    )(f)
    f = click.option(
        "--redis",
        "redis_url",
        envvar="JOBTAP_REDIS",
        default=None,
        callback=with_password,
        help="Redis URL (default: $JOBTAP_REDIS, the credential file's, "
        "then redis://127.0.0.1:6379/0).",
    )(f)
    return password_file_option(f)


@contextmanager
def sdk_errors() -> Iterator[None]:
    """SDK errors become one-line ``click`` errors (exit status 1, no traceback)."""
    try:
        yield
    except jobtap.AuthenticationFailed as exc:
        raise click.ClickException(f"{exc}{looked_at(('the credential file',))}") from None
    except jobtap.JobtapError as exc:
        raise click.ClickException(str(exc)) from None


def require_written(client: jobtap.Client) -> None:
    """A one-line error if no collector has written the client's site (a
    mistyped --site), where the command would wait, or find nothing, forever.
    A user whose ACL hides the site's meta is not told: their own channels and
    keys say whether the site is theirs."""
    site = client._site(None)
    try:
        with translated(site.url):
            written = site.redis.exists(site.keys.meta)
    except jobtap.PermissionDenied:
        return
    if not written:
        raise unwritten(client.site, site.url)


def make_client(redis_url: str | None, site: str | None, credentials: str | None) -> jobtap.Client:
    with sdk_errors():
        return jobtap.Client(redis_url, site=site, credentials=credentials)


def with_client(f: Callable) -> Callable:
    """Pass ``client`` instead of the connection options; close it afterwards."""

    @connection_options
    @functools.wraps(f)
    def wrapper(redis_url: str | None, site: str | None, credentials: str | None, **kw: Any):
        client = make_client(redis_url, site, credentials)
        try:
            with sdk_errors():
                return f(client=client, **kw)
        finally:
            client.close()

    return wrapper


# -- formatting -------------------------------------------------------------------------------
def _short(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return str(value)


def shell_status(job: jobtap.Job | None) -> int:
    """The exit status a shell would show for the job: its exit status if 0-255;
    PBS's 256+N (killed by signal N) as 128+N; 1 for other failures."""
    if job is None:
        return 1
    es = job.exit_status
    if es is None:
        return 0 if job.state == "completed" else 1
    if 0 <= es <= 255:
        return es
    if 256 < es < 256 + 128:
        return 128 + (es - 256)
    return 1


# -- commands ---------------------------------------------------------------------------------
@click.command()
@click.argument("job_ids", nargs=-1)
@click.option("--user", "-u", default=None, help="Watch every job of this user.")
@click.option("--all", "all_jobs", is_flag=True, help="Watch every job of the site (operators).")
@click.option("--nodes", is_flag=True, help="Also node and queue changes.")
@click.option(
    "--updates",
    is_flag=True,
    help="Also attribute-only changes (usage, comment...), naming the normalised fields.",
)
@click.option("--json", "as_json", is_flag=True, help="Print every event as JSON (for scripts).")
@click.option("--no-initial", is_flag=True, help="Do not print the current records first.")
@click.option(
    "--attr",
    "attrs",
    multiple=True,
    help="Updates of this attribute only (repeat; implies --updates).",
)
@click.option("--count", type=int, default=None, help="Exit after this many lines.")
@click.option("--timeout", type=float, default=None, help="Exit after this many seconds.")
@with_client
def watch(
    client: jobtap.Client,
    job_ids: tuple[str, ...],
    user: str | None,
    all_jobs: bool,
    nodes: bool,
    updates: bool,
    as_json: bool,
    no_initial: bool,
    attrs: tuple[str, ...],
    count: int | None,
    timeout: float | None,
) -> None:
    """Print job changes as they happen: new jobs, state changes, finals.

    With JOBIDs, ends after their final changes.  Without JOBIDs: --user U for a
    user's jobs, --all for every job of the site, else your own jobs.  Columns:
    time, site, job, user, type, old -> new state, reason (exit status, the
    scheduler's reason, or the fields an update changed)."""
    if all_jobs and (job_ids or user):
        raise click.UsageError("--all watches every job: give no JOBID and no --user")
    changes: queue.SimpleQueue[jobtap.Change] = queue.SimpleQueue()
    kinds = ("job", "node", "queue") if nodes else ("job",)
    if not job_ids and not user and not all_jobs and client.user is None:
        raise click.UsageError("say what to watch: JOBID..., --user U or --all")
    require_written(client)
    seen: set[str] = set()  # jobs delivered so far (the initial records first)

    def deliver(change: jobtap.Change) -> None:
        if change.kind == "job":
            seen.add(change.object_id)
        changes.put(change)

    try:
        sub = client.subscribe(
            deliver,
            jobs=list(job_ids) or None,
            user=user,
            all_jobs=all_jobs,
            attrs=attrs or None,
            kinds=kinds,
            initial=not no_initial,
        )
    except jobtap.JobNotFound:  # a job not in the cache, and no user to wait for it as
        missing = [j for j in dict.fromkeys(job_ids) if not _visible(client, j, user)]
        raise click.ClickException(
            not_cached(client.site, missing or list(job_ids), None)
        ) from None
    if job_ids:
        waited_for(client, job_ids, seen, user, no_initial)
    out = sys.stdout
    updates = updates or bool(attrs)
    lines = LineFormatter(out)
    if not as_json and use_colour(out):
        out.write(lines.header() + "\n")
    deadline = None if timeout is None else time.monotonic() + timeout
    printed = 0
    try:
        while count is None or printed < count:
            if deadline is not None and time.monotonic() >= deadline:
                break
            try:
                change = changes.get(timeout=0.1)
            except queue.Empty:
                if sub.closed:
                    break  # every watched job finished
                continue
            if as_json:
                line = change.json.decode()
            elif wanted(change, updates):
                line = lines.line(change)
            else:
                continue
            out.write(line + "\n")
            out.flush()
            printed += 1
    except KeyboardInterrupt:
        pass
    finally:
        sub.close()
    if sub.error is not None:
        raise click.ClickException(str(sub.error))


def _visible(client: jobtap.Client, job_id: str, user: str | None) -> bool:
    try:
        return client.job(job_id, user=user) is not None
    except jobtap.JobtapError:
        return False


def waited_for(
    client: jobtap.Client,
    job_ids: tuple[str, ...],
    seen: set[str],
    user: str | None,
    no_initial: bool,
) -> None:
    """Say once, on stderr, which jobs are waited for without being in the cache,
    and why they may never come (a watch of them would otherwise wait silently)."""
    missing = [j for j in dict.fromkeys(job_ids) if j not in seen]
    if no_initial:  # the initial records were read but not delivered: look
        missing = [j for j in missing if not _visible(client, j, user)]
    if missing:
        click.echo(
            f"jobtap watch: {not_cached(client.site, missing, user or client.user)}", err=True
        )


def not_cached(site: str, missing: list[str], who: str | None) -> str:
    """Why ``missing`` jobs are not shown: waited for as ``who``'s, or, with no
    user known, what to give to wait for them."""
    names = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    job = f"job{'s' if len(missing) > 1 else ''} {names}"
    later = "a job just submitted appears at the collector's next look"
    if who is None:
        return (
            f"{job}: not in site {site}'s cache, and no user is known to wait for it as: "
            f"--user OWNER waits for OWNER's job of that id to appear ({later}; a mistyped "
            "id never will)"
        )
    return (
        f"waiting for {job}: not in site {site}'s cache for user {who}; watching for "
        f"{who}'s job of that id to appear. It never will if it is another user's job (you "
        "see only your own; --user OWNER if you may read theirs) or the id is mistyped; "
        f"{later}. --timeout S gives up."
    )


@click.command()
@click.argument("job_id")
@click.option("--user", "-u", default=None, help="The job's owner, if the owner index is closed.")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@click.option("--native", is_flag=True, help="Also print the scheduler's own record.")
@with_client
def show(client: jobtap.Client, job_id: str, user: str | None, as_json: bool, native: bool) -> None:
    """Print a job's cached record."""
    job = client.job(job_id, user=user)
    if job is None:
        require_written(client)
        raise click.ClickException(f"job {job_id} is not in the cache of site {client.site}")
    record = job.to_dict()
    if as_json:
        click.echo(orjson.dumps(record, option=orjson.OPT_INDENT_2).decode())
        return
    width = max(len(k) for k in record)
    for key, value in record.items():
        if key == "native" and not native:
            continue
        if key == "native":
            value = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
        click.echo(f"{key:<{width}}  {_short(value)}")


@click.command()
@click.argument("job_id")
@click.option("--timeout", type=float, default=None, help="Give up after this many seconds (124).")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(sorted(JOB_STATES)),
    help="Wait for this state instead of a terminal one (repeat for several).",
)
@click.option(
    "--user", "-u", default=None, help="The job's owner (to wait for a job not seen yet)."
)
@click.option("--quiet", "-q", is_flag=True, help="Print nothing.")
@with_client
def wait(
    client: jobtap.Client,
    job_id: str,
    timeout: float | None,
    states: tuple[str, ...],
    user: str | None,
    quiet: bool,
) -> None:
    """Wait for a job to finish; exit with its exit status (124 on timeout)."""
    require_written(client)
    try:
        job = client.wait(job_id, states or jobtap.TERMINAL, timeout, user=user)
    except jobtap.WaitTimeout as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(TIMEOUT_STATUS)
    except jobtap.StateNotReached as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(shell_status(exc.job) or 1)
    except jobtap.JobNotFound:
        raise click.ClickException(not_cached(client.site, [job_id], None)) from None
    if not quiet:
        es = "" if job.exit_status is None else f" (exit status {job.exit_status})"
        click.echo(f"{job.id} {job.state}{es}", err=True)
    sys.exit(shell_status(job) if job.terminal else 0)


@click.command()
@click.option("--group", "-g", default=None, help="Consumer group (acks, crash recovery).")
@click.option("--consumer", default=None, help="Consumer name in the group (default host-pid).")
@click.option(
    "--since",
    default=None,
    help="Start after this stream id ('0': all the stream holds; default: new events only). "
    "With --group: where a new group starts.",
)
@click.option("--user", "-u", default=None, help="Export one user's stream.")
@click.option("--count", type=int, default=None, help="Exit after this many events.")
@click.option(
    "--idle", type=float, default=None, help="Exit after this many seconds without events."
)
@click.option("--claim-idle", type=float, default=60.0, show_default=True,
              help="Seconds before another consumer's unacked events are claimed.")  # fmt: skip
@click.option(
    "--native",
    is_flag=True,
    help="Put each job's (node's, queue's) native record into its event as record.native, "
    "which events of format 2 leave out: read from the hashes at export time, one read per "
    "batch, so it is the record as it is then; null once the hash has expired (a finished "
    "job past its retention, a removed node).",
)
@with_client
def export(
    client: jobtap.Client,
    group: str | None,
    consumer: str | None,
    since: str | None,
    user: str | None,
    count: int | None,
    idle: float | None,
    claim_idle: float,
    native: bool,
) -> None:
    """Write the deduplicated event stream to stdout as NDJSON (one event a line).

    Events are acknowledged once written and flushed: a crash repeats at most the
    batch being written (at-least-once; the event "id" is the key to dedupe on)."""
    require_written(client)
    out = sys.stdout.buffer
    stream = client.stream(
        group=group, consumer=consumer, since=since, user=user, claim_idle=claim_idle,
        idle_timeout=idle, native=native,
    )  # fmt: skip
    written = 0
    ok = True
    try:
        for change in stream:
            out.write(change.json + b"\n")
            written += 1
            if stream.buffered == 0 or written == count:
                out.flush()
                stream.ack()
            if count is not None and written >= count:
                break
        out.flush()
    except KeyboardInterrupt:
        out.flush()
    except BrokenPipeError:
        ok = False  # the reader went away: what was not flushed stays unacked
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
    finally:
        stream.close(ack=ok)
    if not ok:
        sys.exit(1)


def register(group: click.Group) -> None:
    """Add ``watch``, ``show``, ``wait`` and ``export`` to the ``jobtap`` group."""
    for command in (watch, show, wait, export):
        group.add_command(command)


__all__ = ["register", "shell_status"]
