"""``jobtap doctor``: is follow mode working for a site?

Reads what the services leave in Redis and says, one line per check, what is
fine and what is not, the way an admin would look after installing a hook:

- collector: its lock is held (it is alive), its last cycle is recent;
- follow: it runs with ``--follow``;
- pokes arriving: the last poke's age and sources (a scheduler hook, the feed),
  and how many carried a job's end record (Slurm's JobCompLoc, PBS's jobobit hook);
- pokes consumed: a probe poke (an entry naming no job) is read by the
  collector within ``--wait`` seconds, and nothing older lies unread;
- feed: the event feed (Flux's journal) is up, not restarting or failing;
- workers: someone applies the site's chunks, and the queues are not backing up;
- refused: no poke refused by Redis (ACL LOG; the PBS hook's own settings tried);
- job hashes: stored compactly (listpack), which Redis does only when its
  ``hash-max-listpack-value`` holds a job's native record (deploy/redis/jobtap.conf).

Exit status 0 when nothing failed (warnings allowed), 1 otherwise.  The probe
needs a user that may XADD to the poke stream (the writer, ``poker`` or
admin); ``--no-probe`` only reads.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime

import click
import redis

from jobtap.contract import meta as field
from jobtap.contract.chunk import PRIORITIES
from jobtap.keys import POKES_MAXLEN, SiteKeys
from jobtap.packing import PACKED_NATIVE, PRIMED_NATIVE

from . import pokecheck
from .options import connect, connect_queues, queue_redis_option, redis_option, site_option
from .passwords import credentials_option, credentials_site
from .pokecheck import FAIL, OK, WARN

RECENT_S = 600  # pokes counted by source over this many seconds


@dataclass
class Check:
    name: str
    level: str
    message: str


def _age(iso: str | None) -> float | None:
    """Seconds since an ISO-8601 time (None if absent or unreadable)."""
    if not iso:
        return None
    try:
        return time.time() - datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def _entry_time(entry_id: bytes | str) -> float:
    """A stream entry id's time (Redis' clock), in seconds."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0]) / 1000


def _newer(a: str, b: str) -> bool:
    """Whether stream id ``a`` comes after ``b``."""
    ta, _, sa = a.partition("-")
    tb, _, sb = b.partition("-")
    return (int(ta), int(sa or 0)) > (int(tb), int(sb or 0))


def check_collector(r: redis.Redis, keys: SiteKeys, meta: dict[str, str]) -> Check:
    if not meta:
        return Check("collector", FAIL, "no collector has ever written this site")
    holder = r.hget(keys.lease, "holder")  # the lease (jobtap.contract.lease)
    if holder is None:
        return Check("collector", FAIL, f"not running (status {meta.get(field.STATUS, '?')}, "
                     f"stopped at {meta.get(field.STOPPED_AT, '?')})")  # fmt: skip
    host, _, rest = holder.decode().partition(":")
    interval = float(meta.get(field.INTERVAL) or 5)
    age = _age(meta.get(field.LAST_CYCLE_AT))
    where = f"on {host} (pid {rest.split(':')[0]}), backend {meta.get(field.BACKEND, '?')}"
    if age is None:
        return Check("collector", WARN, f"running {where}, no cycle done yet")
    if age > 3 * interval + 30:
        return Check(
            "collector",
            FAIL,
            f"running {where} but its last cycle was {age:.0f} s "
            f"ago (every {interval:g} s); last error: {meta.get(field.LAST_ERROR, '-')}",
        )
    level = OK if meta.get(field.STATUS) == "ok" else WARN
    return Check("collector", level, f"running {where}, last cycle {age:.0f} s ago "
                 f"(status {meta.get(field.STATUS)})")  # fmt: skip


def check_follow(meta: dict[str, str]) -> Check:
    if meta.get(field.FOLLOW) == "1":
        return Check("follow", OK, "the collector runs with --follow")
    return Check("follow", FAIL, "the collector does not run with --follow: pokes are not "
                 "read, changes wait for the next full stat")  # fmt: skip


def check_scheduler(meta: dict[str, str]) -> Check | None:
    """What the collector's backend says of the scheduler and of how it reads
    it (Slurm: the release, the JSON version, the paths in use), when it says."""
    if not meta.get(field.SCHEDULER):
        return None
    paths = meta.get(field.SCHEDULER_PATHS, "")
    level = WARN if "unusable" in paths else OK
    detail = f"{meta[field.SCHEDULER]}; {paths}" if paths else meta[field.SCHEDULER]
    return Check("scheduler", level, detail)


def check_pokes_arriving(r: redis.Redis, keys: SiteKeys) -> Check:
    last = r.xrevrange(keys.pokes, count=1)
    if not last:
        return Check("pokes", WARN, f"no poke has ever reached {keys.pokes}: is the scheduler's "
                     "hook installed (deploy/pbs/install-hook.sh, docs/slurm.md)?")  # fmt: skip
    now_ms = int(time.time() * 1000)
    recent = r.xrange(keys.pokes, min=f"{now_ms - RECENT_S * 1000}-0", count=10_000)
    sources = Counter(
        (f.get(b"source") or b"?").decode(errors="replace")
        for _id, f in recent
        if b"probe" not in f
    )
    # Pokes that carry the job's end record (Slurm's JobCompLoc, PBS's jobobit
    # hook): the collector ships those finals without asking the scheduler.
    carried = sum(1 for _id, f in recent if b"record" in f)
    entry_id, fields = last[0]
    age = time.time() - _entry_time(entry_id)
    source = (fields.get(b"source") or b"?").decode(errors="replace")
    by = ", ".join(f"{n} from {s}" for s, n in sources.most_common(5)) or "none"
    records = f"; {carried} carried an end record" if sources else ""
    return Check("pokes", OK, f"last poke {age:.0f} s ago from {source}; in the last "
                 f"{RECENT_S // 60} min: {by}{records}")  # fmt: skip


def check_pokes_read(r: redis.Redis, keys: SiteKeys, meta: dict[str, str]) -> Check:
    """Nothing older than a few seconds lies unread."""
    last = r.xrevrange(keys.pokes, count=1)
    if not last:
        return Check("pokes read", OK, "nothing to read")
    last_id = last[0][0].decode()
    read = meta.get(field.POKES_READ)
    if read is None or _newer(last_id, read):
        unread = r.xrange(keys.pokes, min=f"({read}" if read else "-", count=10_000)
        oldest = time.time() - _entry_time(unread[0][0]) if unread else 0.0
        if oldest > 5:
            return Check("pokes read", FAIL, f"{len(unread)} pokes unread, the oldest for "
                         f"{oldest:.0f} s: the collector is not reading them")  # fmt: skip
    return Check("pokes read", OK, f"read up to {read}, {meta.get(field.REFRESHES, 0)} refreshes "
                 f"({meta.get(field.REFRESHES_FAILED, 0)} failed)")  # fmt: skip


def probe(r: redis.Redis, keys: SiteKeys, wait: float) -> Check:
    """Send a poke naming no job and wait for the collector to say it read it."""
    token = uuid.uuid4().hex[:12]
    started = time.monotonic()
    try:
        r.xadd(keys.pokes, {"probe": token, "source": "jobtap doctor"}, maxlen=POKES_MAXLEN,
               approximate=True)  # fmt: skip
    except redis.exceptions.NoPermissionError as exc:
        return Check("probe", WARN, f"cannot send a probe poke with this user ({exc})")
    deadline = started + wait
    while time.monotonic() < deadline:
        if r.hget(keys.meta, field.PROBE_SEEN) == token.encode():
            took = (time.monotonic() - started) * 1000
            return Check("probe", OK, f"a probe poke was read by the collector in {took:.0f} ms")
        time.sleep(0.01)
    return Check("probe", FAIL, f"a probe poke was not read within {wait:g} s")


def check_feed(meta: dict[str, str]) -> Check | None:
    if not meta.get(field.FEED):
        return None
    status = meta.get(field.FEED_STATUS, "?")
    detail = f"{meta[field.FEED]} {status}, {meta.get(field.FEED_RESTARTS, 0)} restarts"
    if status == "up":
        return Check("feed", OK, f"{detail}, up since {meta.get(field.FEED_UP_SINCE, '?')}")
    error = meta.get(field.FEED_LAST_ERROR, "-")
    return Check("feed", FAIL if status == "failing" else WARN, f"{detail}; last error: {error}")


def check_workers(q: redis.Redis, keys: SiteKeys) -> Check:
    from rq import Queue, Worker

    queues = [Queue(keys.rq_queue(p), connection=q) for p in PRIORITIES]
    workers = {w.name for queue in queues for w in Worker.all(queue=queue)}
    waiting = sum(queue.count for queue in queues)
    failed = sum(queue.failed_job_registry.get_job_count(cleanup=False) for queue in queues)
    counts = f"{waiting} chunks waiting, {failed} failed"
    if not workers:
        return Check("workers", FAIL, f"no `jobtap worker --site {keys.site}` is running "
                     f"({counts}): nothing is applied")  # fmt: skip
    level = OK if failed == 0 and waiting < 100 else WARN
    return Check("workers", level, f"{len(workers)} running; {counts}")


LISTPACK_VALUE = 8192  # deploy/redis/jobtap.conf's hash-max-listpack-value


def check_job_hashes(r: redis.Redis, keys: SiteKeys, sample: int = 20) -> Check | None:
    """Whether the site's job hashes are listpacks.  Redis stores a hash as a
    hashtable, a third larger (docs/performance.md, "Job hashes as listpacks"),
    once one of its values is longer than ``hash-max-listpack-value`` (64 bytes
    by default; a native record is 1-6 KB).  Looks at a few jobs named by the
    owner index; says nothing when there are none, or when this user may not
    ask (``OBJECT`` refused)."""
    try:
        owners = r.hrandfield(keys.owner, sample, withvalues=True) or []
        pairs = list(zip(owners[::2], owners[1::2], strict=True))
        pipe = r.pipeline(transaction=False)
        for jid, user in pairs:
            key = keys.job(user.decode(), jid.decode())
            pipe.object("encoding", key)
            pipe.hstrlen(key, "native")
            pipe.hstrlen(key, PRIMED_NATIVE)  # a finished job's, packed
            pipe.hstrlen(key, PACKED_NATIVE)  # packed by a worker before native_zd
        replies = pipe.execute()
    except redis.RedisError:  # OBJECT or HRANDFIELD refused to this user, or not routed
        return None
    found = [
        (enc, max(plain, primed, packed))
        for enc, plain, primed, packed in zip(
            replies[::4], replies[1::4], replies[2::4], replies[3::4], strict=True
        )
        if enc is not None
    ]
    if not found:
        return None
    tables = [size for enc, size in found if enc in (b"hashtable", "hashtable")]
    if not tables:
        return Check("hashes", OK, f"job hashes are listpacks ({len(found)} looked at)")
    largest = max(tables)
    advice = (
        f"set hash-max-listpack-value {LISTPACK_VALUE} (deploy/redis/jobtap.conf; a third "
        "less memory for job hashes; existing hashes convert when Redis restarts)"
        if largest <= LISTPACK_VALUE
        else f"a native record of {largest} bytes: raise hash-max-listpack-value above it"
    )
    return Check(
        "hashes",
        WARN,
        f"{len(tables)} of {len(found)} job hashes looked at are hashtables: {advice}",
    )


def run_checks(
    r: redis.Redis, q: redis.Redis, site: str, *, send_probe: bool, wait: float
) -> list[Check]:
    keys = SiteKeys(site)
    meta = {k.decode(): v.decode() for k, v in r.hgetall(keys.meta).items()}
    checks = [check_collector(r, keys, meta), check_follow(meta), check_pokes_arriving(r, keys),
              check_pokes_read(r, keys, meta)]  # fmt: skip
    alive = checks[0].level != FAIL and checks[1].level != FAIL
    if send_probe and alive:
        checks.append(probe(r, keys, wait))
    for extra in (check_scheduler(meta), check_feed(meta)):
        if extra is not None:
            checks.append(extra)
    checks.append(check_workers(q, keys))
    hashes = check_job_hashes(r, keys)
    if hashes is not None:
        checks.append(hashes)
    return checks


@click.command()
@redis_option
@site_option
@queue_redis_option
@click.option(
    "--probe/--no-probe",
    "send_probe",
    default=True,
    show_default=True,
    help="Send a poke naming no job and wait for the collector to read it.",
)
@click.option(
    "--wait", type=float, default=5.0, show_default=True, help="Seconds to wait for the probe."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")  # fmt: skip
@credentials_option
@pokecheck.options
def doctor(redis_url, site, queue_redis, send_probe, wait, as_json, admin_redis, hook_settings):
    """Is follow mode working for SITE: collector alive, pokes arriving and
    being consumed (and none refused by Redis), the event feed up, workers
    applying?"""
    site = credentials_site(click.get_current_context(), site)
    r = connect(redis_url)
    q = connect_queues(queue_redis, r)
    checks = run_checks(r, q, site, send_probe=send_probe, wait=wait)
    checks += [
        Check(*c)
        for c in pokecheck.poke_checks(r, site, admin_url=admin_redis, hook_settings=hook_settings)
    ]
    if as_json:
        import orjson

        click.echo(orjson.dumps([asdict(c) for c in checks], option=orjson.OPT_INDENT_2))
    else:
        colour = {OK: "green", WARN: "yellow", FAIL: "red"}
        for c in checks:
            level = click.style(f"{c.level:<4}", fg=colour[c.level], bold=c.level == FAIL)
            click.echo(f"{level}  {c.name:<10}  {c.message}")
    if any(c.level == FAIL for c in checks):
        raise SystemExit(1)
