"""`make demo` as a new user meets it, in a real terminal (tmux): the banner of
what runs where under a live `jobtap top`; q stops everything it started."""

from __future__ import annotations

import os
import re
import sys

from sim.rig.wait import eventually
from tests.cli.test_cli import port_closed
from tests.support.terminal import Tmux


def test_demo_shows_the_board_with_its_banner_and_q_stops_it_all(tmp_path):
    tmux = Tmux(tmp_path)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "TERM": "screen-256color"}  # fmt: skip
    try:
        tmux.start([sys.executable, "-m", "jobtap.cli", "demo", "--jobs", "300", "--nodes", "30",
                    "--interval", "1"], env, width=170, height=60)  # fmt: skip
        # one whole screen: a capture may fall in the middle of the board's redraw
        parts = ("(all)", "jobtap top — site demo — every job", "try in another terminal",
                 "jobtap wait")  # fmt: skip
        board = eventually(lambda: all(p in (s := tmux.screen()) for p in parts) and s,
                           timeout=60, what="the board with its banner")  # fmt: skip
        port = int(re.search(r"redis://127\.0\.0\.1:(\d+)/0", board).group(1))
        eventually(lambda: "collector ok" in tmux.screen(), what="the collector's health")
        tmux.send("q")
        eventually(lambda: tmux.exit_status() is not None, timeout=30, what="the demo ended")
        assert tmux.exit_status() == 0
        after = tmux.screen()
        assert "jobtap demo: stopped." in after and "Traceback" not in after
        assert port_closed(port)
    finally:
        tmux.close()
