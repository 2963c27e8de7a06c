"""What a subscription watches on one site: named jobs, users' jobs, every job,
nodes and queues; and from that, its channels, its streams and its listing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .cache import Cache, Ref
from .connection import Site
from .schema import JOB, NODE, QUEUE


@dataclass
class Target:
    """What a subscription watches on one site."""

    site: Site
    kinds: frozenset[str]
    all_jobs: bool = False
    users: frozenset[str] = frozenset()
    jobs: dict[str, Ref] = field(default_factory=dict)  # object prefix -> job

    @property
    def only_jobs(self) -> bool:
        """Watching named jobs only: the subscription ends after their finals."""
        return self.kinds == {JOB} and not self.all_jobs and not self.users

    def owners(self) -> set[str]:
        """The users of the named jobs."""
        return {ref.user for ref in self.jobs.values() if ref.user is not None}

    def channels(self) -> set[str]:
        """The pub/sub channels carrying this target's events."""
        k = self.site.keys
        return self._names(every_job=k.all_channel, per_user=k.user_channel, nodes=k.nodes_channel)

    def streams(self) -> set[str]:
        """The streams holding this target's events (in its channels' order)."""
        k = self.site.keys
        return self._names(every_job=k.events, per_user=k.user_events, nodes=k.events)

    def _names(self, *, every_job: str, per_user: Callable[[str], str], nodes: str) -> set[str]:
        """Channels and streams come in the same three scopes: the site's jobs,
        the jobs of some users (named jobs: their owners'), nodes and queues."""
        out: set[str] = set()
        if JOB in self.kinds:
            if self.all_jobs:
                out.add(every_job)
            else:
                out.update(per_user(u) for u in self.users | self.owners())
        if NODE in self.kinds or QUEUE in self.kinds:
            out.add(nodes)
        return out

    def ended_since(self, cache: Cache, position: Callable[[str], str | None]) -> list[Ref]:
        """The watched users' jobs that ended at or after the position of their
        stream (``position(stream)``, a stream id; ``None``: not followed): a
        catch-up whose stream was trimmed past its position knows them by this
        alone, when they were submitted and ended while it was behind.  (Every
        job of the site is in the listing already; named jobs are known.)"""
        refs: list[Ref] = []
        if JOB not in self.kinds or self.all_jobs:
            return refs
        for user in sorted(self.users):
            pos = position(self.site.keys.user_events(user))
            if pos is not None:
                ms = int(pos.partition("-")[0])
                refs += [Ref(self.site.name, JOB, jid, user) for jid in cache.ended_since(user, ms)]
        return refs

    def stream_of(self, event: Mapping[str, Any]) -> str:
        """The stream of this target that holds ``event`` (one it wants)."""
        k = self.site.keys
        if event.get("kind", JOB) != JOB or self.all_jobs:
            return k.events
        return k.user_events(str(event.get("user")))

    def wants(self, event: Mapping[str, Any], prefix: str) -> bool:
        kind = event.get("kind", JOB)
        if kind not in self.kinds:
            return False
        if kind != JOB or self.all_jobs:
            return True
        return event.get("user") in self.users or prefix in self.jobs

    def listing(self, cache: Cache) -> list[Ref]:
        """The objects to snapshot: named jobs, live jobs of the users, every job
        of the site, every node and queue."""
        name = self.site.name
        refs: list[Ref] = list(self.jobs.values())
        if JOB in self.kinds:
            if self.all_jobs:
                refs += [Ref(name, JOB, jid, u) for jid, u in cache.owners().items()]
            for user in sorted(self.users):
                refs += [Ref(name, JOB, jid, user) for jid in cache.live_job_ids(user)]
        for kind in (NODE, QUEUE):
            if kind in self.kinds:
                refs += [Ref(name, kind, n) for n in cache.names(kind)]
        return refs
