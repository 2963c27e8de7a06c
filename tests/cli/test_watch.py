"""`jobtap watch` as a person sees it on a terminal (colour, a header) and as a
script reads it through a pipe (plain aligned columns), from a real process."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys

from tests.support.sdk import SITE, Writer

JOBTAP = [sys.executable, "-m", "jobtap.cli"]


def env(redis_server, tmp_path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBTAP_")}
    clean.pop("NO_COLOR", None)
    return {**clean, "JOBTAP_REDIS": redis_server.url, "JOBTAP_SITE": SITE,
            "JOBTAP_CREDENTIALS": str(tmp_path / "none")}  # fmt: skip


def written(r) -> None:
    w = Writer(r)
    w.job("1.pbs")
    w.job("1.pbs", state="running")
    w.job("2.pbs", user="bob", state="held", reason="Hold_Types u")


ARGS = ["watch", "--all", "--count", "2", "--timeout", "10"]


def test_watch_on_a_terminal_has_colour_and_a_header(redis_server, r, tmp_path):
    written(r)
    main, sub = pty.openpty()
    proc = subprocess.Popen([*JOBTAP, *ARGS], stdin=sub, stdout=sub, stderr=sub,
                            env=env(redis_server, tmp_path))  # fmt: skip
    os.close(sub)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.wait(10) == 0, out
    text = out.decode()
    assert "\x1b[" in text  # coloured
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [line for line in plain.splitlines() if line.strip()]
    assert lines[0].split() == ["time", "site", "job", "user", "type", "state", "reason"]
    assert "1.pbs" in lines[1] and "running" in lines[1]
    assert "2.pbs" in lines[2] and "held" in lines[2]


def test_watch_through_a_pipe_is_plain(redis_server, r, tmp_path):
    written(r)
    res = subprocess.run([*JOBTAP, *ARGS], capture_output=True, text=True, timeout=30,
                         env=env(redis_server, tmp_path))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "\x1b[" not in res.stdout
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and not lines[0].startswith("time")
    assert lines[1].split()[1:] == [SITE, "2.pbs", "bob", "initial", "held"]


# -- a job the user cannot see: said once, not waited for in silence ------------------------------
def alice_env(redis_server, tmp_path) -> dict[str, str]:
    """alice as a cluster user: a Redis user of her own (jobtap acl sync and grant,
    as the admin), her credential file, no $JOBTAP_REDIS."""
    admin = env(redis_server, tmp_path)
    users = tmp_path / "users"
    users.write_text("alice\nbob\n")
    creds = tmp_path / "alice-credentials"
    for args in (["sync", "--users-file", str(users), "--no-services"],
                 ["grant", "alice", "--output", str(creds)]):  # fmt: skip
        subprocess.run([*JOBTAP, "acl", *args, "--site", SITE, "--redis", redis_server.url],
                       check=True, capture_output=True, env=admin, timeout=30)  # fmt: skip
    clean = {k: v for k, v in admin.items() if k not in ("JOBTAP_REDIS", "JOBTAP_SITE")}
    return {**clean, "JOBTAP_CREDENTIALS": str(creds)}


def watch_briefly(args: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*JOBTAP, "watch", *args, "--timeout", "0.3"], capture_output=True,
                          text=True, timeout=30, env=environ)  # fmt: skip


def test_watch_of_another_users_job_says_why_it_may_never_come(redis_server, r, tmp_path):
    written(r)  # 1.pbs is alice's, 2.pbs bob's
    alice = alice_env(redis_server, tmp_path)
    res = watch_briefly(["2.pbs"], alice)
    assert res.returncode == 0 and res.stdout == "", res.stderr
    (note,) = res.stderr.splitlines()  # once
    assert "waiting for job 2.pbs" in note and "user alice" in note
    assert "another user's job" in note and "mistyped" in note
    own = watch_briefly(["1.pbs"], alice)  # her own job: shown, nothing said
    assert own.returncode == 0 and own.stderr == "", own.stderr
    assert "1.pbs" in own.stdout and "running" in own.stdout


def test_watch_of_a_mistyped_id_says_so_with_or_without_initial(redis_server, r, tmp_path):
    written(r)
    environ = env(redis_server, tmp_path)
    for extra in ([], ["--no-initial"]):
        res = watch_briefly(["1.bps", "1.pbs", "--user", "alice", *extra], environ)
        assert res.returncode == 0, res.stderr
        (note,) = res.stderr.splitlines()
        assert "waiting for job 1.bps:" in note and f"site {SITE}" in note, note
        assert "user alice" in note and "1.pbs" not in note


def test_watch_of_an_unknown_id_without_a_user_says_what_to_give(redis_server, r, tmp_path):
    """No user known (an operator's URL): the CLI's own option (--user), in the
    same words as the note of a watch that waits, and exit 1: nothing to wait on."""
    written(r)
    res = watch_briefly(["999999.x", "1.pbs"], env(redis_server, tmp_path))
    assert res.returncode == 1 and res.stdout == "", res.stderr
    (line,) = res.stderr.splitlines()
    assert line.startswith("Error: job 999999.x: not in site "), line
    assert "--user OWNER waits for OWNER's job" in line and "user=" not in line, line
    assert "1.pbs" not in line, line
