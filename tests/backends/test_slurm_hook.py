"""Completion records (collector/backends/slurm/hook.py): what the slurmctld
hook sends as JobCompLoc, built by the real script from jobcomp/script's
environment as captured on each release (tests/fixtures/slurm/*/jobcomp-env/),
and which of them the backend accepts as a job's final."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest

from jobtap.collector.backends.slurm import normalise_job, parse_squeue
from jobtap.collector.backends.slurm.hook import completion_record
from sim.rig.paths import ROOT
from sim.rig.wait import eventually
from tests.backends.test_slurm_versions import BASE, CAPTURED, finals, job_ids

HOOK = ROOT / "deploy" / "slurm" / "jobtap-slurmctld-hook.sh"
SITE = "hooksite"


def jobcomp_envs(folder: str) -> dict[str, dict[str, str]]:
    """jobcomp/script's environment for each job of the workload, by jobtap id,
    where the capture ran on the cluster whose ids job-ids.txt names."""
    ids = set(job_ids(folder).values())
    out = {}
    for path in sorted((BASE / folder / "jobcomp-env").glob("[0-9]*.txt")):
        env = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        array, task = env.get("ARRAYJOBID", "0"), env.get("ARRAYTASKID", "")
        job_id = f"{array}_{task}" if array != "0" else env["JOBID"]
        if job_id.partition("_")[0] in ids:
            out[job_id] = env
    return out


SAME_RUN = [f for f in CAPTURED if jobcomp_envs(f)]


def hook_record(redis_server, tmp_path: Path, env: dict[str, str]) -> tuple[str, dict]:
    """Run the real hook as slurmctld's jobcomp/script runs it (that environment
    and nothing else); return the poked id and its fields."""
    settings = tmp_path / "hook.env"
    settings.write_text(f"JOBTAP_SITE={SITE}\nJOBTAP_REDIS={redis_server.url}\n")
    proc = subprocess.run(
        ["/bin/bash", str(HOOK)], env={**env, "JOBTAP_HOOK_ENV": str(settings)},
        capture_output=True, timeout=10, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    r = redis_server.client()
    entries = eventually(lambda: r.xrange(f"jobtap:{{{SITE}}}:pokes"), what="the poke")
    r.delete(f"jobtap:{{{SITE}}}:pokes")
    _, fields = entries[0]
    return fields[b"ids"].decode(), fields


def test_every_release_with_a_matching_capture_is_covered():
    assert len(SAME_RUN) >= 4, SAME_RUN


@pytest.mark.parametrize("folder", SAME_RUN)
def test_accepted_completions_normalise_as_the_final_sacct_gives(folder, redis_server, tmp_path):
    """Each job that ended COMPLETED or FAILED: the hook's record, with the
    job's last listed record for what jobcomp does not say, normalises to what
    sacct gives as its final (but the CPU time, which only sacct knows); the
    others (cancelled, timed out) are refused, to be read from slurmctld."""
    listed = parse_squeue((BASE / folder / "squeue-1-active-states-all.json").read_bytes())
    final = finals(folder)
    accepted = refused = 0
    for job_id, env in jobcomp_envs(folder).items():
        poked, fields = hook_record(redis_server, tmp_path, env)
        assert poked == job_id and fields[b"ended"] == b"1"
        native = completion_record(job_id, fields[b"record"], listed.get(job_id))
        if env["JOBSTATE"] not in ("COMPLETED", "FAILED"):
            assert native is None, (job_id, env["JOBSTATE"])
            refused += 1
            continue
        assert native is not None, (job_id, env["JOBSTATE"], env["EXITCODE"])
        accepted += 1
        got, want = normalise_job(job_id, native), final[job_id]
        want["resources_used"].pop("cput", None)
        differ = {k: (got[k], want[k]) for k in want if k != "native" and got[k] != want[k]}
        assert not differ, (job_id, differ)
    assert accepted >= 10 and refused >= 3, (accepted, refused)


def test_a_hostile_job_name_reaches_the_record_intact(redis_server, tmp_path):
    env = dict(jobcomp_envs(SAME_RUN[-1])[job_ids(SAME_RUN[-1])["failed"]])
    env["JOBNAME"] = 'a"b\\c\td é {"x": 1}'
    job_id, fields = hook_record(redis_server, tmp_path, env)
    facts = orjson.loads(fields[b"record"])
    assert facts["JOBNAME"] == 'a"b\\c d é {"x": 1}'  # a control character becomes a space
    assert facts["JOBID"] == env["JOBID"] and "UID" not in facts


@pytest.mark.parametrize(
    "change",
    [
        {"JOBSTATE": "CANCELLED"},
        {"JOBSTATE": "TIMEOUT"},
        {"JOBSTATE": "OUT_OF_MEMORY"},
        {"EXITCODE": "0:15"},  # killed by a signal: the batch step's code is not this
        {"EXITCODE": "0:0"},  # FAILED with a zero code: not the script's
        {"EXITCODE": "x"},
        {"JOBID": "99999"},  # not the poked job
        {"END": ""},
    ],
)
def test_what_cannot_be_a_final_is_refused(change):
    folder = SAME_RUN[-1]
    job_id = job_ids(folder)["failed"]
    env = jobcomp_envs(folder)[job_id]
    listed = parse_squeue((BASE / folder / "squeue-1-active-states-all.json").read_bytes())
    facts = {k: env[k] for k in ("JOBID", "JOBSTATE", "EXITCODE", "START", "END", "USERNAME",
                                  "PARTITION", "NODES", "ARRAYJOBID", "ARRAYTASKID")}  # fmt: skip
    assert completion_record(job_id, orjson.dumps(facts), listed[job_id]) is not None
    assert completion_record(job_id, orjson.dumps({**facts, **change}), listed[job_id]) is None


def test_a_job_never_listed_or_garbage_is_read_from_slurmctld():
    folder = SAME_RUN[-1]
    job_id = job_ids(folder)["completed"]
    env = jobcomp_envs(folder)[job_id]
    raw = orjson.dumps(env)
    listed = parse_squeue((BASE / folder / "squeue-1-active-states-all.json").read_bytes())
    assert completion_record(job_id, raw, listed[job_id]) is not None
    assert completion_record(job_id, raw, None) is None  # no listing: mem, priority unknown
    for garbage in (b"", b"[1]", b"{", orjson.dumps({**env, "JOBID": 5})):
        assert completion_record(job_id, garbage, listed[job_id]) is None


def test_prolog_and_epilog_pokes_carry_no_record(redis_server, tmp_path):
    env = {"SLURM_SCRIPT_CONTEXT": "epilog_slurmctld", "SLURM_JOB_ID": "41",
           "JOBID": "41", "JOBSTATE": "COMPLETED", "PATH": os.environ["PATH"]}  # fmt: skip
    job_id, fields = hook_record(redis_server, tmp_path, env)
    assert job_id == "41" and b"record" not in fields and fields[b"ended"] == b"1"


def hook_envs() -> list[tuple[str, Path]]:
    """Of each release's captured PrologSlurmctld/EpilogSlurmctld environments
    (24.11's are two files of its own: tests/fixtures/slurm/README.md), one
    prolog and one epilog of a plain job and of an array's task."""
    out = []
    for folder in CAPTURED:
        paths = sorted((BASE / folder / "hook-env").glob("*_slurmctld-*.txt"))
        paths += sorted((BASE / folder).glob("hook-env-*.txt"))
        kinds: dict[tuple[str, bool], Path] = {}
        for path in paths:
            text = path.read_text()
            kind = (path.name.split("_")[0].split("-")[-1], "SLURM_ARRAY_TASK_ID=" in text)
            kinds.setdefault(kind, path)
        out += [(folder, path) for path in kinds.values()]
    return out


def test_every_release_has_hook_environments():
    assert {folder for folder, _ in hook_envs()} == set(CAPTURED)


@pytest.mark.parametrize(("folder", "path"), hook_envs(), ids=lambda v: getattr(v, "name", v))
def test_the_hook_pokes_jobtaps_id_of_each_releases_job(folder, path, redis_server, tmp_path):
    """The hook run with what slurmctld gave it on each release pokes the
    job's jobtap id (ARRAY_TASK for an array's task, whose own SLURM_JOB_ID is
    another number), the epilog's poke marked ended, neither with a record."""
    env = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    want = f"{array}_{task}" if array and task else env["SLURM_JOB_ID"]
    job_id, fields = hook_record(redis_server, tmp_path, env)
    assert job_id == want and b"record" not in fields
    ended = env["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmctld"
    assert (fields.get(b"ended") == b"1") == ended, (env["SLURM_SCRIPT_CONTEXT"], fields)
