"""The Slurm backend's probe and targeted-stat parsers against output captured
from a real Slurm 22.05.8 (tests/fixtures/slurm/probe/README.md says how) and,
for the state probe, 24.11.5 (tests/fixtures/slurm/24.11/README.md), and what
they refuse."""

from __future__ import annotations

import pytest

from jobtap.collector.backends.base import StatError
from jobtap.collector.backends.slurm import (
    PROBE_FIELDS,
    STATE_PROBE_FIELDS,
    SlurmBackend,
    document_format,
    parse_probe,
    parse_squeue,
    squeue_jobs,
)
from jobtap.collector.backends.slurm import rest as slurm_rest
from sim.rig.paths import fixtures_dir

DATA = fixtures_dir() / "slurm" / "probe"


def test_probe_lines_are_keyed_like_squeue_json():
    named = parse_probe((DATA / "probe.txt").read_bytes())
    # plain jobs, a split array task under its array id, pending tasks one by one
    assert set(named) == {"2195", "2200_1", "2200_2", "2200_3", "2200_4", "2207", "2204",
                          "2205_1", "2205_2", "2205_3", "2206"}  # fmt: skip
    assert named["2205_1"].startswith("RUNNING|None|")  # its own line, not the pending one
    assert named["2205_2"] == named["2205_3"] and named["2205_2"].startswith("PENDING|")
    assert named["2207"].startswith("FAILED|NonZeroExitCode|")
    assert "2208" not in named  # the task's own job number is not one of its ids


def test_a_probe_line_that_moved_has_another_signature():
    line = (DATA / "probe.txt").read_text().splitlines()[4]  # 2204, held
    released = line.replace("PENDING|JobHeldUser|0|", "PENDING|Priority|4294901580|")
    assert parse_probe(line)["2204"] != parse_probe(released)["2204"]


@pytest.mark.parametrize(
    "garbage",
    [
        "slurm_load_jobs error: Unable to contact slurm controller",
        "2204|2204|N/A|PENDING",  # too few fields
        "x|2204|N/A" + "|z" * (len(PROBE_FIELDS) - 3),  # not a job number
        "<html>" + "|" * (len(PROBE_FIELDS) - 1),
    ],
)
def test_a_garbled_probe_is_a_failed_stat(garbage):
    good = (DATA / "probe.txt").read_text()
    with pytest.raises(StatError, match="not a job"):
        parse_probe(good + garbage + "\n")


def test_an_empty_probe_lists_no_job():
    assert parse_probe(b"") == {}


def test_slurmrestd_answers_up_to_the_one_that_closes_the_connection():
    got = slurm_rest.answers((DATA / "slurmrestd-job-answers.http").read_bytes())
    assert [status for status, _ in got] == [200, 500]
    (status, doc), (bad_status, bad) = got
    fmt = document_format(doc, "slurmrestd")
    assert fmt.version == "v0.0.38"
    jobs = squeue_jobs(doc, fmt, "slurmrestd")
    assert list(jobs) == ["2207"] and jobs["2207"]["job_state"] == "FAILED"
    assert slurm_rest.unknown_job(bad_status, bad) and not slurm_rest.unknown_job(status, doc)


@pytest.mark.parametrize(
    "raw",
    [
        b"slurmrestd: fatal: slurmrestd should not be run as the root user.\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}",  # cut short
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",  # not JSON
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{}",  # no length
    ],
)
def test_slurmrestd_garbage_is_a_failed_stat(raw):
    with pytest.raises(StatError, match="slurmrestd"):
        slurm_rest.answers(raw)


def test_requests_are_pipelined_in_order():
    raw = slurm_rest.requests("v0.0.38", ["12", "13"])
    assert raw.count(b"GET /slurm/v0.0.38/job/") == 2
    assert raw.index(b"/job/12 ") < raw.index(b"/job/13 ")


@pytest.mark.parametrize(
    ("version", "query"),
    [("v0.0.38", b""), ("v0.0.39", b""), ("v0.0.40", b"?flags=ALL&flags=DETAIL&flags=LOCAL"),
     ("v0.0.44", b"?flags=ALL&flags=DETAIL&flags=LOCAL")],
)  # fmt: skip
def test_single_reads_say_local_where_slurmrestd_takes_show_flags(version, query):
    """From v0.0.40 (23.11) a single read asks with squeue --json --local's show
    flags: slurmctld answers the same record without a REQUEST_FED_INFO first
    (seen on 24.11.5: docs/performance.md); 22.05's and 23.02's plugins take no
    flags."""
    fmt = document_format({"meta": {"plugin": {"data_parser": f"data_parser/{version}"}}}, "t")
    raw = slurm_rest.requests(fmt.version, ["12"], fmt.rest_query)
    assert raw.startswith(b"GET /slurm/%s/job/12%s HTTP/1.1\r\n" % (version.encode(), query))


def test_without_slurmrestd_a_targeted_stat_is_one_listing(tmp_path):
    """slurmrestd missing: the backend says so once and lists every job instead
    (squeue here is a script that prints a captured squeue --json)."""
    squeue = tmp_path / "squeue"
    fixture = fixtures_dir() / "slurm" / "squeue-mixed.json"
    squeue.write_text(f"#!/bin/sh\ncat {fixture}\n")
    squeue.chmod(0o755)
    backend = SlurmBackend(squeue=str(squeue), slurmrestd=str(tmp_path / "no-slurmrestd"),
                           sacct=str(tmp_path / "no-sacct"))  # fmt: skip
    listed = backend.stat_jobs()
    some = sorted(listed)[:2]
    before = backend.cost.commands
    assert backend.stat_some(some) == {j: listed[j] for j in some}
    assert backend.cost.commands - before == 2  # env slurmrestd (not found) + squeue --json
    assert backend.stat_some(some) == {j: listed[j] for j in some}
    assert backend.cost.commands - before == 3  # noted once: now straight to squeue --json


def test_a_slurmrestd_that_refuses_to_run_here_makes_single_reads_listings(tmp_path):
    """25.05 and later refuse SLURMRESTD_SECURITY=disable_user_check (what root
    needs) with a fatal: the backend notes why once, lists instead, and says so
    in what it describes of itself (jobtap status, doctor)."""
    refused = fixtures_dir() / "slurm" / "25.11" / "rest" / "root-disable-user-check-refused.txt"
    fatal = next(line for line in refused.read_text().splitlines() if "fatal:" in line)
    rest = tmp_path / "slurmrestd"
    rest.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{fatal}' >&2\nexit 134\n")
    rest.chmod(0o755)
    squeue = tmp_path / "squeue"
    listing = fixtures_dir() / "slurm" / "25.11" / "squeue-1-active.json"
    squeue.write_text(f"#!/bin/sh\ncat {listing}\n")
    squeue.chmod(0o755)
    backend = SlurmBackend(squeue=str(squeue), slurmrestd=str(rest), sacct=str(tmp_path / "no"))
    listed = backend.stat_jobs()
    some = sorted(listed)[:2]
    assert backend.reads_singly()
    assert backend.stat_some(some) == {j: listed[j] for j in some}
    assert not backend.reads_singly()
    paths = backend.describe()["scheduler_paths"]
    assert "slurmrestd unusable: fatal: SLURMRESTD_SECURITY=disable_user_check" in paths
    assert backend.describe()["scheduler"] == "Slurm 25.11.7, JSON v0.0.44"


def test_single_reads_never_change_the_jobs_a_cycle_iterates(tmp_path):
    """Follow mode reads poked jobs one by one beside a cycle, and the cycle
    iterates the last listing's jobs to count them per partition and node: an
    update in place raised "dictionary changed size during iteration" in the
    cycle and stopped the collector (bench.slurm_churn on 24.11).  A single read
    now replaces what the backend holds, leaving the dict being iterated as it was."""
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat {fixtures_dir() / 'slurm' / 'squeue-mixed.json'}\n")
    squeue.chmod(0o755)
    backend = SlurmBackend(squeue=str(squeue), slurmrestd=str(tmp_path / "no-slurmrestd"),
                           sacct=str(tmp_path / "no-sacct"))  # fmt: skip
    listed = backend.stat_jobs()
    iterated = backend._last_jobs
    assert iterated is not None
    held = dict(iterated)
    backend.stat_some(sorted(listed)[:2])
    assert iterated == held and backend._last_jobs is not iterated
    assert backend._last_jobs == {**held, **{j: listed[j] for j in sorted(listed)[:2]}}


STATE_DATA = fixtures_dir() / "slurm" / "24.11"
REFUSED = fixtures_dir() / "slurm" / "22.05" / "squeue-only-job-state-1-active.json.err"


def test_the_state_probe_names_the_jobs_squeue_json_lists_with_their_states():
    """``squeue --only-job-state`` on 24.11 (an array with split-off tasks, one
    with a throttled pending part, a heterogeneous job, held and pending jobs):
    the same ids as the listing and the line probe of the same moment, each
    signed with the job's state."""
    states = parse_probe((STATE_DATA / "squeue-state-probe.txt").read_bytes(), STATE_PROBE_FIELDS)
    lines = parse_probe((STATE_DATA / "squeue-state-probe-lines.txt").read_bytes())
    listed = parse_squeue((STATE_DATA / "squeue-state-probe-listing.json").read_bytes())
    assert set(states) == set(lines) == set(listed)
    assert {"1_0", "1_5", "11_1", "11_4", "3", "4"} <= set(states)
    for job_id, native in listed.items():
        assert states[job_id] == "|".join(native["job_state"]), job_id
        assert lines[job_id].startswith(f"{states[job_id]}|"), job_id


def _squeue(tmp_path, listing, *, state_probe: str | None) -> tuple[str, object]:
    """A stand-in squeue: the captured listing for ``--json``, the captured state
    probe (or 22.05's refusal of the option: ``state_probe=None``) for
    ``--only-job-state``, the captured line probe otherwise; each call's
    arguments appended to a log."""
    log = tmp_path / "squeue.log"
    refuse = f"cat {REFUSED} | tail -n 2 >&2; exit 1"
    only = f"cat {STATE_DATA / state_probe}" if state_probe else refuse
    script = tmp_path / "squeue"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>{log}\n'
        'case " $* " in\n'
        f"  *' --json '*) cat {listing} ;;\n"
        f"  *' --only-job-state '*) {only} ;;\n"
        f"  *) cat {STATE_DATA / 'squeue-state-probe-lines.txt'} ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return str(script), lambda: log.read_text().splitlines()


@pytest.mark.parametrize(
    ("listing", "state_probe", "asks_states"),
    [
        (STATE_DATA / "squeue-state-probe-listing.json", True, True),
        (STATE_DATA / "squeue-state-probe-listing.json", False, False),
        (fixtures_dir() / "slurm" / "22.05" / "squeue-1-active.json", True, False),
    ],
    ids=["24.11", "24.11-lines", "22.05"],
)
def test_the_probe_asks_for_states_where_slurm_has_them(
    tmp_path, listing, state_probe, asks_states
):
    """From 23.11 (the JSON of the last listing says which Slurm this is) the
    probe is ``squeue --only-job-state``, unless told otherwise; before, and
    before any listing, it is the line probe; ``jobtap status`` says which."""
    squeue, calls = _squeue(tmp_path, listing, state_probe="squeue-state-probe.txt")
    backend = SlurmBackend(squeue=squeue, sacct="false", slurmrestd="", state_probe=state_probe)
    backend.probe(None)  # before any listing: the release is not known yet
    backend.stat_jobs()
    probe = backend.probe(None)
    asked = calls()
    assert "--only-job-state" not in asked[0]
    assert ("--only-job-state" in asked[-1]) is asks_states
    assert "-a" not in asked[-1].split() if asks_states else "-a" in asked[-1].split()
    assert probe.complete and "11_4" in probe.named
    paths = backend.describe()["scheduler_paths"]
    assert ("probe: " + squeue + (" --only-job-state" if asks_states else " lines")) in paths


def test_a_squeue_that_refuses_the_state_probe_makes_it_the_line_probe(tmp_path):
    """A squeue that does not know ``--only-job-state`` (22.05's complaint,
    before a 24.11 listing: a client older than its controller): the probe
    lists lines instead, in the same cycle and from then on, and says why."""
    squeue, calls = _squeue(
        tmp_path, STATE_DATA / "squeue-state-probe-listing.json", state_probe=None
    )
    backend = SlurmBackend(squeue=squeue, sacct="false", slurmrestd="")
    backend.stat_jobs()
    first = backend.probe(None)
    second = backend.probe(None)
    assert first.named == second.named and "11_4" in first.named
    asked = calls()[1:]
    assert ["--only-job-state" in a for a in asked] == [True, False, False]
    paths = backend.describe()["scheduler_paths"]
    assert "--only-job-state refused: " in paths and "unrecognized option" in paths


def test_a_failed_state_probe_lets_the_line_probe_say_why(tmp_path):
    """When the state probe fails, Slurm says little (24.11 with slurmctld down:
    "Unable to query jobs state: Unspecified error"): the line probe runs
    instead, and either stands in for it this once (its lines cut to their
    state: the signatures the state probe gives) or fails with its clearer
    message, which is then the cycle's."""
    listing = STATE_DATA / "squeue-state-probe-listing.json"
    lines = STATE_DATA / "squeue-state-probe-lines.txt"
    down = tmp_path / "down"
    script = tmp_path / "squeue"
    script.write_text(
        "#!/bin/sh\n"
        'case " $* " in\n'
        f"  *' --json '*) cat {listing} ;;\n"
        "  *' --only-job-state '*) echo 'squeue: error: slurm_load_job_state: Unable to query"
        " jobs state: Unspecified error' >&2; exit 1 ;;\n"
        f"  *) if [ -e {down} ]; then echo 'slurm_load_jobs error: Unable to contact slurm"
        f" controller (connect failure)' >&2; exit 1; fi; cat {lines} ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    backend = SlurmBackend(squeue=str(script), sacct="false", slurmrestd="")
    backend.stat_jobs()
    states = parse_probe((STATE_DATA / "squeue-state-probe.txt").read_bytes(), STATE_PROBE_FIELDS)
    assert backend.probe(None).named == states
    assert "probe: " + str(script) + " --only-job-state" in backend.describe()["scheduler_paths"]
    down.touch()
    with pytest.raises(StatError, match="Unable to contact slurm controller"):
        backend.probe(None)


def _filtering_squeue(tmp_path, *, one_fails_with: str) -> tuple[str, object]:
    """A stand-in squeue for 24.11's ``--jobs``: the captured full listing
    without it, the listing captured at the same moment with ``--jobs`` (what
    24.11 printed for four job numbers) with it, and, asked for one job
    number alone, a failure with ``one_fails_with`` on standard error (the
    captured one for a job slurmctld no longer knows); each call's arguments
    appended to a log."""
    log = tmp_path / "squeue.log"
    script = tmp_path / "squeue"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>{log}\n'
        'case " $* " in\n'
        f"  *' --jobs='*,*) cat {STATE_DATA / 'squeue-jobs-filter-some.json'} ;;\n"
        f"  *' --jobs='*) cat {one_fails_with} >&2; exit 1 ;;\n"
        f"  *) cat {STATE_DATA / 'squeue-jobs-filter-listing.json'} ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return str(script), lambda: log.read_text().splitlines()


def test_a_listing_for_poked_jobs_prints_those_alone_from_24_05(tmp_path):
    """Follow mode's listing for poked jobs (``listing_of``) asks squeue for their
    job numbers (an array task by its array's, so that squeue prints the array as
    the full listing does): 24.11's output for them is the full listing's
    records of those jobs, key for key, and no other job; what the collector
    holds of the other jobs stays."""
    squeue, calls = _filtering_squeue(
        tmp_path, one_fails_with=str(STATE_DATA / "squeue-jobs-filter-unknown-one.stderr.txt")
    )
    backend = SlurmBackend(squeue=squeue, sacct="false", slurmrestd="")
    full = backend.stat_jobs()
    poked = ["5388_3", "5390", "5391", "5393_2", "5389"]
    got = backend.listing_of(poked)
    assert calls()[-1].split()[-1] == "--jobs=5388,5390,5391,5393,5389"
    assert "5392" in full and "5392" not in got  # not asked for: not printed
    assert {j: got[j] for j in poked} == {j: full[j] for j in poked}
    assert set(got) <= set(full) and backend._last_jobs == full


def test_a_listing_for_one_gone_job_finds_nothing_and_other_failures_say_why(tmp_path):
    """Asked for one job number, squeue asks slurmctld for that job alone and
    fails if it is gone ("Invalid job id specified", captured on 24.11): the job
    is not listed, to be looked up in history as any job a listing lacks.  What
    is no Slurm job id is not asked for (squeue refuses the whole listing for
    one: "Invalid job id: abc", which a live test met).  Any other failure is
    a failed stat with squeue's words."""
    squeue, calls = _filtering_squeue(
        tmp_path, one_fails_with=str(STATE_DATA / "squeue-jobs-filter-unknown-one.stderr.txt")
    )
    backend = SlurmBackend(squeue=squeue, sacct="false", slurmrestd="")
    backend.stat_jobs()
    assert backend.listing_of(["999999"]) == {}
    # what is no Slurm job id (a poke names what its sender wrote) is not asked for
    assert backend.listing_of(["abc", "", "5389;rm", "5389_x"]) == {}
    got = backend.listing_of(["5388_3", "abc", "5389", ""])
    assert calls()[-1].split()[-1] == "--jobs=5388,5389" and {"5388_3", "5389"} <= set(got)
    down = tmp_path / "down.txt"
    down.write_text("slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
    squeue, _ = _filtering_squeue(tmp_path, one_fails_with=str(down))
    backend = SlurmBackend(squeue=squeue, sacct="false", slurmrestd="")
    backend.stat_jobs()
    with pytest.raises(StatError, match="status 1: slurm_load_jobs error: Unable to contact"):
        backend.listing_of(["5389"])


def test_before_24_05_a_listing_for_poked_jobs_is_the_full_listing(tmp_path):
    """23.11's ``squeue --json`` prints every job whatever ``--jobs`` says: the
    listing for poked jobs is the full one (no ``--jobs`` asked), and it is
    what the collector holds afterwards."""
    squeue, calls = _squeue(
        tmp_path, fixtures_dir() / "slurm" / "23.11" / "squeue-1-active.json", state_probe=None
    )
    backend = SlurmBackend(squeue=squeue, sacct="false", slurmrestd="")
    full = backend.stat_jobs()
    some = sorted(full)[:2]
    assert backend.listing_of(some) == full
    assert not any("--jobs" in call for call in calls())
