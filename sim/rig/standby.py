"""Two collectors of one site on the simulator, as separate processes, for the
standby tests and ``bench.takeover``: an active one and a standby, a real
``jobtap worker``, and a tap of the site stream.

Both processes simulate the same cluster: the same seed, and a clock that
follows the wall clock from a shared start (``--t0``, ``--speed`` simulated
seconds per second) up to ``--freeze`` seconds, where it stops; the test's own
simulation advanced to that time is the ground truth of what both saw.  Each
process names itself as if on a host of its own (``--name``), so the one that
takes over waits for the lease to run out, as on another host.

Run as ``python -m sim.rig.standby --redis URL ...`` (see :func:`main`).
Two places to act, each named by a file the test creates:

- ``--pause-file``: the collector, about to send a shipment (the lease checked,
  its chunks built), removes the file and SIGSTOPs itself: resumed past its
  lease, it sends chunks of a deposed generation;
- ``--kill-file``: right after sending a shipment, before it notes anything
  (meta, the ledger, its host state), it SIGKILLs itself: mid-burst.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import redis

from jobtap.collector.cycle import Collector
from jobtap.collector.hoststate import FILENAME, HostState
from jobtap.collector.service import CollectorService
from jobtap.contract.chunk import PRIORITIES
from jobtap.contract.lease import describe
from jobtap.entries import resolve
from jobtap.keys import SiteKeys
from jobtap.replies import entries
from jobtap.sim import SimBackend
from jobtap.sim.model import Simulation
from sim.rig.epochs import Written
from sim.rig.wait import eventually

SITE = "standby"
K = SiteKeys(SITE)
SIM = dict(seed=11, nodes=40, jobs=300)


class WallClockSim(SimBackend):
    """The simulator whose clock follows the wall clock (see the module)."""

    def __init__(self, t0: float, speed: float, freeze: float, **options: Any):
        super().__init__(tick=0, **options)
        self.t0, self.speed, self.freeze = t0, speed, freeze
        self.start = self.simulation.now

    def _catch_up(self) -> None:
        target = self.start + min(max(0.0, time.time() - self.t0), self.freeze) * self.speed
        if target > self.simulation.now:
            self.simulation.advance(target - self.simulation.now)

    def probe(self, since):  # type: ignore[no-untyped-def]
        self._catch_up()
        return super().probe(since)

    def stat_jobs(self):  # type: ignore[no-untyped-def]
        self._catch_up()
        return super().stat_jobs()

    def stat_some(self, job_ids):  # type: ignore[no-untyped-def]
        self._catch_up()
        return super().stat_some(job_ids)


class _Collector(Collector):
    pause_file: Path | None = None
    kill_file: Path | None = None

    def _send(self, pipe: redis.client.Pipeline) -> None:
        commands = len(pipe)  # (execute() empties the pipeline)
        if self.pause_file is not None and commands and self.pause_file.exists():
            self.pause_file.unlink()
            os.kill(os.getpid(), signal.SIGSTOP)  # chunks in hand, the lease checked
        super()._send(pipe)
        if self.kill_file is not None and commands and self.kill_file.exists():
            os.kill(os.getpid(), signal.SIGKILL)  # shipped, nothing noted


def main(argv: list[str] | None = None) -> int:
    from jobtap.cli import logs

    p = argparse.ArgumentParser()
    p.add_argument("--redis", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--speed", type=float, default=60.0)
    p.add_argument("--freeze", type=float, default=30.0)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--lease", type=float, default=1.5)
    p.add_argument("--state-dir", type=Path, required=True)
    p.add_argument("--pause-file", type=Path)
    p.add_argument("--kill-file", type=Path)
    p.add_argument("--follow", action="store_true")
    args = p.parse_args(argv)
    logs.setup("text", "INFO")
    backend = WallClockSim(args.t0, args.speed, args.freeze, **SIM)
    r = redis.Redis.from_url(args.redis)
    col = _Collector(backend, r, site=SITE, nodes_every=3, chunk_size=100, reconcile_every=0)
    col.pause_file, col.kill_file = args.pause_file, args.kill_file
    state = HostState.load(args.state_dir / FILENAME)
    svc = CollectorService(col, interval=args.interval, lease=args.lease, host=args.name,
                           follow=args.follow, state=state, max_backoff=1.0)  # fmt: skip
    svc.install_signal_handlers()
    return svc.run()


class Tap:
    """Every entry of the site stream, checked against its content (Written)."""

    def __init__(self, url: str):
        self.r = redis.Redis.from_url(url)
        self.written = Written(strict=False)
        self.pos = "0-0"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tap", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                reply = self.r.xread({K.events: self.pos}, count=1000, block=100)
                got = resolve(self.r, entries(reply))
            except redis.RedisError:
                self.stopping.wait(0.05)
                continue
            for sid, fields in got:
                if fields:
                    self.written.add(sid, orjson.loads(fields[b"event"]))
                self.pos = sid

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.written.gather(self.r, K.events)


class Site:
    """The processes of one run: collectors by name, one worker; logs in ``workdir``."""

    def __init__(self, url: str, workdir: Path, *, speed: float = 60.0, freeze: float = 30.0,
                 interval: float = 0.5, lease: float = 1.5):  # fmt: skip
        self.url = url
        self.workdir = workdir
        self.t0 = time.time()
        self.speed, self.freeze, self.interval, self.lease_s = speed, freeze, interval, lease
        self.r = redis.Redis.from_url(url)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.worker: subprocess.Popen[bytes] | None = None
        self.tap = Tap(url)

    def start_worker(self) -> None:
        log = open(self.workdir / "worker.log", "ab")  # noqa: SIM115 - the child keeps it
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "jobtap.cli", "worker", "--redis", self.url, "--site", SITE],
            stdout=log, stderr=log,
        )  # fmt: skip

    def start(self, name: str, *extra: str) -> subprocess.Popen[bytes]:
        self.logs[name] = self.workdir / f"{name}.log"
        log = open(self.logs[name], "ab")  # noqa: SIM115 - the child keeps it
        cmd = [sys.executable, "-m", "sim.rig.standby", "--redis", self.url,
               "--name", name, "--t0", str(self.t0), "--speed", str(self.speed),
               "--freeze", str(self.freeze), "--interval", str(self.interval),
               "--lease", str(self.lease_s), "--state-dir", str(self.workdir / f"state-{name}"),
               *extra]  # fmt: skip
        self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=log)
        return self.procs[name]

    def lease(self) -> dict[str, Any]:
        return describe(self.r, K)

    def holder_name(self) -> str:
        holder = self.lease().get("holder") or ""
        return holder.partition(":")[0]

    def log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def sim_end(self) -> float:
        """The simulated time both collectors' clocks stop at."""
        return Simulation(seed=SIM["seed"], nodes=SIM["nodes"], initial_jobs=SIM["jobs"]).now + (
            self.freeze * self.speed
        )

    def truth(self) -> Simulation:
        sim = Simulation(seed=SIM["seed"], nodes=SIM["nodes"], initial_jobs=SIM["jobs"])
        sim.advance(self.freeze * self.speed)
        return sim

    def until_frozen(self, extra_cycles: float = 3) -> None:
        """Wait until the simulated clock stopped and a few full cycles ran since."""
        left = self.t0 + self.freeze + extra_cycles * self.interval - time.time()
        if left > 0:
            time.sleep(left)  # the simulation's clock, not a wait for an outcome

    def drained(self) -> bool:
        from rq import Queue

        for prio in PRIORITIES:
            q = Queue(K.rq_queue(prio), connection=self.r)
            if q.count or q.started_job_registry.get_job_count(cleanup=False):
                return False
        return True

    def stop(self) -> None:
        """Stop every process (SIGCONT first: a stopped one cannot end)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        try:
            eventually(self.drained, timeout=60, what="the queues drained")
        finally:
            if self.worker is not None:
                self.worker.send_signal(signal.SIGTERM)
                try:
                    self.worker.wait(20)
                except subprocess.TimeoutExpired:
                    self.worker.kill()
                    self.worker.wait()
            self.tap.stop()


def proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


def wait_holder(site: Site, name: str, timeout: float = 30.0) -> float:
    """Wait until ``name`` holds the lease; return when (time.monotonic())."""
    eventually(lambda: site.holder_name() == name, timeout=timeout, interval=0.005,
               what=f"{name} holding the lease")  # fmt: skip
    return time.monotonic()


if __name__ == "__main__":
    sys.exit(main())
