"""Which Redis each site uses, and URLs fit for messages.

Resolution order, first found wins:

- URL: the argument, ``$JOBTAP_REDIS``, the credential file's ``url``,
  ``redis://127.0.0.1:6379/0``;
- site: the argument, ``$JOBTAP_SITE``, the credential file's ``site``, ``default``;
- user name and password: the arguments, the credential file (read only when
  neither was given, or when ``credentials=`` names a file), the URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from . import credentials as creds_mod
from .errors import ConfigError
from .keys import BadName, SiteKeys

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_SITE = "default"


@dataclass(frozen=True)
class SiteConfig:
    site: str
    url: str
    username: str | None = None
    password: str | None = None

    @property
    def server(self) -> tuple[str, str | None, str | None]:
        """Sites with equal ``server`` share connections (and one pub/sub link)."""
        return (self.url, self.username, self.password)


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<bad url>"
    if "sentinel_password=" in parts.query:  # a Sentinel URL's second password
        query = re.sub(r"(^|&)(sentinel_password=)[^&]*", r"\1\2***", parts.query)
        parts = parts._replace(query=query)
        url = urlunsplit(parts)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def resolve(
    redis_url: str | None = None,
    *,
    site: str | None = None,
    username: str | None = None,
    password: str | None = None,
    credentials: str | os.PathLike[str] | None = None,
    sites: Mapping[str, Any] | None = None,
) -> tuple[list[SiteConfig], str]:
    """Work out every site's connection settings; return them and the default site.

    ``sites`` maps a site name to ``None`` (use the client's URL), a URL, or a
    mapping with ``url``, ``username`` and ``password``.
    """
    cred = None
    if credentials is not None or (username is None and password is None):
        cred = creds_mod.load(credentials, required=credentials is not None)
    url = redis_url or os.environ.get("JOBTAP_REDIS") or (cred and cred.url) or DEFAULT_URL
    user = username if username is not None else (cred.username if cred else None)
    pw = password if password is not None else (cred.password if cred else None)
    default_site = site or os.environ.get("JOBTAP_SITE") or (cred and cred.site) or DEFAULT_SITE
    configs: list[SiteConfig] = []
    if sites:
        for name, spec in sites.items():
            if spec is None:
                configs.append(SiteConfig(name, url, user, pw))
            elif isinstance(spec, str):
                configs.append(SiteConfig(name, spec, user, pw))
            elif isinstance(spec, Mapping):
                unknown = set(spec) - {"url", "username", "password"}
                if unknown:
                    raise ConfigError(f"site {name!r}: unknown settings {sorted(unknown)}")
                configs.append(
                    SiteConfig(
                        name,
                        spec.get("url") or url,
                        spec.get("username", user),
                        spec.get("password", pw),
                    )
                )
            else:
                raise ConfigError(f"site {name!r}: expected a URL or a mapping, not {spec!r}")
        if site is None:
            default_site = configs[0].site
        elif site not in {c.site for c in configs}:
            raise ConfigError(f"site {site!r} is not one of {[c.site for c in configs]}")
    else:
        configs.append(SiteConfig(default_site, url, user, pw))
    for c in configs:
        try:
            SiteKeys(c.site)
        except BadName as exc:
            raise ConfigError(str(exc)) from None
        if not c.url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigError(f"not a Redis URL: {safe_url(c.url)!r}")
    return configs, default_site
