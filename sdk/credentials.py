"""The credential file: how a user's tools find their Redis and log in.

Default location: ``~/.config/jobtap/credentials`` (or ``$JOBTAP_CREDENTIALS``).
The site admin (``jobtap acl``) writes one per user.  It is a few ``key = value``
lines; blank lines and lines starting with ``#`` are ignored::

    # jobtap credentials for alice
    url = redis://jobtap.example.org:6379/0
    username = alice
    password = s3cret
    site = hpc1

Every key is optional; unknown keys are an error (a typo must not go unnoticed).
Values may be quoted with ``"`` or ``'``.  The file is refused unless only its
owner may read it (mode ``0600`` or ``0400``: no group or other bits).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import CredentialsError

KEYS = ("url", "username", "password", "site")


@dataclass(frozen=True)
class Credentials:
    url: str | None = None
    username: str | None = None
    password: str | None = None
    site: str | None = None
    path: Path | None = None

    def __repr__(self) -> str:  # never print the password
        hidden = "***" if self.password else None
        return (
            f"Credentials(url={self.url!r}, username={self.username!r}, "
            f"password={hidden!r}, site={self.site!r}, path={self.path!r})"
        )


def default_path() -> Path:
    env = os.environ.get("JOBTAP_CREDENTIALS")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".config" / "jobtap" / "credentials"


def parse(text: str, path: Path | None = None) -> Credentials:
    """Parse the text of a credential file (see the module docstring)."""
    values: dict[str, str] = {}
    where = str(path) if path else "credentials"
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or not key:
            raise CredentialsError(f"{where}:{n}: expected 'key = value'")
        if key not in KEYS:
            raise CredentialsError(f"{where}:{n}: unknown key {key!r} (known: {', '.join(KEYS)})")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[key] = value
    return Credentials(**values, path=path)


def load(
    path: str | os.PathLike[str] | None = None, *, required: bool = True
) -> Credentials | None:
    """Read a credential file.

    With ``path=None`` the default location is used and a missing file is not an
    error (``None`` is returned) unless ``required``.  A file that group or others
    may read is refused with :class:`~jobtap.errors.CredentialsError`.
    """
    p = Path(path).expanduser() if path is not None else default_path()
    try:
        st = p.stat()
    except FileNotFoundError:
        if required:
            raise CredentialsError(f"credential file {p} does not exist") from None
        return None
    except OSError as exc:
        raise CredentialsError(f"cannot read credential file {p}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise CredentialsError(f"credential file {p} is not a regular file")
    if st.st_mode & 0o077:
        raise CredentialsError(
            f"credential file {p} has mode {stat.S_IMODE(st.st_mode):04o}: refused, "
            f"it must be readable by its owner only (chmod 600 {p})"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"cannot read credential file {p}: {exc}") from None
    return parse(text, p)
