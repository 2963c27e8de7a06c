"""Every supported Slurm release through the parsers and normalisers: the
captures of one scripted workload (deploy/slurm/capture.sh) on each release,
in tests/fixtures/slurm/<release>/ (each folder's README says which Slurm and
which commands).  Each document is read in its own format, every record of it
normalises, and the same job gives the same normalised record on every release
but for the fields named below."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from jobtap.collector.backends.base import StatError
from jobtap.collector.backends.slurm import (
    FORMATS,
    UnknownFormat,
    document_format,
    format_of_release,
    generation_of,
    normalise_job,
    normalise_node,
    parse_nodes,
    parse_sacct,
    parse_sacct_exit_codes,
    parse_squeue,
    squeue_jobs,
)
from jobtap.collector.backends.slurm.accounting import exit_unsure
from jobtap.collector.backends.slurm.backend import VOLATILE_JOB_KEYS
from jobtap.collector.fingerprint import fingerprint
from sim.rig.paths import fixtures_dir
from sim.rig.slurm import KILLED_BY_SIGTERM

BASE = fixtures_dir() / "slurm"
RELEASES = sorted(p.name for p in BASE.iterdir() if re.fullmatch(r"\d\d\.\d\d", p.name))
CAPTURED = [r for r in RELEASES if (BASE / r / "sacct.json").exists()]
# Fields that differ between the captures for a reason of the cluster, not of
# the JSON: the default PriorityType became priority/multifactor in 23.11 (22.05's
# priority/basic gives each job 2^32 less its submission order).
NOT_COMPARED = {"priority"}
COMPARED = ("state", "native_state", "reason", "exit_status", "user", "group", "account",
            "name", "queue", "requested", "comment", "array_index")  # fmt: skip


def release_of(folder: str) -> str:
    return (BASE / folder / "version.txt").read_text().split()[-1]


def job_ids(folder: str) -> dict[str, str]:
    """``job-ids.txt``: workload name -> job id."""
    out = {}
    for line in (BASE / folder / "job-ids.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, job_id = line.split()[:2]
            out[name] = job_id
    return out


def documents(folder: str) -> list[Path]:
    return sorted((BASE / folder).glob("squeue-[0-9]*.json")) + [BASE / folder / "sacct.json"]


def finals(folder: str) -> dict[str, dict]:
    """The workload's final records as history gives them: sacct's JSON with the
    exit codes of ``sacct -o JobID,ExitCode`` where its JSON may be wrong."""
    natives = parse_sacct((BASE / folder / "sacct.json").read_bytes())
    codes = parse_sacct_exit_codes((BASE / folder / "sacct-jobid-exitcode.txt").read_bytes())
    for job_id, native in natives.items():
        if exit_unsure(native) and job_id in codes:
            natives[job_id] = {**native, "jobtap_exit_codes": codes[job_id]}
    return {job_id: normalise_job(job_id, n) for job_id, n in natives.items()}


def by_name(folder: str, records: dict[str, dict]) -> dict[str, dict]:
    """Records keyed by workload name (``array_3`` for a task)."""
    out = {}
    for name, job_id in job_ids(folder).items():
        for key, record in records.items():
            if key == job_id:
                out[name] = record
            elif key.startswith(f"{job_id}_"):
                out[f"{name}_{key.partition('_')[2]}"] = record
    return out


def test_every_release_is_captured():
    assert {release_of(f)[:5] for f in CAPTURED} == {f.releases for f in FORMATS.values()}


@pytest.mark.parametrize("folder", CAPTURED)
def test_each_document_is_read_in_its_own_format(folder):
    """squeue and sacct documents name the format the release writes by default,
    every record in them is of that generation, and every one normalises."""
    fmt = format_of_release(f"slurm {release_of(folder)}")
    for path in documents(folder):
        doc = orjson.loads(path.read_bytes())
        assert document_format(doc, path.name) is fmt, path.name
        natives = (
            parse_sacct(path.read_bytes())
            if "sacct" in path.name
            else parse_squeue(path.read_bytes())
        )
        for job_id, native in natives.items():
            assert generation_of(native) is fmt.generation, (path.name, job_id)
            record = normalise_job(job_id, native)
            assert record["id"] == job_id and record["user"] == "root"


@pytest.mark.parametrize("folder", CAPTURED)
def test_the_workload_ends_as_it_should_on_every_release(folder):
    """The final record of each job of the workload, from sacct as history reads it."""
    got = by_name(folder, finals(folder))
    want = {
        "purged": ("completed", 0, None),
        "completed": ("completed", 0, None),
        "failed": ("failed", 3, "NonZeroExitCode"),
        "cancel-pending": ("cancelled", None, "cancelled by root"),
        "timeout": ("failed", None, "TimeLimit"),
        "array_3": ("failed", 4, "NonZeroExitCode"),
        "array_0": ("completed", 0, None),
        "multinode": ("completed", 0, None),
        "hetjob": ("completed", 0, None),
        "held-released": ("completed", 0, None),
    }
    for name, (state, status, reason) in want.items():
        record = got[name]
        seen = (record["state"], record["exit_status"], record["reason"])
        if name == "timeout":  # killed by the time limit: SIGTERM or the shell's 143
            assert seen[0] == state and seen[2] == reason, (name, seen)
        else:
            assert seen == (state, status, reason), (name, seen)
    assert len(got["multinode"]["allocated"]) == 2
    assert got["array_3"]["array_index"] == 3


@pytest.mark.parametrize("source", ["sacct", "squeue-1-active-states-all.json"])
def test_the_same_job_gives_the_same_record_on_every_release(source):
    """Field by field, each job of the workload normalises alike on every
    release (its id, times and node names are the run's own; NOT_COMPARED
    names what the clusters' defaults make differ)."""
    per_release = {}
    for folder in CAPTURED:
        if source == "sacct":
            records = finals(folder)
        else:
            natives = parse_squeue((BASE / folder / source).read_bytes())
            records = {j: normalise_job(j, n) for j, n in natives.items()}
        per_release[folder] = by_name(folder, records)
    names = set.intersection(*(set(r) for r in per_release.values()))
    assert len(names) >= 12, names
    differ = []
    for name in sorted(names):
        for field in COMPARED:
            values = {f: orjson.dumps(r[name][field]) for f, r in per_release.items()}
            if (
                name == "cancel-running"
                and field == "exit_status"
                and len(set(values.values())) > 1
            ):
                # one fact, three ways of reporting it (sim/rig/slurm.py)
                statuses = {r[name][field] for r in per_release.values()}
                assert statuses <= KILLED_BY_SIGTERM, statuses
                continue
            if len(set(values.values())) > 1:
                differ.append((name, field, values))
        started = {f: r[name]["start_time"] is None for f, r in per_release.items()}
        assert len(set(started.values())) == 1, (name, "start_time", started)
        nodes = {f: len(r[name]["allocated"]) for f, r in per_release.items()}
        assert len(set(nodes.values())) == 1, (name, "allocated", nodes)
    assert not differ, differ
    assert "priority" not in COMPARED and NOT_COMPARED == {"priority"}


@pytest.mark.parametrize("folder", CAPTURED)
def test_a_job_read_through_slurmrestd_is_the_listings_record(folder):
    """slurmrestd, asked in the version squeue writes, gives the record the
    listing gives, key for key but for the volatile keys the backend leaves out
    (so a single read and a listing fingerprint alike), for the running job
    captured next to the listing."""
    fmt = format_of_release(f"slurm {release_of(folder)}")
    body = BASE / folder / "rest" / f"1-active-slurm-{fmt.version}-job-running.json"
    assert body.exists(), f"{body.name}: the release serves no {fmt.version}?"
    doc = orjson.loads(body.read_bytes())
    assert document_format(doc, "slurmrestd") is fmt
    job_id = job_ids(folder)["running"]
    single = squeue_jobs(doc, fmt, "slurmrestd")[job_id]
    listed = parse_squeue((BASE / folder / "squeue-1-active-states-all.json").read_bytes())[job_id]
    for native in (single, listed):
        for key in VOLATILE_JOB_KEYS:
            native.pop(key, None)
    assert single == listed, sorted(k for k in single if single[k] != listed.get(k))
    assert fingerprint(single) == fingerprint(listed)


@pytest.mark.parametrize("folder", CAPTURED)
def test_nodes_normalise_on_every_release(folder):
    """The node listing of the release: 22.05's sinfo --json; later, scontrol
    show nodes --json (captured as scontrol-show-nodes.json)."""
    fmt = format_of_release(f"slurm {release_of(folder)}")
    name = "sinfo-busy.json" if fmt.nodes_argv[0] == "sinfo" else "scontrol-show-nodes.json"
    path = BASE / folder / name
    if not path.exists():
        pytest.fail(f"{folder}: no {name} captured (deploy/slurm/capture.sh writes it)")
    nodes = parse_nodes(path.read_bytes(), fmt.nodes_argv[0])
    assert len(nodes) >= 2
    for node_name, native in nodes.items():
        record = normalise_node(node_name, native)
        assert record["state"] in ("free", "busy", "drain", "down"), record["native_state"]
        assert record["resources"]["available"]["cpus"] == 4


def test_a_format_jobtap_does_not_know_is_one_line_naming_it():
    doc = orjson.loads((BASE / CAPTURED[-1] / "squeue-1-active.json").read_bytes())
    doc["meta"]["plugin"]["data_parser"] = "data_parser/v0.0.45"
    with pytest.raises(UnknownFormat, match=r"data_parser v0\.0\.45") as caught:
        parse_squeue(orjson.dumps(doc))
    assert "\n" not in str(caught.value) and isinstance(caught.value, StatError)
    with pytest.raises(UnknownFormat, match=r"Slurm 26\.05\.1"):
        format_of_release("slurm 26.05.1")


def test_the_formats_cover_every_supported_release():
    assert [f.releases for f in FORMATS.values()] == [
        "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11",
    ]  # fmt: skip
