"""A service's Redis password from a file or the environment, never a command line.

``--redis redis://writer:PASSWORD@host/0`` puts the password in every user's
``ps``.  A service names only its user in the URL (``redis://writer@host:6379/0``)
and takes the password from, first found:

1. ``--password-file FILE`` (env ``JOBTAP_REDIS_PASSWORD_FILE``): the file's first
   line, e.g. ``/etc/jobtap/writer.password`` that ``jobtap acl sync
   --secrets-dir`` wrote;
2. ``JOBTAP_REDIS_PASSWORD``: the password itself (a process's environment is
   readable by its owner and root only);
3. ``$CREDENTIALS_DIRECTORY/redis-password``: what systemd's
   ``LoadCredential=redis-password:/etc/jobtap/writer.password`` hands a unit
   (deploy/systemd/), which reads the file as root for a ``User=jobtap`` service.

A URL that holds a password already is used as it is.  A password for a URL that
names no user is an error: Redis would log in its ``default`` user, which jobtap's
Redis set-up turns off.

``--credentials FILE`` (for ``jobtap doctor`` and other admin tools, as ``jobtap
watch`` has it) reads a credential file (``jobtap.credentials``: url, username,
password, site): its URL and login are used unless ``--redis`` is given, its
user and password are added to a ``--redis`` URL that names no user.

Wiring (cli/options.py for the services and admin commands, cli/jobs.py for
``watch``, ``show``, ``wait``, ``export`` and ``top``): ``--redis`` gets
``callback=with_password`` and the command gets :func:`password_file_option` (and
:func:`credentials_option`); both are eager and expose no value, so the command
receives the complete URL.  A refused login's line ends with :func:`looked_at`:
where the password came from, or every place it was looked for.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import click

from jobtap import credentials as credential_files
from jobtap.errors import CredentialsError

PASSWORD_FILE_ENV = "JOBTAP_REDIS_PASSWORD_FILE"
PASSWORD_ENV = "JOBTAP_REDIS_PASSWORD"
SYSTEMD_CREDENTIAL = "redis-password"  # LoadCredential=redis-password:FILE

F = TypeVar("F", bound=Callable[..., Any])


class PasswordError(click.ClickException):
    """A password that cannot be used: one line, exit status 1."""


def read_password_file(path: str | os.PathLike[str]) -> str:
    """The first line of ``path``, refused if every user may read it."""
    p = Path(path)
    try:
        st = p.stat()
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PasswordError(f"cannot read the Redis password file {p}: {exc}") from None
    if st.st_mode & 0o007:
        raise PasswordError(
            f"the Redis password file {p} has mode {stat.S_IMODE(st.st_mode):04o}: refused, "
            f"every user may read it (chmod o= {p})"
        )
    password = text.splitlines()[0].strip() if text.strip() else ""
    if not password:
        raise PasswordError(f"the Redis password file {p} is empty")
    return password


def find_password(
    password_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, str] | None:
    """``(password, where it came from)`` from the first source that has one
    (see the module docstring), or ``None``."""
    env = os.environ if environ is None else environ
    path = password_file or env.get(PASSWORD_FILE_ENV)
    if path:
        return read_password_file(path), str(path)
    if env.get(PASSWORD_ENV):
        return env[PASSWORD_ENV], f"${PASSWORD_ENV}"
    directory = env.get("CREDENTIALS_DIRECTORY")
    if directory:
        p = Path(directory, SYSTEMD_CREDENTIAL)
        if p.exists():
            return read_password_file(p), f"systemd credential {SYSTEMD_CREDENTIAL}"
    return None


def add_login(url: str, username: str | None, password: str) -> str:
    """``url`` logging in as ``username`` (or the URL's own user) with ``password``."""
    parts = urlsplit(url)
    user = username if username is not None else parts.username
    if not user:
        raise PasswordError(
            f"a Redis password needs a user name in the URL, e.g. "
            f"{urlunsplit(parts._replace(netloc='writer@' + _host(parts.netloc)))}: "
            "without one Redis logs in its default user, which is off"
        )
    netloc = f"{quote(unquote(user), safe='')}:{quote(password, safe='')}@{_host(parts.netloc)}"
    return urlunsplit(parts._replace(netloc=netloc))


def _host(netloc: str) -> str:
    return netloc.rpartition("@")[2]


def service_url(
    url: str,
    *,
    password_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """``url`` with the service's password from a file or the environment; as it
    is if it has a password already or no source has one."""
    return login_url(url, password_file=password_file, environ=environ)[0]


def login_url(
    url: str,
    *,
    password_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[str, str | None]:
    """:func:`service_url`, and where its password came from (``None``: nowhere)."""
    if urlsplit(url).password is not None:
        return url, "the URL"
    found = find_password(password_file, environ)
    if found is None:
        return url, None
    password, where = found
    try:
        return add_login(url, None, password), where
    except PasswordError as exc:
        raise PasswordError(f"{exc} (the password is from {where})") from None


def looked_at(also: tuple[str, ...] = ()) -> str:
    """Where this command's Redis password came from, or every place it was
    looked for: to end the line of a refused login with."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or _META_FROM not in ctx.meta:
        return ""
    where = ctx.meta[_META_FROM]
    if where is not None:
        return f" (the password is from {where})"
    places = ("--password-file", f"${PASSWORD_FILE_ENV}", f"${PASSWORD_ENV}",
              f"$CREDENTIALS_DIRECTORY/{SYSTEMD_CREDENTIAL}", *also)  # fmt: skip
    return f" (no password found; looked at {', '.join(places)})"


def credentials_url(url: str | None, path: str | os.PathLike[str]) -> tuple[str, str | None]:
    """``(URL, site)`` from a credential file: its URL (unless ``url`` is given)
    with its user and password (unless ``url`` names a user)."""
    try:
        creds = credential_files.load(path)
    except CredentialsError as exc:
        raise PasswordError(str(exc)) from None
    assert creds is not None
    target = url or creds.url
    if not target:
        raise PasswordError(f"credential file {path} has no url: give --redis URL")
    if urlsplit(target).username is None and creds.password:
        target = add_login(target, creds.username, creds.password)
    return target, creds.site


# -- click ----------------------------------------------------------------------------------------
_META_FILE = "jobtap.password_file"
_META_CREDS = "jobtap.credentials"
_META_FROM = "jobtap.password_from"


def _remember(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        ctx.meta[key] = value

    return callback


def password_file_option(f: F) -> F:
    """``--password-file FILE`` (env JOBTAP_REDIS_PASSWORD_FILE), read by
    :func:`with_password`."""
    return click.option(
        "--password-file",
        type=click.Path(dir_okay=False),
        envvar=PASSWORD_FILE_ENV,
        default=None,
        is_eager=True,
        expose_value=False,
        callback=_remember(_META_FILE),
        help="The Redis password, for a --redis URL that names only the user "
        f"(env {PASSWORD_FILE_ENV}; or the password in ${PASSWORD_ENV}).",
    )(f)


def credentials_option(f: F) -> F:
    """``--credentials FILE``: a credential file's URL, login and site (see
    :func:`credentials_url`), read by :func:`with_password`."""
    return click.option(
        "--credentials",
        type=click.Path(dir_okay=False),
        default=None,
        is_eager=True,
        expose_value=False,
        callback=_remember(_META_CREDS),
        help="Credential file (url, username, password, site; mode 0600) to log in with.",
    )(f)


def with_password(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--redis`` callback: the URL with the credential file's login (if
    ``--credentials``) or the service password (``--password-file``, the
    environment, systemd's credential)."""
    if value is None:
        return None
    creds = ctx.meta.get(_META_CREDS)
    if creds:
        given = ctx.get_parameter_source(param.name or "") not in (
            click.core.ParameterSource.DEFAULT,
            None,
        )
        value, site = credentials_url(value if given else None, creds)
        ctx.meta["jobtap.credentials_site"] = site
        if urlsplit(value).password is not None:
            ctx.meta[_META_FROM] = f"the credential file {creds}"
            return value
    value, ctx.meta[_META_FROM] = login_url(value, password_file=ctx.meta.get(_META_FILE))
    return value


def credentials_site(ctx: click.Context, site: str) -> str:
    """The credential file's site, if ``--site`` was left at its default."""
    from_file = ctx.meta.get("jobtap.credentials_site")
    if from_file and ctx.get_parameter_source("site") in (
        click.core.ParameterSource.DEFAULT,
        None,
    ):
        return str(from_file)
    return site


__all__ = [
    "PASSWORD_ENV",
    "PASSWORD_FILE_ENV",
    "PasswordError",
    "credentials_option",
    "credentials_site",
    "credentials_url",
    "find_password",
    "login_url",
    "looked_at",
    "password_file_option",
    "read_password_file",
    "service_url",
    "with_password",
]
