"""``jobtap acl``: the Redis users of a site (see docs/security.md).

- ``jobtap acl sync [--users-file F] [--dry-run]``: one Redis user per cluster
  user (job owners of the sites, or the names in F), plus ``writer`` and
  ``operator``; idempotent, passwords and on/off state are kept.
- ``jobtap acl grant USER [--output PATH]``: a new password and a credential file
  (mode 0600, the user's when run as root) where the SDK looks by default.
- ``jobtap acl revoke USER [--remove-file]``: delete the Redis user; Redis closes
  its connections, subscribers included.
- ``jobtap acl show [NAME...]``: the users as Redis has them (hashes masked).

These commands connect as a user with ACL rights (the ``admin`` of
deploy/redis/users.acl): ``--redis redis://admin:PASSWORD@host:6379/0`` or
``$JOBTAP_ADMIN_REDIS``; never ``$JOBTAP_REDIS``, which holds the writer's URL on a
service host.  Changes are saved to the server's ACL file (``ACL SAVE``).  On a
Redis Cluster, any node's URL will do: sync, grant and revoke change every node,
primaries and replicas, and name (exit status 1) any node that did not take it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import click
import redis

from jobtap.acl import files, rules
from jobtap.connection import redis_from_url
from jobtap.errors import JobtapError
from jobtap.keys import BadName, check_site
from jobtap.redis_errors import describe_error
from jobtap.urls import safe_url

from .redissetup import setup_warnings

DEFAULT_ADMIN_URL = "redis://127.0.0.1:6379/0"


# -- options and helpers --------------------------------------------------------------------------
def _check_sites(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> list[str]:
    try:
        return list(dict.fromkeys(check_site(v) for v in value))
    except BadName as exc:
        raise click.BadParameter(str(exc)) from exc


def admin_options(f):
    f = click.option(
        "--site",
        "sites",
        multiple=True,
        envvar="JOBTAP_SITE",
        default=("default",),
        show_default=True,
        callback=_check_sites,
        help="Site whose keys the users may read (repeat for several; env JOBTAP_SITE).",
    )(f)
    f = click.option(
        "--redis",
        "redis_url",
        envvar="JOBTAP_ADMIN_REDIS",
        default=DEFAULT_ADMIN_URL,
        show_default=True,
        help="Redis URL of a user with ACL rights, e.g. redis://admin:PW@host:6379/0 "
        "(env JOBTAP_ADMIN_REDIS).",
    )(f)
    return f


# The admin's own TLS client certificate is not for the users it makes.
PRIVATE_TLS = ("ssl_certfile", "ssl_keyfile", "ssl_password")


def public_url(url: str) -> str:
    """The URL without its user and password, nor the admin's TLS client
    certificate (the CA stays): what users' credential files hold."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)
             if k not in PRIVATE_TLS]  # fmt: skip
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(query, safe="/")))


def service_url(url: str, name: str, password: str) -> str:
    parts = urlsplit(url)
    netloc = f"{quote(name, safe='')}:{quote(password, safe='')}@{parts.netloc}"
    return urlunsplit(parts._replace(netloc=netloc))


@contextmanager
def errors(url: str) -> Iterator[None]:
    """Expected failures become one line on stderr and exit status 1."""
    try:
        yield
    except rules.BadUser as exc:
        raise click.ClickException(str(exc)) from None
    except redis.exceptions.NoPermissionError as exc:
        raise click.ClickException(
            f"the user of {safe_url(url)} may not manage ACLs ({exc}); "
            "use the admin user (--redis / JOBTAP_ADMIN_REDIS)"
        ) from None
    except redis.RedisError as exc:
        raise click.ClickException(f"Redis at {safe_url(url)}: {exc}") from None
    except OSError as exc:
        raise click.ClickException(str(exc)) from None


def admin_client(url: str, sites: list[str], groups: bool = True) -> rules.AclAdmin:
    try:
        r = redis_from_url(url, decode_responses=True, socket_connect_timeout=5)
        r.ping()
    except (redis.RedisError, OSError, JobtapError) as exc:
        raise click.ClickException(describe_error(exc, url)) from None
    with errors(url):
        return rules.AclAdmin(r, sites, groups=groups)


def saved(admin: rules.AclAdmin, *, warn_no_aclfile: bool = True) -> None:
    path = admin.save()
    for warning in admin.warnings:
        click.echo(f"warning: {warning}", err=True)
    if path is None and warn_no_aclfile:
        click.echo(
            "warning: this Redis has no aclfile: the users last until it restarts "
            "(see docs/security.md)",
            err=True,
        )


def every_node_took_it(admin: rules.AclAdmin) -> None:
    """Name each Redis node that did not take the change (ACLs are per node: a
    replica a subscriber is sent to must know the users too) and exit 1."""
    if not admin.failed:
        return
    for address, why in sorted(admin.failed.items()):
        click.echo(f"error: Redis node {address} did not take the change: {why}", err=True)
    raise click.ClickException(
        f"{len(admin.failed)} of {len(admin.nodes)} Redis nodes did not take the change; "
        "run `jobtap acl sync` again once they are back"
    )


def read_users_file(path: str) -> list[str]:
    """One name a line; blank lines and lines starting with '#' are skipped."""
    text = Path(path).read_text(encoding="utf-8")
    return [
        ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]


def grant_one(admin: rules.AclAdmin, user: str, url: str, output: Path | None) -> tuple[Path, str]:
    """New password, credential file in place, Redis user set; the file is put in
    place only once Redis took the password."""
    rules.check_user(user, admin.reserved)
    password = rules.new_password()
    text = files.credentials_text(url, user, password, admin.sites[0])
    pending, path = files.prepare_credentials(user, text, output)
    try:
        outcome = admin.grant(user, password)
    except BaseException:
        pending.discard()
        raise
    pending.commit()
    return path, outcome


# -- commands -------------------------------------------------------------------------------------
@click.group("acl")
def acl() -> None:
    """Redis users and what they may do (see docs/security.md).

    Connects as a user with ACL rights (--redis, env JOBTAP_ADMIN_REDIS)."""


@acl.command()
@admin_options
@click.option(
    "--users-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Cluster users, one a line (default: the owners of the sites' jobs).",
)
@click.option("--dry-run", is_flag=True, help="Print the ACL lines; change nothing.")
@click.option(
    "--groups/--no-groups",
    default=True,
    show_default=True,
    help="Consumer groups on each user's own event stream.",
)
@click.option(
    "--services/--no-services",
    default=True,
    show_default=True,
    help="Also the service users writer, operator and poker.",
)
@click.option(
    "--secrets-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Service users' passwords in DIR/NAME.password: used if present, written "
    "(mode 0600) when one is generated.",
)
@click.option("--url", default=None, help="Redis URL for the printed service URLs.")
@click.option(
    "--grant-new",
    is_flag=True,
    help="Grant users without a password yet (credential file in their home).",
)
def sync(redis_url, sites, users_file, dry_run, groups, services, secrets_dir, url, grant_new):
    """Create or update one Redis user per cluster user, and the service users.

    Users keep their passwords and on/off state; new ones are created off until
    `jobtap acl grant`.  Without --secrets-dir a service user created now gets a
    password printed once (as a URL for JOBTAP_REDIS)."""
    admin = admin_client(redis_url, sites, groups)
    url = url or public_url(redis_url)
    with errors(redis_url):
        users = read_users_file(users_file) if users_file else sorted(admin.users_from_jobs())
        given: dict[str, str] = {}
        if secrets_dir and services:
            for name in rules.SERVICE_USERS:
                f = Path(secrets_dir, f"{name}.password")
                if f.exists():
                    given[name] = f.read_text(encoding="utf-8").strip()
        for line in setup_warnings(admin.r):  # no ACL file, default user open
            click.echo(f"warning: {line}", err=True)
        report = admin.sync(users, services=services, service_passwords=given, dry_run=dry_run)
        for name, why in sorted(report.skipped.items()):
            click.echo(f"skipped {name!r}: {why}", err=True)
        if dry_run:
            for warning in admin.warnings:
                click.echo(f"warning: {warning}", err=True)
            click.echo(f"# {len(report.lines)} users; dry run: nothing changed", err=True)
            for line in report.lines:
                click.echo(line)
            return
        for name, password in report.generated.items():
            if secrets_dir:
                files.write_secret(Path(secrets_dir, f"{name}.password"), password)
                click.echo(f"{name}: new password in {Path(secrets_dir, name + '.password')}")
            else:
                click.echo(f"{name}: {service_url(url, name, password)}  (shown once)")
        granted: list[str] = []
        if grant_new:
            for name in report.no_password:
                if files.system_account(name) is None:
                    click.echo(f"not granted {name!r}: no system account", err=True)
                    continue
                path, _ = grant_one(admin, name, url, None)
                granted.append(name)
                click.echo(f"granted {name}: {path}")
        saved(admin, warn_no_aclfile=False)  # said above, with what to do
    waiting = len(report.no_password) - len(granted)
    click.echo(
        f"acl sync: {len(report.created)} created, {len(report.updated)} updated, "
        f"{len(report.unchanged)} unchanged, {len(report.skipped)} skipped"
        + (f"; {waiting} without a password yet (jobtap acl grant USER)" if waiting else ""),
        err=True,
    )
    every_node_took_it(admin)


@acl.command()
@admin_options
@click.argument("user")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the credential file here (default ~USER/.config/jobtap/credentials).",
)
@click.option(
    "--url",
    default=None,
    help="Redis URL for the credential file (default: --redis without its user and password).",
)
@click.option(
    "--groups/--no-groups",
    default=True,
    show_default=True,
    help="Consumer groups on the user's own event stream.",
)
def grant(redis_url, sites, user, output, url, groups):
    """Give USER a new password and write their credential file (mode 0600).

    Replaces any earlier password; connections made with it stay until they
    close (revoke, then grant, to cut them)."""
    admin = admin_client(redis_url, sites, groups)
    with errors(redis_url):
        path, outcome = grant_one(admin, user, url or public_url(redis_url), output)
        saved(admin)
    owner = files.owner_of(user)
    whose = f", owner {user}" if owner else ""
    click.echo(f"granted {user} ({outcome}): {path} (mode 0600{whose})")
    every_node_took_it(admin)


@acl.command()
@admin_options
@click.argument("user")
@click.option("--remove-file", is_flag=True, help="Also delete the user's credential file.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help="The credential file to delete (default ~USER/.config/jobtap/credentials).",
)
def revoke(redis_url, sites, user, remove_file, output):
    """Delete USER's Redis user; Redis closes its connections and subscriptions."""
    admin = admin_client(redis_url, sites)
    with errors(redis_url):
        existed = admin.revoke(user)
        removed = None
        if remove_file:
            removed = files.remove_credentials(user, Path(output) if output else None)
        saved(admin)
    click.echo(
        (
            f"revoked {user}: Redis user deleted, connections closed"
            if existed
            else f"no Redis user {user!r}"
        )
        + (f"; removed {removed}" if removed else "")
    )
    every_node_took_it(admin)


@acl.command()
@admin_options
@click.argument("names", nargs=-1)
def show(redis_url, sites, names):
    """Print the Redis users (all, or NAMES) as ACL lines, password hashes masked."""
    admin = admin_client(redis_url, sites)
    with errors(redis_url):
        lines = admin.listing(names or None)
    for line in lines:
        click.echo(line)
    missing = set(names) - {ln.split(" ", 2)[1] for ln in lines}
    if missing:
        raise click.ClickException(f"no such Redis user: {', '.join(sorted(missing))}")


def register(group: click.Group) -> None:
    """Add the ``acl`` group to the ``jobtap`` group."""
    group.add_command(acl)


__all__ = ["acl", "register"]
