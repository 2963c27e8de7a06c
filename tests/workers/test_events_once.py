"""A job's event is stored once: in its user's stream, the site stream's entry of
the same id naming that stream (workers/apply.lua, jobtap.entries)."""

from __future__ import annotations

import orjson

from jobtap.contract.chunk import Chunk
from jobtap.entries import EVENT, STREAM, holder, resolve, xrange_events
from jobtap.keys import SiteKeys
from jobtap.workers.apply import Applier, Settings
from sim.rig.records import job_record, node_record

SITE = "t1"
K = SiteKeys(SITE)


def chunk(cycle, items, kind="job"):
    return Chunk(SITE, cycle, f"2026-11-21T15:00:{cycle:02d}+00:00", kind, items)


def up(rec):
    return {"op": "upsert", "id": rec["id"], "fp": "fp", "state": rec["state"], "record": rec}


def job(jid="1.pbs", user="alice", state="queued", **extra):
    return job_record(jid, user, state, SITE, **extra)


def test_the_site_stream_names_the_users_stream_that_holds_a_jobs_event(r):
    a = Applier(r)
    a.apply(chunk(1, [up(job()), up(job("2.pbs", user="bob"))]))
    a.apply(chunk(2, [up(job(state="running"))]))
    site = r.xrange(K.events)
    assert [set(f) for _, f in site] == [{b"id", b"type", STREAM}] * 3  # no event in it
    assert [f[STREAM].decode() for _, f in site] == [
        K.user_events("alice"), K.user_events("bob"), K.user_events("alice"),
    ]  # fmt: skip
    # each user's stream holds the event at the site entry's id, with its id and type
    alice = r.xrange(K.user_events("alice"))
    assert [sid for sid, _ in alice] == [site[0][0], site[2][0]]
    assert [(f[b"id"], f[b"type"]) for _, f in alice] == [
        (site[0][1][b"id"], b"new"), (site[2][1][b"id"], b"state")
    ]  # fmt: skip
    assert orjson.loads(alice[1][1][EVENT])["record"]["state"] == "running"
    # what a site stream's reader gets: every event, whole, in the site's order
    got = xrange_events(r, K.events)
    assert [sid.encode() for sid, _ in got] == [sid for sid, _ in site]
    assert [orjson.loads(f[EVENT])["object_id"] for _, f in got] == ["1.pbs", "2.pbs", "1.pbs"]


def test_a_nodes_event_stays_whole_in_the_site_stream(r):
    Applier(r).apply(chunk(1, [up(node_record("n1", "free", SITE))], kind="node"))
    [(_, fields)] = r.xrange(K.events)
    assert EVENT in fields and holder(fields) is None


def test_copied_events_are_whole_in_both_streams(r):
    a = Applier(r, Settings(store_events_once=False))
    a.apply(chunk(1, [up(job())]))
    [(_, site)] = r.xrange(K.events)
    [(_, user)] = r.xrange(K.user_events("alice"))
    assert STREAM not in site and site == user


def test_a_site_stream_of_both_forms_reads_whole(r):
    """A site upgrading its workers: the entries written before name nothing, the
    ones after name their stream; a reader gets both whole, in order."""
    Applier(r, Settings(store_events_once=False)).apply(chunk(1, [up(job())]))
    Applier(r).apply(chunk(2, [up(job(state="running"))]))
    got = xrange_events(r, K.events)
    assert [orjson.loads(f[EVENT])["version"] for _, f in got] == [1, 2]


def test_a_users_stream_keeps_every_event_the_site_stream_names(r):
    """user_maxlen cuts only copies: a user's stream that the site stream names
    is bounded by the site stream's window, or the site stream would name
    events that are gone."""
    a = Applier(r, Settings(user_maxlen=5, site_maxlen=10_000))
    for cycle in range(1, 13):
        a.apply(chunk(cycle, [up(job(f"{cycle}.{i}")) for i in range(10)]))
    assert r.xlen(K.events) == 120 and r.xlen(K.user_events("alice")) == 120
    assert all(f for _, f in xrange_events(r, K.events))


def test_a_users_stream_ahead_of_the_site_stream_gets_the_event_whole(r):
    """Only a hand-made entry (or a site stream deleted alone) puts a user's
    stream ahead of the site's; the event is then written whole into both, and
    nothing is lost or named that is not there."""
    a = Applier(r)
    a.apply(chunk(1, [up(job())]))
    r.xadd(K.user_events("alice"), {"note": "by hand"}, id="99999999999999-0")
    a.apply(chunk(2, [up(job(state="running"))]))
    site = r.xrange(K.events)
    assert len(site) == 2 and STREAM in site[0][1] and EVENT in site[1][1]
    assert orjson.loads(site[1][1][EVENT])["record"]["state"] == "running"
    user = r.xrange(K.user_events("alice"))
    assert orjson.loads(user[-1][1][EVENT])["record"]["state"] == "running"


def test_an_entry_whose_event_is_gone_reads_as_none(r):
    Applier(r).apply(chunk(1, [up(job()), up(job("2.pbs", user="bob"))]))
    r.delete(K.user_events("alice"))
    site = [(sid.decode(), f) for sid, f in r.xrange(K.events)]
    got = resolve(r, site)
    assert got[0] == (site[0][0], None)
    assert orjson.loads(got[1][1][EVENT])["object_id"] == "2.pbs"


def test_any_selection_of_entries_resolves_to_its_own_events(r):
    """A run of the site stream (read in order, either way) is resolved with one
    XRANGE per named stream; a selection that is not a run (a consumer's
    pending or claimed entries) entry by entry: each gets its own event."""
    a = Applier(r)
    users = ["alice", "bob", "carol"]
    for cycle in range(1, 5):
        a.apply(chunk(cycle, [up(job(f"{cycle}.{u}", user=u)) for u in users]))
    site = [(sid.decode(), f) for sid, f in r.xrange(K.events)]
    runs = [(site, True), (site[3:7], True), (site[::-1], True)]
    others = [(site[::2], False), (site[1::3], False), (site[::-3], False)]
    for picked, run in runs + others:
        got = resolve(r, picked, run=run)
        assert [sid for sid, _ in got] == [sid for sid, _ in picked]
        for (_, named), (_, fields) in zip(picked, got, strict=True):
            assert fields is not None and fields[b"id"] == named[b"id"]
            event = orjson.loads(fields[EVENT])
            assert K.user_events(event["user"]).encode() == named[STREAM]
