"""Ways a real redis-server loses data, for tests: killed and started empty,
killed and started again from an older RDB snapshot (what a restore from a
backup, or a crash between two snapshots, leaves), or sent back to an older
snapshot without a restart (the same run_id: what a replica re-synced from a
stale primary holds)."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

from jobtap.sim.localredis import RedisServer

_copies = itertools.count(1)


def _clear_files(server: RedisServer) -> None:
    (server.dir / "dump.rdb").unlink(missing_ok=True)
    shutil.rmtree(server.dir / "appendonlydir", ignore_errors=True)


def restart_empty(server: RedisServer) -> None:
    """SIGKILL redis-server and start it again with nothing on disk."""
    server.stop(kill=True)
    _clear_files(server)
    server.start()


def snapshot(server: RedisServer) -> Path:
    """Write an RDB snapshot now (SAVE) and put a copy aside; return the copy."""
    client = server.client()
    try:
        client.save()
    finally:
        client.close()
    copy = server.dir / f"aside-{next(_copies)}.rdb"
    shutil.copyfile(server.dir / "dump.rdb", copy)
    return copy


def restart_from(server: RedisServer, rdb: Path) -> None:
    """SIGKILL redis-server and start it again on the snapshot ``rdb``."""
    server.stop(kill=True)
    _clear_files(server)
    shutil.copyfile(rdb, server.dir / "dump.rdb")
    server.start()


def reload_from(server: RedisServer, rdb: Path) -> None:
    """Replace the running server's data with the snapshot ``rdb``, without a
    restart (DEBUG RELOAD NOSAVE: the server needs ``enable-debug-command local``)."""
    shutil.copyfile(rdb, server.dir / "dump.rdb")
    client = server.client()
    try:
        client.execute_command("DEBUG", "RELOAD", "NOSAVE")
    finally:
        client.close()
