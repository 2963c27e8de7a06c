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
