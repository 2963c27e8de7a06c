"""The Slurm backend's parsers and normalisers on real output of Slurm 22.05
(tests/fixtures/slurm), and its stat/history plumbing on stand-in commands."""

from __future__ import annotations

import gzip
import os
import stat
import time
from pathlib import Path

import orjson
import pytest

from jobtap.collector.backends import BACKENDS, make_backend
from jobtap.collector.backends.base import BadRecord, StatError
from jobtap.collector.backends.pbs import QUEUE_CLOSED as PBS_CLOSED
from jobtap.collector.backends.pbs import QUEUE_OPEN as PBS_OPEN
from jobtap.collector.backends.pbs import QUEUE_STOPPED as PBS_STOPPED
from jobtap.collector.backends.slurm import (
    ENDED_STATES,
    QUEUE_CLOSED,
    QUEUE_OPEN,
    QUEUE_STOPPED,
    SlurmBackend,
    exit_status_from_text,
    exit_status_from_wait,
    expand_hostlist,
    expand_task_ids,
    job_state,
    node_state,
    normalise_job,
    normalise_node,
    normalise_queue,
    parse_sacct,
    parse_sacct_exit_codes,
    parse_scontrol_partitions,
    parse_sinfo,
    parse_squeue,
    partition_state,
    slurm_time,
)
from jobtap.collector.cycle import Collector
from jobtap.collector.plan import RECONCILE
from jobtap.schema import JOB_FIELDS, NODE_FIELDS, QUEUE_FIELDS, from_hash, to_hash
from sim.rig.paths import fixtures_dir
from sim.rig.pipeline import drain, site_events

BOOKKEEPING = {"site", "version", "updated_at"}


@pytest.fixture(scope="module")
def fx() -> Path:
    return fixtures_dir() / "slurm"


def jobs_of(fx: Path, name: str) -> dict[str, dict]:
    natives = parse_squeue((fx / name).read_bytes())
    return {jid: normalise_job(jid, n) for jid, n in natives.items()}


# Hostlists and array task strings ---------------------------------------------------
@pytest.mark.parametrize(
    "text, names",
    [
        ("n1", ["n1"]),
        ("n[1-3]", ["n1", "n2", "n3"]),
        ("n[1-2,4],gpu7", ["n1", "n2", "n4", "gpu7"]),
        ("n[08-11]", ["n08", "n09", "n10", "n11"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a[1-2]-ib,b", ["a1-ib", "a2-ib", "b"]),
        ("n[1-2],n[2-3]", ["n1", "n2", "n3"]),
        ("", []),
        ("None assigned", []),
        (None, []),
        ("n[3-1]", ["n[3-1]"]),  # malformed: kept as printed
    ],
)
def test_expand_hostlist(text, names):
    assert expand_hostlist(text) == names


@pytest.mark.parametrize(
    "spec, ids",
    [
        ("2-5%2", [2, 3, 4, 5]),
        ("1-4", [1, 2, 3, 4]),
        ("1,3,7-11:2", [1, 3, 7, 9, 11]),
        ("7", [7]),
        ("", None),
        ("x-3", None),
        ("1-1000000", None),  # more than MAX_ARRAY_TASKS
    ],
)
def test_expand_task_ids(spec, ids):
    assert expand_task_ids(spec) == ids


@pytest.mark.parametrize(
    "wait, status", [(0, 0), (768, 3), (256, 1), (15, 271), (9, 265), (None, None), (-1, None)]
)
def test_exit_status_from_wait_status(wait, status):
    assert exit_status_from_wait(wait) == status


@pytest.mark.parametrize(
    "text, status", [("0:0", 0), ("3:0", 3), ("0:15", 271), ("0:9", 265), ("", None), (None, None)]
)
def test_exit_status_from_sacct_text(text, status):
    assert exit_status_from_text(text) == status


def test_slurm_time_is_utc_iso():
    assert slurm_time(1795272215) == "2026-11-21T14:43:35+00:00"
    assert slurm_time(0) is None and slurm_time(None) is None and slurm_time("x") is None


# Job states ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "word, reason, priority, state",
    [
        ("PENDING", "Resources", 10, "queued"),
        ("PENDING", "Priority", 10, "queued"),
        ("PENDING", "JobHeldUser", 0, "held"),
        ("PENDING", "JobHeldAdmin", 0, "held"),
        ("PENDING", "Dependency", 0, "held"),  # priority 0 is a hold
        ("PENDING", "BeginTime", 10, "waiting"),
        ("REQUEUED", "None", 10, "queued"),
        ("REQUEUE_HOLD", "None", 0, "held"),
        ("SPECIAL_EXIT", "None", 0, "held"),
        ("RUNNING", "None", 10, "running"),
        ("CONFIGURING", "None", 10, "running"),
        ("SUSPENDED", "None", 0, "suspended"),
        ("COMPLETING", "None", 10, "exiting"),
        ("COMPLETED", "None", 10, "completed"),
        ("FAILED", "NonZeroExitCode", 10, "failed"),
        ("TIMEOUT", "TimeLimit", 10, "failed"),
        ("OUT_OF_MEMORY", "None", 10, "failed"),
        ("NODE_FAIL", "None", 10, "failed"),
        ("CANCELLED", "None", 10, "cancelled"),
        ("CANCELLED by 0", "None", 10, "cancelled"),
        ("PREEMPTED", "None", 10, "cancelled"),
        ("SOMETHING_NEW", "None", 10, "unknown"),
    ],
)
def test_job_state_table(word, reason, priority, state):
    assert job_state(word, reason, priority) == state


def test_job_state_missing_is_a_bad_record():
    with pytest.raises(BadRecord):
        job_state(None)


# squeue ----------------------------------------------------------------------------
def test_squeue_mixed_normalised_like_pbs(fx):
    jobs = jobs_of(fx, "squeue-mixed.json")
    got = {jid: (r["state"], r["exit_status"], r["reason"]) for jid, r in jobs.items()}
    assert got == {
        "1": ("completed", 0, None),
        "2": ("failed", 3, "NonZeroExitCode"),  # exit_code 768: a wait status
        "3": ("running", None, None),
        "4": ("cancelled", 271, None),  # scancel of a running job: SIGTERM
        "5": ("held", None, "JobHeldUser"),
        "6_0": ("running", None, None),
        "6_1": ("running", None, None),
        "6_2": ("queued", None, "JobArrayTaskLimit"),
        "6_3": ("queued", None, "JobArrayTaskLimit"),
        "6_4": ("queued", None, "JobArrayTaskLimit"),
        "6_5": ("queued", None, "JobArrayTaskLimit"),
        "7": ("suspended", None, None),
        "8": ("running", None, None),
        "11": ("queued", None, "Resources"),
        "12": ("running", None, None),
        "13": ("queued", None, "Dependency"),
        "14": ("queued", None, "DependencyNeverSatisfied"),
        "15": ("cancelled", None, None),  # cancelled while pending: never ran
        "16": ("waiting", None, "BeginTime"),
    }
    for jid, record in jobs.items():
        assert set(record) == set(JOB_FIELDS) - BOOKKEEPING, jid
        assert record["scheduler"] == "slurm" and record["user"] == "root"
        assert record["queue"] == "debug" and record["account"] == "lab"
        # every record goes through the hash encoding unchanged
        assert from_hash(to_hash(record)) == {k: v for k, v in record.items()}, jid


def test_squeue_times_and_resources(fx):
    jobs = jobs_of(fx, "squeue-mixed.json")
    done = jobs["1"]
    assert done["submit_time"] == "2026-11-21T14:43:35+00:00"
    assert done["start_time"] == "2026-11-21T14:43:35+00:00"
    assert done["end_time"] == "2026-11-21T14:43:40+00:00"
    assert done["resources_used"] == {"walltime": "00:00:05"}
    assert done["allocated"] == ["n1"] and done["name"] == "done5"
    # running: no end time (squeue prints the expected end there)
    assert jobs["3"]["end_time"] is None and jobs["3"]["start_time"] is not None
    # pending for resources: squeue prints an expected start a year away; not a start
    big = jobs["11"]
    assert big["start_time"] is None and big["end_time"] is None and big["allocated"] == []
    assert big["requested"] == {
        "ncpus": 16, "nodes": 4, "mem": "4M", "walltime": None, "select": None
    }  # fmt: skip
    assert jobs["8"]["requested"]["walltime"] == "00:01:00"
    assert jobs["12"]["requested"]["walltime"] == "8760:00:00"
    # cancelled while pending: no start time although squeue sets start = end
    assert jobs["15"]["start_time"] is None and jobs["15"]["end_time"] is not None
    assert jobs["15"]["group"] == "root" and jobs["5"]["priority"] == 0


def test_squeue_pending_array_is_expanded_into_tasks(fx):
    natives = parse_squeue((fx / "squeue-mixed.json").read_bytes())
    meta = next(
        j for j in orjson.loads((fx / "squeue-mixed.json").read_bytes())["jobs"] if j["job_id"] == 6
    )
    assert meta["array_task_string"] == "2-5%2"
    for task in (2, 3, 4, 5):
        native = natives[f"6_{task}"]
        assert native["array_task_id"] == task and native["array_task_string"] == ""
        assert native["job_id"] == 6
        record = normalise_job(f"6_{task}", native)
        assert (record["array_parent"], record["array_index"]) == ("6", task)
    # tasks that split off keep the id they had while pending
    later = parse_squeue((fx / "squeue-later.json").read_bytes())
    assert {k for k in later if k.startswith("6_")} == {f"6_{i}" for i in range(6)}
    assert later["6_5"]["job_id"] == 6 and later["6_2"]["job_id"] == 17
    assert normalise_job("6_5", later["6_5"])["state"] == "running"


def test_squeue_terminal_states_arrive_through_the_live_list(fx):
    later = jobs_of(fx, "squeue-later.json")
    assert (later["8"]["state"], later["8"]["exit_status"], later["8"]["reason"]) == (
        "failed",
        271,
        "TimeLimit",
    )
    assert later["8"]["native_state"] == "TIMEOUT"
    assert later["7"]["state"] == "running"  # resumed
    assert later["6_0"]["state"] == "completed" and later["6_0"]["exit_status"] == 0


def test_squeue_multinode_allocation(fx):
    jobs = jobs_of(fx, "squeue-multinode-running.json")
    assert jobs["5023"]["allocated"] == ["n1", "n2", "n3"]
    assert jobs["5023"]["requested"]["nodes"] == 3


def test_squeue_empty(fx):
    assert parse_squeue((fx / "squeue-empty.json").read_bytes()) == {}


def test_squeue_5000_jobs(fx):
    raw = gzip.decompress((fx / "squeue-5000-jobs.json.gz").read_bytes())
    t0 = time.perf_counter()
    natives = parse_squeue(raw)
    records = [normalise_job(jid, n) for jid, n in natives.items()]
    elapsed = time.perf_counter() - t0
    assert len(natives) == 5000 and len(set(natives)) == 5000
    assert {r["state"] for r in records} == {"held"}
    assert {r["reason"] for r in records} == {"JobHeldUser"}
    assert elapsed < 5, f"parsing and normalising 5000 jobs took {elapsed:.2f}s"
    hundred = parse_squeue((fx / "squeue-100-jobs.json").read_bytes())
    assert len(hundred) == 100


def test_squeue_with_errors_is_a_failed_stat():
    # What 22.05 prints, exit status 0, while slurmctld is down.
    raw = orjson.dumps(
        {
            "meta": {},
            "errors": [
                {
                    "description": "Failed while looking for jobs",
                    "error_number": -1,
                    "error": "Unspecified error",
                    "source": "slurm_load_jobs",
                }
            ],
            "jobs": [],
        }
    )
    with pytest.raises(StatError, match="slurm_load_jobs: Failed while looking for jobs"):
        parse_squeue(raw)


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "printed nothing"),
        (b"squeue: error: Invalid user", "not JSON"),
        (b"[]", "not an object"),
        (b'{"errors": []}', "no 'jobs' list"),
        (b'{"errors": [], "jobs": {}}', "expected a list"),
    ],
)
def test_squeue_garbage_is_a_failed_stat(raw, message):
    with pytest.raises(StatError, match=message):
        parse_squeue(raw)


def test_bad_job_records_are_reported_one_by_one(fx):
    doc = orjson.loads((fx / "squeue-mixed.json").read_bytes())
    good = doc["jobs"][0]
    doc["jobs"] = [
        good,
        "not a record",
        {**good, "job_id": None},
        {**good, "job_id": 90, "job_state": None},
        {**good, "job_id": 91, "user_name": "", "user_id": None},
        {**good, "job_id": 92, "name": "x" * 70000},
        {**good, "job_id": 93, "job_resources": None, "nodes": "n[1-2]"},
    ]
    natives = parse_squeue(orjson.dumps(doc))
    assert set(natives) == {"1", "?1", "?2", "90", "91", "92", "93"}
    for jid in ("?1", "?2", "90", "91", "92"):
        with pytest.raises(BadRecord):
            normalise_job(jid, natives[jid])
    assert normalise_job("93", natives["93"])["allocated"] == ["n1", "n2"]
    # a missing user name falls back to the uid
    uid_only = {**good, "user_name": "", "user_id": 0}
    assert normalise_job("1", uid_only)["user"] == "root"


def test_normalise_does_not_modify_native(fx):
    natives = parse_squeue((fx / "squeue-mixed.json").read_bytes())
    before = orjson.dumps(natives)
    for jid, native in natives.items():
        assert normalise_job(jid, native)["native"] is native
    assert orjson.dumps(natives) == before


# sacct -----------------------------------------------------------------------------
def test_sacct_final_records(fx):
    natives = parse_sacct((fx / "sacct-final.json").read_bytes())
    records = {jid: normalise_job(jid, n) for jid, n in natives.items()}
    got = {jid: (r["state"], r["exit_status"], r["reason"]) for jid, r in records.items()}
    assert got == {
        "1": ("completed", 0, None),
        # 22.05's JSON prints exit 3 as SUCCESS/0: unknown without the text codes
        "2": ("failed", None, None),
        "3": ("cancelled", 271, "cancelled by root"),  # batch step: SIGNALED 15
        "4": ("cancelled", 271, "cancelled by root"),
        "6_0": ("completed", 0, None),
        "6_1": ("completed", 0, None),
        "6_2": ("completed", 0, None),
        "6_3": ("completed", 0, None),
        "6_4": ("completed", 0, None),
        "6_5": ("completed", 0, None),
        "7": ("cancelled", 271, "cancelled by root"),
        "8": ("failed", 271, "TimeLimit"),
        "11": ("cancelled", None, "cancelled by root"),  # never ran
        "12": ("completed", 0, None),
    }
    for jid, record in records.items():
        assert set(record) == set(JOB_FIELDS) - BOOKKEEPING, jid
    assert records["11"]["start_time"] is None and records["11"]["allocated"] == []
    assert records["12"]["resources_used"]["walltime"] == "00:00:05"
    assert (records["6_3"]["array_parent"], records["6_3"]["array_index"]) == ("6", 3)
    assert records["8"]["requested"]["walltime"] == "00:01:00"


def test_sacct_exit_codes_from_text_make_the_exit_exact(fx):
    natives = parse_sacct((fx / "sacct-final.json").read_bytes())
    codes = parse_sacct_exit_codes(
        "2|3:0\n2.batch|3:0\n4|0:0\n4.batch|0:15\n4.extern|0:0\n6_3|0:0\n6_3.batch|0:0\n"
    )
    assert codes == {
        "2": {"job": "3:0", "batch": "3:0"},
        "4": {"job": "0:0", "batch": "0:15"},
        "6_3": {"job": "0:0", "batch": "0:0"},
    }
    two = normalise_job("2", {**natives["2"], "jobtap_exit_codes": codes["2"]})
    assert (two["state"], two["exit_status"], two["reason"]) == ("failed", 3, "NonZeroExitCode")
    four = normalise_job("4", {**natives["4"], "jobtap_exit_codes": codes["4"]})
    assert four["exit_status"] == 271  # the batch script's, as squeue reports it


def test_live_and_history_finals_agree(fx):
    """The same job, finalised from squeue or from sacct, gets the same state,
    exit status and times."""
    live = jobs_of(fx, "squeue-later.json")
    natives = parse_sacct((fx / "sacct-final.json").read_bytes())
    for jid in ("1", "4", "8", "12", "6_0", "6_2"):
        history = normalise_job(jid, natives[jid])
        for field in ("state", "exit_status", "start_time", "end_time", "allocated", "user"):
            assert live[jid][field] == history[field], (jid, field)


def test_sacct_mixed_running_jobs_are_not_terminal(fx):
    natives = parse_sacct((fx / "sacct-mixed.json").read_bytes())
    records = {jid: normalise_job(jid, n) for jid, n in natives.items()}
    assert records["3"]["state"] == "running" and records["3"]["end_time"] is None
    assert records["7"]["state"] == "suspended"
    assert records["11"]["state"] == "queued" and records["11"]["allocated"] == []
    assert records["6_0"]["state"] == "running"


def test_sacct_pending_array_record_is_expanded():
    doc = {
        "errors": [],
        "jobs": [
            {
                "job_id": 40,
                "array": {"job_id": 40, "task_id": None, "task": "1-3"},
                "state": {"current": "CANCELLED", "reason": "None"},
                "user": "alice",
                "nodes": "None assigned",
                "time": {"start": 0, "end": 1795272639, "submission": 1795272218},
            }
        ],
    }
    natives = parse_sacct(orjson.dumps(doc))
    assert set(natives) == {"40_1", "40_2", "40_3"}
    record = normalise_job("40_2", natives["40_2"])
    assert (record["state"], record["exit_status"], record["array_index"]) == (
        "cancelled",
        None,
        2,
    )


# Nodes -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "base, flags, state",
    [
        ("idle", [], "free"),
        ("mixed", [], "busy"),
        ("allocated", [], "busy"),
        ("idle", ["COMPLETING"], "busy"),
        ("idle", ["DRAIN"], "drain"),  # drained
        ("mixed", ["DRAIN"], "drain"),  # draining
        ("idle", ["FAIL"], "drain"),
        ("down", [], "down"),
        ("down", ["DRAIN"], "down"),
        ("idle", ["NOT_RESPONDING"], "free"),  # for a moment after every resume
        ("mixed", ["NOT_RESPONDING"], "busy"),
        ("future", [], "unknown"),
    ],
)
def test_node_state_table(base, flags, state):
    assert node_state(base, flags) == state


def test_sinfo_nodes(fx):
    natives = parse_sinfo((fx / "sinfo.json").read_bytes())
    records = {name: normalise_node(name, n) for name, n in natives.items()}
    assert {n: r["state"] for n, r in records.items()} == {
        "n1": "busy", "n2": "busy", "n3": "free", "n4": "free"
    }  # fmt: skip
    n2 = records["n2"]
    assert set(n2) == set(NODE_FIELDS) - BOOKKEEPING
    assert n2["native_state"] == "ALLOCATED" and n2["reason"] is None and n2["jobs"] == []
    assert n2["resources"]["available"]["cpus"] == 4
    assert n2["resources"]["assigned"]["cpus"] == 4
    drained = {**natives["n3"], "state": "idle", "state_flags": ["DRAIN"], "reason": "bad disk"}
    record = normalise_node("n3", drained)
    assert (record["state"], record["native_state"], record["reason"]) == (
        "drain",
        "IDLE+DRAIN",
        "bad disk",
    )


# Partitions ------------------------------------------------------------------------
def test_partitions_from_scontrol(fx):
    natives = parse_scontrol_partitions((fx / "scontrol-show-partition-oneliner.txt").read_bytes())
    assert list(natives) == ["debug"]
    record = normalise_queue("debug", natives["debug"])
    assert set(record) == set(QUEUE_FIELDS) - BOOKKEEPING
    assert record["state"] == "open" and record["native_state"] == "UP"
    available = record["resources"]["available"]
    assert available["cpus"] == 16 and available["nodes"] == 4
    assert available["tres"] == "cpu=16,mem=4M,node=4,billing=16"
    assert record["resources"]["max"]["walltime"] == "UNLIMITED"


def test_partition_states_use_the_pbs_words():
    assert (QUEUE_OPEN, QUEUE_STOPPED, QUEUE_CLOSED) == (PBS_OPEN, PBS_STOPPED, PBS_CLOSED)
    assert [partition_state(s) for s in ("UP", "DOWN", "DRAIN", "INACTIVE", "ODD")] == [
        "open",
        "stopped",
        "closed",
        "closed",
        "unknown",
    ]


def test_scontrol_node_oneliner_values_with_spaces(fx):
    # the parser of scontrol -o lines keeps values with spaces (OS=Linux 6.1 #1 ...)
    from jobtap.collector.backends.slurm.listing import _key_values

    line = (fx / "scontrol-show-node-oneliner.txt").read_text().splitlines()[0]
    fields = _key_values(line)
    assert fields["NodeName"] == "n1" and fields["State"] == "MIXED"
    assert fields["OS"].startswith("Linux 6.18.44") and "PREEMPT_DYNAMIC" in fields["OS"]
    assert fields["AllocTRES"] == "cpu=1"


def test_partition_garbage_is_a_failed_stat():
    with pytest.raises(StatError):
        parse_scontrol_partitions(b"Nodes=n1 State=UP\n")
    assert parse_scontrol_partitions(b"No partitions in the system\n") == {}


# The backend on stand-in commands ---------------------------------------------------
def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def standins(tmp_path, fx):
    """squeue/sinfo/scontrol/sacct replaying fixtures; sacct logs its arguments."""
    log = tmp_path / "calls.log"
    sacct_json = fx / "sacct-final.json"
    return {
        "log": log,
        "squeue": _script(tmp_path / "squeue", f'cat "{fx}/squeue-mixed.json"\n'),
        "sinfo": _script(tmp_path / "sinfo", f'cat "{fx}/sinfo.json"\n'),
        "scontrol": _script(
            tmp_path / "scontrol",
            'case "$1" in\n'
            "  --version) echo 'slurm 22.05.8' ;;\n"
            f'  *) cat "{fx}/scontrol-show-partition-oneliner.txt" ;;\n'
            "esac\n",
        ),
        "sacct": _script(
            tmp_path / "sacct",
            f'printf "%s\\n" "$*" >> "{log}"\n'
            'case "$1" in\n'
            f'  --json) cat "{sacct_json}" ;;\n'
            "  *) printf '2|3:0\\n2.batch|3:0\\n8|0:0\\n8.batch|0:15\\n' ;;\n"
            "esac\n",
        ),
    }


def test_backend_stats_and_derived_node_jobs_and_counts(standins):
    be = SlurmBackend(**{k: v for k, v in standins.items() if k != "log"}, timeout=10)
    jobs = be.stat_jobs()
    assert "last_sched_evaluation" not in jobs["11"]  # volatile: dropped
    nodes = be.stat_nodes()
    assert "cpu_load" not in nodes["n1"] and "free_memory" not in nodes["n1"]
    records = {name: be.normalise_node(name, n) for name, n in nodes.items()}
    assert records["n1"]["jobs"] == ["3"]
    assert records["n2"]["jobs"] == ["6_0", "7", "8", "6_1", "12"]
    assert records["n3"]["jobs"] == []
    queues = be.stat_queues()
    counts = be.normalise_queue("debug", queues["debug"])["counts"]
    assert counts == {
        "total": 15, "running": 5, "held": 1, "queued": 7, "suspended": 1, "waiting": 1
    }  # fmt: skip


def test_backend_history_batches_ids_and_adds_exit_codes(standins):
    be = SlurmBackend(**{k: v for k, v in standins.items() if k != "log"}, history_batch=2)
    found = be.history(["2", "8", "1", "2", "6_3", "-x", "12 13", "999"])
    assert set(found) == {"2", "8", "1", "6_3"}  # 999 unknown; odd ids never asked
    calls = standins["log"].read_text().splitlines()
    assert calls[0] == "--json -j 2,8"
    assert calls[1] == "-n -P -o JobID,ExitCode -j 2,8"
    assert calls[2] == "--json -j 1,6_3"  # both completed: no text query
    assert calls[3] == "--json -j 999"
    assert len(calls) == 4
    two = be.normalise_job("2", found["2"])
    assert (two["state"], two["exit_status"]) == ("failed", 3)
    eight = be.normalise_job("8", found["8"])
    assert (eight["state"], eight["exit_status"], eight["reason"]) == ("failed", 271, "TimeLimit")


def test_backend_failures_are_stat_errors(tmp_path):
    failing = _script(tmp_path / "squeue", "echo 'squeue: error: boom' >&2\nexit 1\n")
    with pytest.raises(StatError, match="exited with status 1: squeue: error: boom"):
        SlurmBackend(squeue=failing).stat_jobs()
    with pytest.raises(StatError, match="command not found"):
        SlurmBackend(squeue=str(tmp_path / "missing")).stat_jobs()
    hang = _script(tmp_path / "sinfo", "sleep 30\n")
    release = _script(tmp_path / "scontrol", "echo 'slurm 22.05.8'\n")  # not the host's
    with pytest.raises(StatError, match="timed out"):
        SlurmBackend(sinfo=hang, scontrol=release, timeout=0.5).stat_nodes()


def test_prefix_quotes_words_for_ssh():
    be = SlurmBackend(prefix="ssh head1")
    assert be.prefix == ["ssh", "head1"]
    assert be.command(["sacct", "-j", "1_[2]"]) == ["sacct", "-j", "'1_[2]'"]
    assert SlurmBackend(prefix=["sudo"]).command(["sacct", "-j", "1"]) == ["sacct", "-j", "1"]


def test_registered_in_make_backend():
    assert "slurm" in BACKENDS
    be = make_backend("slurm", squeue="/bin/true", timeout=3)
    assert isinstance(be, SlurmBackend) and be.scheduler == "slurm"
    with pytest.raises(ValueError):
        SlurmBackend(history_batch=0)


def test_stat_nodes_without_a_job_stat_has_no_jobs(standins):
    be = SlurmBackend(sinfo=standins["sinfo"], scontrol=standins["scontrol"])
    nodes = be.stat_nodes()
    assert "jobtap_jobs" not in nodes["n1"]
    assert be.normalise_node("n1", nodes["n1"])["jobs"] == []
    assert os.path.exists(standins["sinfo"])


def test_backend_ended_since_asks_sacct_for_the_window(standins):
    """``ended_since``: every job that ended in the window, whoever its user,
    through one ``sacct --json -a -s ENDED -S now-N -E now`` (N counted back
    from sacct's own clock), with the text exit codes of the jobs that did
    not complete, like history()."""
    be = SlurmBackend(**{k: v for k, v in standins.items() if k != "log"}, timeout=10)
    found = be.ended_since(time.time() - 99.5)
    calls = standins["log"].read_text().splitlines()
    assert calls[0] == f"--json -a -s {ENDED_STATES} -S now-100 -E now"
    assert calls[1].startswith("-n -P -o JobID,ExitCode -j 2,3,4,")
    assert len(calls) == 2 and {"1", "2", "8", "6_5"} <= set(found)
    two = be.normalise_job("2", found["2"])
    assert (two["state"], two["exit_status"]) == ("failed", 3)


def test_reconciliation_finalises_jobs_that_ended_unseen_in_its_window(standins, r, tmp_path, fx):
    """A job that was submitted, ran and left squeue between two
    reconciliations, with no poke, still gets ``new`` and ``final``: the
    reconciliation asks sacct for every job that ended since the previous one
    (2, 8 and 11 of sacct-final.json are left out of squeue's listing here).
    The jobs squeue lists are left to the listing; the next reconciliation,
    whose window overlaps, ships none of them again."""
    doc = orjson.loads((fx / "squeue-mixed.json").read_bytes())
    doc["jobs"] = [j for j in doc["jobs"] if j["job_id"] not in (2, 8, 11)]
    (tmp_path / "squeue.json").write_bytes(orjson.dumps(doc))
    standins["squeue"] = _script(tmp_path / "squeue", f'cat "{tmp_path}/squeue.json"\n')
    be = SlurmBackend(**{k: v for k, v in standins.items() if k != "log"}, timeout=10)
    site = "slurmwin"
    collector = Collector(be, r, site=site, pushed=True)
    collector.run_cycle(tier=RECONCILE, with_nodes=False)  # no window yet: no sacct
    assert not standins["log"].exists()
    drain(r, site)
    report = collector.run_cycle(tier=RECONCILE, with_nodes=False)
    assert report.counts["ended_unseen"] == 3, report.counts
    drain(r, site)
    unseen = ("2", "8", "11")
    events = [e for e in site_events(r, site) if e["object_id"] in unseen]
    assert sorted((e["object_id"], e["type"]) for e in events) == sorted(
        (j, t) for j in unseen for t in ("new", "final")
    )
    finals = {e["object_id"]: e["record"] for e in events if e["type"] == "final"}
    assert (finals["2"]["state"], finals["2"]["exit_status"]) == ("failed", 3)
    assert (finals["8"]["state"], finals["8"]["exit_status"]) == ("failed", 271)
    assert finals["11"]["state"] == "cancelled"
    before = len(site_events(r, site))
    report = collector.run_cycle(tier=RECONCILE, with_nodes=False)
    drain(r, site)
    assert "ended_unseen" not in report.counts and len(site_events(r, site)) == before
    # A collector that starts again takes the window from meta.
    again = Collector(be, r, site=site, pushed=True)
    again.load()
    assert again.window_start == pytest.approx(collector.window_start, abs=0.001)


SDIAG = """*******************************************************
Server thread count:  3
Remote Procedure Call statistics by message type
\tREQUEST_PARTITION_INFO                  ( 2009) count:12     ave_time:289    total_time:3469
\tREQUEST_JOB_INFO_SINGLE   ( 2021) count:{single}  ave_time:277  total_time:{single_us}
\tREQUEST_JOB_INFO          ( 2003) count:{listing}  ave_time:183  total_time:{listing_us}
\tREQUEST_FED_INFO          ( 2049) count:{single}  ave_time:113  total_time:{fed_us}

Remote Procedure Call statistics by user
\troot            (       0) count:48     ave_time:1400   total_time:67216
"""


def _replaying_sdiag(tmp_path: Path, outputs: list[str]) -> str:
    """A stand-in sdiag printing ``outputs`` one call after another."""
    for i, text in enumerate(outputs):
        (tmp_path / f"sdiag{i}").write_text(text)
    counter = tmp_path / "n"
    counter.write_text("0")
    return _script(
        tmp_path / "sdiag",
        f'n=$(cat "{counter}"); echo $((n + 1)) > "{counter}"; cat "{tmp_path}/sdiag$n"\n',
    )


def test_read_costs_are_slurmctlds_own_time_per_read_since_the_last_call(tmp_path):
    """``read_costs``: slurmctld's time per listing and per single read (its
    REQUEST_JOB_INFO_SINGLE plus REQUEST_FED_INFO), from the difference of two
    ``sdiag`` outputs; a kind that did not run since is absent; a reset of
    the statistics starts again from zero; output without the section is a
    failed stat."""
    outputs = [
        SDIAG.format(single=10, single_us=2000, fed_us=1000, listing=4, listing_us=20000),
        SDIAG.format(single=30, single_us=12000, fed_us=3000, listing=4, listing_us=20000),
        SDIAG.format(single=2, single_us=900, fed_us=100, listing=1, listing_us=7000),
    ]
    sdiag = _replaying_sdiag(tmp_path, outputs)
    be = SlurmBackend(sdiag=sdiag)
    first = be.read_costs()  # since the statistics' last reset
    assert first == pytest.approx({"listing": 0.005, "single": 0.0003})
    assert be.read_costs() == pytest.approx({"single": (10000 + 2000) / 20 / 1e6})
    assert be.read_costs() == pytest.approx({"listing": 0.007, "single": 0.0005})
    with pytest.raises(StatError, match="no RPC statistics"):
        SlurmBackend(sdiag=_script(tmp_path / "nosdiag", "echo hello\n")).read_costs()


def test_from_23_11_a_single_read_costs_its_own_rpc_alone(tmp_path):
    """From 23.11 single reads say LOCAL (``?flags=...LOCAL``): slurmctld is not
    asked for the federation, so a single read's price is REQUEST_JOB_INFO_SINGLE
    alone, and REQUEST_FED_INFO that others send (squeue without --local) do not
    count; a price is learnt although no REQUEST_FED_INFO ran."""
    outputs = [
        SDIAG.format(single=10, single_us=2000, fed_us=1000, listing=4, listing_us=20000),
        SDIAG.format(single=30, single_us=12000, fed_us=1000, listing=4, listing_us=20000),
    ]
    outputs[1] = outputs[1].replace("REQUEST_FED_INFO          ( 2049) count:30 ",
                                    "REQUEST_FED_INFO          ( 2049) count:10 ")  # fmt: skip
    sdiag = _replaying_sdiag(tmp_path, outputs)
    listing = fixtures_dir() / "slurm" / "24.11" / "squeue-1-active.json"
    be = SlurmBackend(sdiag=sdiag, squeue=_script(tmp_path / "squeue", f"cat {listing}\n"))
    be.stat_jobs()
    assert be.slurm_format().rest_query.endswith("&flags=LOCAL")
    assert be.read_costs() == pytest.approx({"listing": 0.005, "single": 0.0002})
    assert be.read_costs() == pytest.approx({"single": 10000 / 20 / 1e6})
