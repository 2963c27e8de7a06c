"""Was this Redis set up for jobtap before its users were made?

``jobtap acl sync`` on a Redis that nobody set up (deploy/redis/setup.sh) makes
users that vanish when Redis restarts (no ACL file: every poke and every
service login is refused from then on), beside a ``default`` user that lets
anyone in.  :func:`setup_warnings` says so in words an admin can act on,
naming the step that was skipped.

``jobtap acl sync`` prints ``warning: LINE`` for each before it sets the users
(dry run too); deploy/pbs/install-hook.sh runs it.
"""

from __future__ import annotations

from typing import Any

import redis

SET_UP_FIRST = (
    "set Redis up first: deploy/redis/setup.sh (docs/security.md, 'Setting up Redis'; "
    "deploy/pbs/README.md, 'Before you start')"
)


def _s(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_s(v) for v in value]
    return value


def setup_warnings(r: redis.Redis) -> list[str]:
    """What is missing from this Redis' set-up, one line each (none if set up)."""
    out: list[str] = []
    try:
        conf = r.config_get("aclfile")
    except redis.exceptions.ResponseError:  # a managed Redis without CONFIG
        conf = None
    if conf is not None:
        aclfile = _s(conf.get("aclfile", conf.get(b"aclfile", "")))
        if not aclfile:
            out.append(
                "this Redis has no ACL file: the users made now last until it restarts, "
                "and then every service login and every poke is refused; " + SET_UP_FIRST
            )
    default = r.acl_getuser("default")
    flags = _s(default.get("flags", [])) if default else []
    if "on" in flags and "nopass" in flags:
        out.append(
            "this Redis' default user is on without a password: anyone who reaches it "
            "may do anything, whatever the users' rules; " + SET_UP_FIRST
        )
    return out


__all__ = ["SET_UP_FIRST", "setup_warnings"]
