#!/usr/bin/env python3
"""A test-only stand-in for OpenPBS ``qmgr -c "COMMAND"``, for the hook commands
deploy/pbs/install-hook.sh runs.  Standard library only.

No qmgr hook output was captured on the real server, so this copies the documented
behaviour (OpenPBS 23.06 reference guide, "qmgr" and the hooks chapter of the
administrator's guide), messages approximated:

* ``create hook NAME``: a new hook (fails, status 1, if NAME exists);
* ``delete hook NAME``, ``list hook NAME``: fail, status 1, if it does not exist;
  ``list`` prints its attributes;
* ``set hook NAME ATTR = VALUE``: ``event``, ``fail_action``, ``alarm``,
  ``enabled``, ``order``, ``user``; an unknown attribute fails;
* ``import hook NAME CONTENT_TYPE CONTENT_ENCODING FILE``: ``application/x-python``
  (the hook's code) or ``application/x-config`` (its configuration; a ``.json``
  file must hold valid JSON); FILE is read as qmgr reads it, relative to the
  current directory, and PBS keeps its own copy: a later change of the file
  does nothing until it is imported again.

* ``list server [ATTR[,ATTR...]]``: ``Server NAME`` then ``    ATTR = VALUE`` lines;
  ``set server ATTR = VALUE`` (root only).  The server's attributes start as the
  real OpenPBS 23.06.06 server reported them (``qstat -B -f -F json``,
  tests/fixtures/pbs/80-final.qstat-B-f.json: ``query_other_jobs`` is ``True``
  there); nested ones (``resources_default``) are left out.

State: the JSON file named by ``$JOBTAP_FAKE_QMGR`` (created when missing);
every command line is appended to its ``"log"``.  Only root may manage hooks
(``JOBTAP_FAKE_QMGR_UID`` overrides the uid for a test).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

ATTRIBUTES = {"event", "fail_action", "alarm", "enabled", "order", "user"}
# the captures stay with the tests (tests/fixtures/pbs)
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "pbs"
SERVER_CAPTURE = FIXTURES / "80-final.qstat-B-f.json"
CONTENT = {"application/x-python": "python", "application/x-config": "config"}


def captured_server() -> dict:
    """The real server's name and plain attributes, as qstat -B -f -F json gave them."""
    (name, attrs), = json.loads(SERVER_CAPTURE.read_text())["Server"].items()  # fmt: skip
    plain = {k: str(v) for k, v in attrs.items() if not isinstance(v, dict)}
    return {"name": name, "attributes": plain}


def load(path: Path) -> dict:
    state = json.loads(path.read_text()) if path.exists() else {"hooks": {}, "log": []}
    state.setdefault("server", captured_server())
    return state


def server(state: dict, verb: str, rest: list[str]) -> int:
    srv = state["server"]
    if verb == "list":
        wanted = [a for arg in rest for a in arg.split(",") if a]
        print(f"Server {srv['name']}")
        for key, value in srv["attributes"].items():
            if not wanted or key in wanted:
                print(f"    {key} = {value}")
        return 0
    if verb == "set":
        match = re.match(r"^(\w+)\s*=\s*(.*)$", " ".join(rest))
        if not match:
            return fail(srv["name"], f"malformed attribute: {' '.join(rest)}")
        srv["attributes"][match[1]] = match[2].strip("'\"")
        return 0
    sys.stderr.write(f"qmgr: the stand-in imitates list and set server only: {verb}\n")
    return 2


def fail(name: str, message: str) -> int:
    sys.stderr.write(f"qmgr obj={name} svr=default: {message}\n")
    return 1


def run(state: dict, command: str) -> int:
    words = shlex.split(command)
    if len(words) >= 2 and words[1] == "server":
        return server(state, words[0], words[2:])
    if len(words) < 3 or words[1] != "hook":
        sys.stderr.write(f"qmgr: the stand-in imitates hook commands only: {command}\n")
        return 2
    verb, name, rest = words[0], words[2], words[3:]
    hooks = state["hooks"]
    if verb == "create":
        if name in hooks:
            return fail(name, "hook name already registered")
        defaults = {"enabled": "true", "event": "", "alarm": "30", "fail_action": "none",
                    "order": "1"}  # fmt: skip
        hooks[name] = {"attributes": defaults, "imported": {}}
        return 0
    if name not in hooks:
        return fail(name, "hook not found")
    hook = hooks[name]
    if verb == "delete":
        del hooks[name]
    elif verb == "list":
        print(f"Hook {name}")
        for key, value in sorted(hook["attributes"].items()):
            print(f"    {key} = {value}")
    elif verb == "set":
        match = re.match(r"^(\w+)\s*=\s*(.*)$", " ".join(rest))
        if not match or match[1] not in ATTRIBUTES:
            return fail(name, f"unknown or malformed attribute: {' '.join(rest)}")
        hook["attributes"][match[1]] = match[2].strip("'\"")
    elif verb == "import":
        if len(rest) != 3 or rest[0] not in CONTENT:
            return fail(name, f"import needs a content type, an encoding and a file: {rest}")
        path = Path(rest[2])
        try:
            text = path.read_text()
        except OSError as exc:
            return fail(name, f"cannot read {rest[2]}: {exc.strerror}")
        if rest[0] == "application/x-config" and path.suffix == ".json":
            try:
                json.loads(text)
            except ValueError:
                return fail(name, f"{rest[2]}: not valid JSON")
        hook["imported"][CONTENT[rest[0]]] = text
    else:
        sys.stderr.write(f"qmgr: unknown command {verb}\n")
        return 2
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] != "-c":
        sys.stderr.write('usage: qmgr -c "COMMAND"\n')
        return 2
    uid = int(os.environ.get("JOBTAP_FAKE_QMGR_UID", os.getuid()))
    path = Path(os.environ["JOBTAP_FAKE_QMGR"])
    state = load(path)
    state["log"].append(argv[2])
    if uid != 0 and not argv[2].startswith("list"):
        status = fail("-", "Unauthorized Request")
    else:
        status = run(state, argv[2])
    path.write_text(json.dumps(state, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
