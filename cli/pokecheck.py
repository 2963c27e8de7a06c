"""Are a site's pokes refused?  Checks for ``jobtap doctor``.

A hook must never hold the scheduler up, so it swallows a refused poke: when
``poker`` may not append to the site's poke stream (its ACL names another
site), every poke is lost without a word and the collector falls back to its
full stats.  Redis remembers the refusals in ``ACL LOG`` (reason ``key``, object
``jobtap:{S}:pokes``, user ``poker``; reason ``auth`` for a wrong password).

- :func:`check_acl_log` reads ``ACL LOG`` (an admin's connection; the writer
  may not) and fails when recent pokes to the site were refused.
- :func:`check_hook_settings` tries, with the PBS hook's own settings
  (``/etc/jobtap/pbs-hook.json``, on the PBS server), whether Redis would take
  a poke: ``XADD STREAM 0-0`` passes the ACL check or not, then fails without
  writing anything.  It needs no admin.

Both return ``(name, level, message)`` with doctor's levels (``ok``, ``warn``,
``FAIL``), or ``None`` when there is nothing to say.  Wiring (cli/doctor.py):
``checks += [Check(*c) for c in poke_checks(r, site, admin_url=..., hook_settings=...)]``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import redis

from jobtap.connection import redis_from_url
from jobtap.keys import SiteKeys
from jobtap.urls import safe_url

OK, WARN, FAIL = "ok", "warn", "FAIL"
NAME = "refused"
RECENT_S = 600  # refusals younger than this count
HOOK_SETTINGS = Path("/etc/jobtap/pbs-hook.json")
POKER = "poker"

Result = tuple[str, str, str]
F = TypeVar("F", bound=Callable[..., Any])


def _s(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _entries(r: redis.Redis) -> tuple[list[dict[str, str]], float]:
    """``ACL LOG 128`` as dicts of strings (whatever reply parser is in use), and
    the server's clock when it answered (``TIME`` in the same round trip: an
    entry's ``age-seconds`` counts from then)."""
    pipe = r.pipeline(transaction=False)
    pipe.execute_command("ACL", "LOG", "128")
    pipe.time()
    raw, (secs, micros) = pipe.execute()
    out: list[dict[str, str]] = []
    for entry in raw or []:
        pairs: list[tuple[Any, Any]] = (
            list(entry.items())
            if isinstance(entry, dict)
            else list(zip(entry[::2], entry[1::2], strict=False))  # a flat [k, v, ...] list
        )
        out.append({_s(k): _s(v) for k, v in pairs})
    return out, secs + micros / 1e6


def refusals(entries: list[dict[str, str]], site: str) -> list[dict[str, str]]:
    """The entries that are pokes of ``site`` refused: the poke stream's key
    refused to anyone, XADD refused to poker, poker's password refused."""
    pokes = SiteKeys(site).pokes
    found = []
    for e in entries:
        reason, obj, user = e.get("reason"), e.get("object", ""), e.get("username")
        if (
            (reason == "key" and obj == pokes)
            or (reason == "command" and user == POKER and obj.lower() == "xadd")
            or (reason == "auth" and user == POKER)
        ):
            found.append(e)
    return found


def _last_poke_at(r: redis.Redis, site: str) -> float | None:
    """When the newest poke of ``site`` arrived, by the server's clock (its id)."""
    last = r.xrevrange(SiteKeys(site).pokes, count=1)
    if not last:
        return None
    return int(_s(last[0][0]).partition("-")[0]) / 1000


def _last_poke_age(r: redis.Redis, site: str) -> float | None:
    at = _last_poke_at(r, site)
    if at is None:
        return None
    secs, micros = r.time()
    return secs + micros / 1e6 - at


def check_acl_log(r: redis.Redis, site: str, *, admin: bool = False) -> Result | None:
    """Recent refused pokes of ``site`` in ``ACL LOG``.  Without ACL rights
    (``admin=False``: the doctor's own user) a refusal to read is a warning only
    when no poke arrived lately (then they may well be refused)."""
    try:
        entries, server_now = _entries(r)
    except redis.exceptions.NoPermissionError:
        age = _last_poke_age(r, site)
        if admin or age is None or age > RECENT_S:
            return (NAME, WARN, "this user may not read ACL LOG, so refused pokes cannot be "
                    "seen: give the Redis admin (--admin-redis, $JOBTAP_ADMIN_REDIS)")  # fmt: skip
        return None
    found = [e for e in refusals(entries, site) if float(e.get("age-seconds") or 0) < RECENT_S]
    if not found:
        return (NAME, OK, f"no poke to site {site} refused in the last {RECENT_S // 60} min "
                "(ACL LOG)")  # fmt: skip
    count = sum(int(e.get("count") or 1) for e in found)
    newest = min(found, key=lambda e: float(e.get("age-seconds") or 0))
    ago = float(newest.get("age-seconds") or 0)
    who = newest.get("username", "?")
    if newest.get("reason") == "auth":
        why = f"user {who}'s password was refused (the hook's settings hold an old one?)"
    elif newest.get("reason") == "command":
        why = f"user {who} may not run XADD"
    else:
        why = f"user {who} may not append to {newest.get('object')}"
    fix = (
        f"run deploy/pbs/install-hook.sh --site {site} again with the Redis admin, or "
        f"`jobtap acl sync --site {site}` naming every site of this Redis"
    )
    level = FAIL
    poked_at = _last_poke_at(r, site)  # both on the server's clock: no client delay between
    if poked_at is not None and poked_at >= int((server_now - ago) * 1000) / 1000:
        level = WARN  # pokes arrive again since the last refusal
    return (NAME, level, f"{count} pokes refused by Redis in the last {RECENT_S // 60} min, "
            f"the last {ago:.0f} s ago: {why}; {fix}")  # fmt: skip


def check_hook_settings(path: str | os.PathLike[str], site: str) -> Result | None:
    """Would Redis take a poke from the PBS hook as it is set up (its settings
    file)?  ``None`` if there is no such file here (not the PBS server)."""
    p = Path(path)
    try:
        settings = json.loads(p.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return ("pbs hook", WARN, f"cannot read the hook's settings {p}: {exc}")
    name = "pbs hook"
    if settings.get("site") != site:
        return (name, FAIL, f"the PBS hook ({p}) pokes site {settings.get('site')!r}, not "
                f"{site!r}: run deploy/pbs/install-hook.sh --site {site}")  # fmt: skip
    url, stream = settings.get("redis", ""), settings.get("stream") or SiteKeys(site).pokes
    try:
        r = redis_from_url(url, socket_connect_timeout=5, socket_timeout=5)
        try:
            r.xadd(stream, {"check": "1"}, id="0-0")
        finally:
            r.close()
    except redis.exceptions.NoPermissionError as exc:
        return (name, FAIL, f"Redis refuses the hook's pokes ({safe_url(url)} to {stream}: "
                f"{exc}): every poke is lost; run deploy/pbs/install-hook.sh --site {site} "
                "again with the Redis admin")  # fmt: skip
    except redis.exceptions.AuthenticationError as exc:
        return (name, FAIL, f"Redis refuses the hook's login ({safe_url(url)}: {exc}): every "
                "poke is lost; run deploy/pbs/install-hook.sh again")  # fmt: skip
    except redis.exceptions.ResponseError as exc:
        if "0-0" not in str(exc):
            return (name, FAIL, f"Redis refuses the hook's pokes to {stream}: {exc}")
    except (redis.RedisError, ValueError) as exc:
        return (name, FAIL, f"the hook cannot reach Redis at {safe_url(url)}: {exc}")
    return (name, OK, f"Redis takes the hook's pokes ({safe_url(url)}, {stream})")


def options(f: F) -> F:
    """``--admin-redis URL`` (env JOBTAP_ADMIN_REDIS) and ``--hook-settings FILE``
    for ``jobtap doctor``: passed on as ``admin_redis`` and ``hook_settings``."""
    f = click.option(
        "--admin-redis",
        envvar="JOBTAP_ADMIN_REDIS",
        default=None,
        help="A Redis admin's URL (env JOBTAP_ADMIN_REDIS), to read refused pokes in ACL LOG.",
    )(f)
    return click.option(
        "--hook-settings",
        type=click.Path(dir_okay=False),
        default=str(HOOK_SETTINGS),
        show_default=True,
        help="The PBS hook's settings, if on this host: does Redis take its pokes?",
    )(f)


def poke_checks(
    r: redis.Redis,
    site: str,
    *,
    admin_url: str | None = None,
    hook_settings: str | os.PathLike[str] | None = HOOK_SETTINGS,
) -> list[Result]:
    """The checks above: the hook's settings if present here, ``ACL LOG`` as the
    admin (``admin_url``) or else as ``r``'s user."""
    out: list[Result] = []
    if hook_settings is not None:
        hook = check_hook_settings(hook_settings, site)
        if hook is not None:
            out.append(hook)
    if admin_url:
        try:
            admin = redis_from_url(admin_url, socket_connect_timeout=5)
            try:
                log = check_acl_log(admin, site, admin=True)
            finally:
                admin.close()
        except (redis.RedisError, ValueError) as exc:  # ValueError: a bad URL (ConfigError)
            log = (NAME, WARN, f"cannot read ACL LOG at {safe_url(admin_url)}: {exc}")
    else:
        log = check_acl_log(r, site)
    if log is not None:
        out.append(log)
    return out


__all__ = ["check_acl_log", "check_hook_settings", "options", "poke_checks", "refusals"]
