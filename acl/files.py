"""Credential files that `jobtap acl grant` writes for users and services (mode
0600, owned by the user, put in place atomically) and `revoke` removes."""

from __future__ import annotations

import os
import pwd
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path


def credentials_text(url: str, user: str, password: str, site: str) -> str:
    """A credential file in the format of :mod:`jobtap.credentials`.  Values are
    quoted: the parser strips one pair of quotes, so a user name that itself
    starts and ends with a quote survives."""
    lines = [
        f"# jobtap credentials for {user} (written by `jobtap acl grant`; keep mode 0600)",
        f'url = "{url}"',
        f'username = "{user}"',
        f'password = "{password}"',
        f'site = "{site}"',
    ]
    return "\n".join(lines) + "\n"


def system_account(user: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(user)
    except (KeyError, UnicodeEncodeError, ValueError):
        return None


DEFAULT_PARTS = (".config", "jobtap", "credentials")


def default_credentials_path(user: str) -> Path:
    """``~USER/.config/jobtap/credentials`` (the SDK's default location)."""
    account = system_account(user)
    if account is None:
        raise FileNotFoundError(f"{user!r} has no system account: pass --output PATH")
    return Path(account.pw_dir, *DEFAULT_PARTS)


class PendingFile:
    """A credential file written next to its destination (mode 0600, owned by
    ``owner`` if given) and put in place by :meth:`commit`, so that a grant
    that fails half-way leaves the old file (and the old password) working."""

    def __init__(self, dir_fd: int, name: str, text: str, owner: tuple[int, int] | None):
        self.dir_fd = dir_fd
        self.name = name
        self.tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(f"{name!r} is a directory")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.tmp, flags, 0o600, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o600)
            if owner is not None:
                os.fchown(fd, *owner)
            os.write(fd, text.encode())
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(self.tmp, dir_fd=dir_fd)
            raise
        os.close(fd)

    def commit(self) -> None:
        try:
            os.replace(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        except BaseException:
            self.discard()
            raise
        os.close(self.dir_fd)

    def discard(self) -> None:
        try:
            os.unlink(self.tmp, dir_fd=self.dir_fd)
        except FileNotFoundError:
            pass
        os.close(self.dir_fd)


def _walk(base: Path, parts: Sequence[str], *, create: bool, owner: tuple[int, int] | None) -> int:
    """Open ``base/parts...`` as a directory without following symlinks below
    ``base`` (a user owns the directories in their home: root must not be led
    elsewhere), creating missing ones (mode 0700, owned by ``owner``)."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                nfd = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o700, dir_fd=fd)
                nfd = os.open(part, flags, dir_fd=fd)
                if owner is not None:
                    os.fchown(nfd, *owner)
            except OSError as exc:
                raise OSError(exc.errno, f"{part!r} under {base} is not a plain directory") from exc
            os.close(fd)
            fd = nfd
            if owner is not None and os.fstat(fd).st_uid not in (0, owner[0]):
                raise PermissionError(f"{part!r} under {base} belongs to another user")
        return fd
    except BaseException:
        os.close(fd)
        raise


def owner_of(user: str) -> tuple[int, int] | None:
    """(uid, gid) to give the user's file when running as root, else None."""
    if os.geteuid() != 0:
        return None
    account = system_account(user)
    return (account.pw_uid, account.pw_gid) if account else None


def prepare_credentials(user: str, text: str, output: Path | None) -> tuple[PendingFile, Path]:
    """Write the credential file next to where it goes (see :class:`PendingFile`).

    Default place: ``~USER/.config/jobtap/credentials`` (directories created mode
    0700; when root, everything owned by the user and no symlink followed inside
    the home).  ``output``: that path instead (its directory is created if needed)."""
    owner = owner_of(user)
    if output is None:
        path = default_credentials_path(user)
        home = path.parents[len(DEFAULT_PARTS) - 1]
        dir_fd = _walk(home, DEFAULT_PARTS[:-1], create=True, owner=owner)
    else:
        path = Path(output).expanduser().absolute()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        dir_fd = _walk(path.parent, (), create=False, owner=None)
    try:
        return PendingFile(dir_fd, path.name, text, owner), path
    except BaseException:
        os.close(dir_fd)
        raise


def remove_credentials(user: str, output: Path | None) -> Path | None:
    """Delete the user's credential file (default place, or ``output``); return its
    path, or None if there was none."""
    if output is None:
        try:
            path = default_credentials_path(user)
        except FileNotFoundError:
            return None
        home = path.parents[len(DEFAULT_PARTS) - 1]
        try:
            dir_fd = _walk(home, DEFAULT_PARTS[:-1], create=False, owner=None)
        except FileNotFoundError:
            return None
    else:
        path = Path(output).expanduser().absolute()
        try:
            dir_fd = _walk(path.parent, (), create=False, owner=None)
        except FileNotFoundError:
            return None
    try:
        os.unlink(path.name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    finally:
        os.close(dir_fd)
    return path


def write_secret(path: Path, secret: str) -> None:
    """A service user's password file (mode 0600, created or replaced)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    dir_fd = _walk(path.parent, (), create=False, owner=None)
    try:
        pending = PendingFile(dir_fd, path.name, secret + "\n", None)
    except BaseException:
        os.close(dir_fd)
        raise
    pending.commit()
