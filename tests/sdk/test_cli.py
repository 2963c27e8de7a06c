"""jobtap watch / show / wait / export, built on the SDK, against a real redis-server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import click
import orjson
import pytest
from click.testing import CliRunner

from jobtap.cli.jobs import register, shell_status
from jobtap.entries import xrange_events
from sim.rig.paths import ROOT
from tests.support.ids import eid
from tests.support.sdk import SITE, K


@click.group()
def jobtap() -> None:
    """A stand-in for the real jobtap group."""


register(jobtap)


@pytest.fixture
def cli(redis_server, hermetic):
    runner = CliRunner()

    def invoke(*args: str, **kw):
        return runner.invoke(jobtap, [*args, "--redis", redis_server.url, "--site", SITE], **kw)

    return invoke


def later(delay, fn, *args, **kw):
    t = threading.Timer(delay, fn, args, kw)
    t.start()
    return t


def test_show_readable_json_and_unknown(cli, writer):
    writer.job("1.pbs", state="running", comment="hello world")
    result = cli("show", "1.pbs")
    assert result.exit_code == 0, result.output
    lines = dict(line.split(None, 1) for line in result.output.splitlines())
    assert lines["state"] == "running" and lines["comment"] == "hello world"
    assert lines["requested"] == '{"ncpus":1}' and "native" not in lines
    assert "Job_Owner" in cli("show", "1.pbs", "--native").output
    record = orjson.loads(cli("show", "1.pbs", "--json").output)
    assert (
        record["id"] == "1.pbs" and record["version"] == 1 and record["native"]["job_state"] == "R"
    )
    writer.job("3.pbs")
    writer.finish("3.pbs")  # its native record kept packed: shown as a live one's
    assert orjson.loads(cli("show", "3.pbs", "--json").output)["native"]["job_state"] == "C"
    assert "Job_Owner" in cli("show", "3.pbs", "--native").output
    result = cli("show", "404.pbs")
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: job 404.pbs is not in the cache of site {SITE}"


def test_wait_exits_with_the_jobs_exit_status(cli, writer):
    writer.job("1.pbs")
    t = later(0.3, writer.finish, "1.pbs", "failed", 3)
    result = cli("wait", "1.pbs", "--timeout", "10")
    t.join()
    assert result.exit_code == 3, result.output
    assert "1.pbs failed (exit status 3)" in result.output
    writer.job("2.pbs")
    writer.finish("2.pbs", "cancelled", 271)  # PBS: killed by signal 15
    assert cli("wait", "2.pbs", "-q").exit_code == 143
    writer.job("3.pbs")
    writer.finish("3.pbs")
    assert cli("wait", "3.pbs").exit_code == 0


def test_wait_timeout_is_124(cli, writer):
    writer.job("1.pbs")
    started = time.monotonic()
    result = cli("wait", "1.pbs", "--timeout", "0.3")
    assert result.exit_code == 124 and time.monotonic() - started < 5
    assert "did not reach" in result.output


def test_wait_for_a_state(cli, writer):
    writer.job("1.pbs")
    t = later(0.2, writer.job, "1.pbs", state="running")
    assert cli("wait", "1.pbs", "--state", "running", "--timeout", "10").exit_code == 0
    t.join()


def columns(output: str) -> list[list[str]]:
    """Each line of `jobtap watch` split into its columns, without the time."""
    return [re.split(r"\s{2,}", line)[1:] for line in output.splitlines()]


@pytest.mark.parametrize("updates", [(), ("--updates",)])
def test_watch_jobs_ends_after_their_finals(cli, writer, updates):
    writer.job("1.pbs")
    writer.job("2.pbs", user="bob")

    def changes():
        writer.job("1.pbs", state="running")
        writer.job("1.pbs", comment="hi", resources_used={"cput": "1"})
        writer.job("1.pbs", native=dict(writer.jobs["1.pbs"]["native"], mtime="1"))
        writer.finish("1.pbs", exit_status=0)
        writer.finish("2.pbs", "failed", 2)

    t = later(0.5, changes)
    result = cli("watch", "1.pbs", "2.pbs", "--timeout", "15", *updates)
    t.join()
    assert result.exit_code == 0, result.output
    assert columns(result.output) == [
        [SITE, "1.pbs", "alice", "initial", "queued"],
        [SITE, "2.pbs", "bob", "initial", "queued"],
        [SITE, "1.pbs", "alice", "state", "queued → running"],
        # with --updates: the normalised fields that changed; the native-only update
        # (mtime) names no normalised field and is left to --json
        *([[SITE, "1.pbs", "alice", "update", "running", "comment, resources_used"]]
          if updates else []),
        [SITE, "1.pbs", "alice", "final", "running → completed", "exit 0"],
        [SITE, "2.pbs", "bob", "final", "queued → failed", "exit 2"],
    ], result.output  # fmt: skip


def test_watch_lines_are_aligned_columns(cli, writer):
    writer.job("1.pbs")
    writer.job("123456789012.pbs", user="bartholomew")
    writer.job("7.pbs", user="al")
    result = cli("watch", "--all", "--count", "3", "--timeout", "15")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 3 and "\x1b[" not in result.output  # piped: no colour
    # every column starts at the same place on each line once the widest value was seen
    starts = {line.index(" initial ") for line in lines[1:]}
    assert len(starts) == 1, lines


def test_watch_all_as_json(cli, writer):
    writer.job("1.pbs")
    t = later(0.5, lambda: [writer.job("2.pbs", user="bob"), writer.node("n1")])
    result = cli("watch", "--all", "--nodes", "--json", "--count", "3", "--timeout", "15")
    t.join()
    assert result.exit_code == 0, result.output
    events = [orjson.loads(line) for line in result.output.splitlines()]
    assert [(e["type"], e["object_id"]) for e in events] == [
        ("initial", "1.pbs"), ("new", "2.pbs"), ("new", "n1"),
    ]  # fmt: skip
    assert events[1]["user"] == "bob"


def test_watch_needs_something_to_watch(cli):
    result = cli("watch")
    assert result.exit_code == 2 and "JOBID..., --user U or --all" in result.output


def test_export_ndjson_and_groups(cli, writer, r):
    for i in range(6):
        writer.job(f"{i}.pbs")
    r.xadd(K.events, xrange_events(r, K.events)[0][1])  # a replayed event: dropped
    result = cli("export", "--since", "0", "--idle", "0.3")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [orjson.loads(x)["id"] for x in lines] == [eid(r, SITE, f"{i}.pbs", 1) for i in range(6)]
    stored = [f[b"event"] for _, f in xrange_events(r, K.events)][:6]
    assert [x.encode() for x in lines] == stored  # the events as written, byte for byte
    first = cli("export", "--group", "g", "--since", "0", "--count", "4")
    second = cli("export", "--group", "g", "--idle", "0.3")
    ids = [orjson.loads(x)["id"] for x in (first.output + second.output).splitlines()]
    assert ids == [eid(r, SITE, f"{i}.pbs", 1) for i in range(6)]
    assert r.xpending(K.events, "g")["pending"] == 0


def test_export_native_joins_the_hashes_native_records(cli, writer, r):
    writer.job("1.pbs", state="running")
    writer.job("2.pbs", user="bob")
    writer.finish("2.pbs")
    r.delete(K.job("bob", "2.pbs"))  # its retention is over: the hash expired
    writer.job("3.pbs")
    writer.finish("3.pbs")  # within it: its native record kept packed
    plain = [orjson.loads(x) for x in cli("export", "--since", "0", "--idle", "0.3").output.split()]
    assert all("native" not in e["record"] for e in plain)  # format 2
    result = cli("export", "--since", "0", "--idle", "0.3", "--native")
    assert result.exit_code == 0, result.output
    joined = [orjson.loads(x) for x in result.output.splitlines()]
    assert [e["record"]["native"] for e in joined] == [
        {"job_state": "R", "Job_Owner": "alice@vm"}, None, None,
        *[{"job_state": "C", "Job_Owner": "alice@vm"}] * 2,
    ]  # fmt: skip
    for a, b in zip(plain, joined, strict=True):
        assert {**a, "record": {**a["record"], "native": b["record"]["native"]}} == b
    assert "null once the hash has expired" in " ".join(cli("export", "--help").output.split())


def test_expected_failures_are_one_line(hermetic, tmp_path):
    from jobtap.sim.localredis import free_port

    runner = CliRunner()
    url = f"redis://127.0.0.1:{free_port()}/0"
    for args in (["show", "1.pbs"], ["wait", "1.pbs"], ["watch", "--all"], ["export"]):
        result = runner.invoke(jobtap, [*args, "--redis", url])
        assert result.exit_code == 1, (args, result.output)
        assert (
            result.output.startswith("Error: cannot reach Redis at")
            and len(result.output.splitlines()) == 1
        )
    cred = tmp_path / "credentials"
    cred.write_text("username = alice\n")
    cred.chmod(0o644)
    result = runner.invoke(jobtap, ["show", "1.pbs", "--credentials", str(cred)])
    assert result.exit_code == 1 and "refused" in result.output and "Traceback" not in result.output


def test_export_is_flushed_line_by_line_and_survives_a_closed_pipe(redis_server, writer, tmp_path):
    for i in range(3):
        writer.job(f"{i}.pbs")
    env = dict(os.environ, JOBTAP_REDIS=redis_server.url, JOBTAP_SITE=SITE,
               JOBTAP_CREDENTIALS=str(tmp_path / "none"), PYTHONPATH=str(ROOT))  # fmt: skip
    code = (
        "import click; from jobtap.cli.jobs import register\n"
        "g = click.Group('jobtap'); register(g); g()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "export", "--since", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )  # fmt: skip
    try:
        # the lines arrive while export is still running (it never exits by itself)
        first = [proc.stdout.readline() for _ in range(3)]
        assert [orjson.loads(x)["id"] for x in first] == [
            eid(writer.applier.redis, SITE, f"{i}.pbs", 1) for i in range(3)
        ]
        writer.job("0.pbs", state="running")
        assert orjson.loads(proc.stdout.readline())["id"] == eid(
            writer.applier.redis, SITE, "0.pbs", 2
        )
        proc.stdout.close()  # the reader goes away (like `| head`)
        for i in range(3):
            writer.job(f"{i}.pbs", comment="x" * 70_000)
        assert proc.wait(10) == 1
        assert b"Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_shell_status():
    from jobtap import Job

    assert shell_status(Job("1", state="completed", exit_status=0)) == 0
    assert shell_status(Job("1", state="completed", exit_status=None)) == 0
    assert shell_status(Job("1", state="failed", exit_status=None)) == 1
    assert shell_status(Job("1", state="failed", exit_status=255)) == 255
    assert shell_status(Job("1", state="cancelled", exit_status=265)) == 137
    assert shell_status(Job("1", state="failed", exit_status=-3)) == 1


def test_wait_for_an_unknown_state_is_a_usage_error(cli, writer):
    writer.job("1.pbs")
    started = time.monotonic()
    result = cli("wait", "1.pbs", "--state", "runing", "--timeout", "30")
    assert result.exit_code == 2 and time.monotonic() - started < 10, result.output
    assert "'runing' is not one of 'cancelled', 'completed'" in result.output


def test_wait_for_an_unknown_job_says_what_to_give(cli, writer):
    writer.job("1.pbs")
    result = cli("wait", "999999.x", "--timeout", "30")
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: job 999999.x: not in site {SITE}'s cache")
    assert "--user OWNER" in result.output and "user=" not in result.output
