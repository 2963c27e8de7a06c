"""Event ids as the workers write them: ``SITE:EPOCH:...`` with the site's epoch
in force (read from ``meta``)."""

from __future__ import annotations

import redis

from jobtap.events import event_id
from jobtap.keys import SiteKeys
from jobtap.schema import JOB


def current_epoch(r: redis.Redis, site: str) -> str:
    epoch = r.hget(SiteKeys(site).meta, "epoch")
    assert epoch is not None, f"site {site} has no epoch: nothing was written"
    return epoch.decode() if isinstance(epoch, bytes) else epoch


def eid(r: redis.Redis, site: str, object_id: str, version: int, kind: str = JOB) -> str:
    """The id of ``version`` of an object in the site's current epoch."""
    return event_id(site, current_epoch(r, site), kind, object_id, version)
