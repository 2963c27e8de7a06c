"""Helpers of the tests on the real Slurms of this machine (tests/live/):
Debian 12's 22.05 (deploy/slurm/start.sh) and Debian 13's 24.11 in a Debian 13
root (deploy/slurm/debian13/start.sh).  Each is a :class:`SlurmCluster`; the
session fixture of tests/live/conftest.py makes one the cluster under test
(:func:`use`), and every helper here (running Slurm commands, submitting jobs,
the Harness that drives the real collector and a real rq worker) acts on it.
One pytest-xdist worker runs the tests of one cluster (their own xdist group),
so a process has one cluster under test at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from jobtap.collector.backends.base import StatError
from jobtap.collector.backends.slurm import SlurmBackend, parse_sdiag_rpcs
from jobtap.collector.cycle import Collector
from jobtap.collector.service import CollectorService
from jobtap.keys import SiteKeys
from jobtap.schema import TERMINAL
from sim.rig.paths import ROOT
from sim.rig.pipeline import drain, final_record, meta, site_events, whole_event
from sim.rig.procs import JOBTAP
from sim.rig.wait import eventually

SITE = "slurm1"
K = SiteKeys(SITE)
# Where a state sits on a job's way; a job's observed states never go back.
RANK = {"queued": 0, "held": 0, "waiting": 0, "running": 1, "suspended": 1, "exiting": 2}
RANK.update(dict.fromkeys(TERMINAL, 3))
# What Slurm guarantees of a job cancelled while its batch script runs: SIGTERM
# ended it, seen as the shell's own exit 143 (128 + 15: the shell exited on the
# signal), as 271 (256 + 15: killed by it), whichever process the signal reached
# first, or as a plain exit code 15: a CI run (job 14513, purged then read from
# sacct) had the batch step FAILED with ExitCode "15:0" and the job "0:0".  All
# three are the same fact; a test that expects one of them flakes.
KILLED_BY_SIGTERM = frozenset({15, 143, 271})
LOCK_WAIT = 420  # seconds to wait for another session's turn
# The Slurm commands jobtap runs, by SlurmBackend's option names.
_BACKEND_COMMANDS = ("squeue", "sinfo", "sacct", "scontrol", "slurmrestd", "sdiag")


@dataclass(frozen=True)
class SlurmCluster:
    """One real Slurm on this machine and how to reach it."""

    release: str  # "22.05", "24.11": the test ids and xdist groups say it
    start_command: tuple[str, ...]
    stop_command: tuple[str, ...]
    # Where its client commands are (wrappers that chroot into its root), first
    # on PATH; None: the host's own commands.
    bin_dir: Path | None
    nodes: tuple[str, ...]
    slurmctld_pid_file: Path
    lock: Path  # sessions on one machine take turns
    # The settings file its installed slurmctld hook reads (each cluster its own:
    # tests of two clusters side by side must not poke each other's Redis).
    hook_env: Path = Path("/etc/jobtap/slurm-hook.env")

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment whose PATH finds this cluster's commands first."""
        env = dict(os.environ if base is None else base)
        if self.bin_dir is not None:
            env["PATH"] = f"{self.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def command(self, name: str) -> str:
        """The path of one of its commands (the name alone: found on PATH)."""
        return str(self.bin_dir / name) if self.bin_dir is not None else name

    def backend(self, **options) -> SlurmBackend:
        """A SlurmBackend that runs this cluster's commands."""
        paths = {name: self.command(name) for name in _BACKEND_COMMANDS}
        return SlurmBackend(**{**paths, **options})

    def start(self) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.start_command, capture_output=True, text=True, timeout=600,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> None:
        subprocess.run(self.stop_command, capture_output=True, timeout=120)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """For a bench: the cluster's lock held (waiting for the live tests or
        another bench to give it back) and the cluster started."""
        with open(self.lock, "a") as lock:
            print(f"waiting for the Slurm lock {self.lock} ...", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
            started = self.start()
            if started.returncode != 0:
                raise SystemExit(f"Slurm {self.release} did not start:\n"
                                 f"{started.stdout}{started.stderr}")  # fmt: skip
            yield

    def slurmctld_pid(self) -> int:
        return int(self.slurmctld_pid_file.read_text().strip())


_SLURM22_DIR = Path(os.environ.get("JOBTAP_SLURM_DIR", "/var/lib/jobtap-slurm"))
_SLURM24_DIR = Path(os.environ.get("JOBTAP_SLURM24_DIR", "/var/lib/jobtap-slurm24"))
_DEPLOY = ROOT / "deploy" / "slurm"
SLURM_22 = SlurmCluster(
    release="22.05",
    start_command=("bash", str(_DEPLOY / "start.sh")),
    stop_command=("bash", str(_DEPLOY / "stop.sh")),
    bin_dir=None,
    nodes=("n1", "n2", "n3", "n4"),
    slurmctld_pid_file=_SLURM22_DIR / "run" / "slurmctld.pid",
    lock=Path(os.environ.get("JOBTAP_SLURM_LOCK", "/tmp/jobtap-slurm.lock")),
)
SLURM_24 = SlurmCluster(
    release="24.11",
    start_command=("bash", str(_DEPLOY / "debian13" / "start.sh")),
    stop_command=("bash", str(_DEPLOY / "debian13" / "stop.sh")),
    bin_dir=_SLURM24_DIR / "bin",
    nodes=("m1", "m2", "m3", "m4"),
    slurmctld_pid_file=_SLURM24_DIR / "root" / "var/lib/jobtap-slurm24/run/slurmctld.pid",
    lock=Path("/tmp/jobtap-slurm24.lock"),
    hook_env=Path("/etc/jobtap/slurm24-hook.env"),
)


def from_source(release: str) -> SlurmCluster:
    """A release built by deploy/slurm/build-from-source.sh, run as a cluster of
    its own by run-from-source.sh (development: the live suite run once per
    release, JOBTAP_SLURM_FROM_SOURCE="23.02 25.11")."""
    state = Path(f"/var/lib/jobtap-slurm-{release}")
    script = str(_DEPLOY / "run-from-source.sh")
    return SlurmCluster(
        release=release,
        start_command=("bash", script, release, "start"),
        stop_command=("bash", script, release, "stop"),
        bin_dir=state / "bin",
        nodes=("n1", "n2", "n3", "n4"),
        slurmctld_pid_file=state / "run" / "slurmctld.pid",
        lock=Path(f"/tmp/jobtap-slurm-{release}.lock"),
        hook_env=Path(f"/etc/jobtap/slurm-{release}-hook.env"),
    )


CLUSTERS = {
    c.release: c
    for c in (
        SLURM_22,
        SLURM_24,
        *map(from_source, os.environ.get("JOBTAP_SLURM_FROM_SOURCE", "").split()),
    )
}
_under_test: list[SlurmCluster] = [SLURM_22]


def use(cluster: SlurmCluster) -> None:
    """Make ``cluster`` the one every helper here acts on (the session fixture)."""
    _under_test[0] = cluster


def cluster() -> SlurmCluster:
    """The cluster under test."""
    return _under_test[0]


# Slurm -----------------------------------------------------------------------------
def _cmd(*argv: str, timeout: float = 30, check: bool = True) -> str:
    """Run a command with the cluster under test's commands first on PATH."""
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env=cluster().env(),
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def squeue_ids() -> set[str]:
    """Ids of every job slurmctld still lists (finished ones too, until MinJobAge)."""
    return set(cluster().backend(timeout=30).stat_jobs())


def cancel_everything(wait: float = 30) -> None:
    """Cancel all jobs, resume every node, and wait until no job holds a CPU."""
    active = _cmd("squeue", "-h", "-t", "PD,R,S,CG,CF", "-o", "%A").split()
    if active:
        _cmd("scancel", *sorted(set(active)), check=False)
    for node in cluster().nodes:
        state = _cmd("sinfo", "-h", "-n", node, "-o", "%T", check=False).strip()
        if state and state not in ("idle", "mixed", "allocated", "completing"):
            _cmd("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    _cmd("scontrol", "update", "partitionname=debug", "state=up", check=False)
    eventually(
        lambda: not _cmd("squeue", "-h", "-t", "R,S,CG,CF", "-o", "%A").split(),
        timeout=wait,
        interval=0.3,
        what="no job holding a CPU after scancel",
    )


def sdiag_rpcs() -> dict[str, tuple[int, int]]:
    """slurmctld's own RPC statistics since the last ``sdiag --reset``: by
    message type, ``(count, total time in microseconds)``."""
    return rpc_stats(_cmd("sdiag"))


def slurmdbd_rpcs() -> dict[str, tuple[int, int]]:
    """slurmdbd's, since the last ``sacctmgr -i clear stats`` (``sacct`` is
    DBD_GET_JOBS_COND)."""
    return rpc_stats(_cmd("sacctmgr", "show", "stats"))


def is_read_rpc(rpc: str) -> bool:
    """Whether an RPC type of ``sdiag`` reads slurmctld's state (what observing
    the cluster costs it; the rest is the workload): the ``REQUEST_*_INFO``
    family and ``squeue --only-job-state``'s REQUEST_JOB_STATE (23.11+)."""
    return rpc.startswith("REQUEST_") and ("_INFO" in rpc or rpc == "REQUEST_JOB_STATE")


def rpc_stats(text: str) -> dict[str, tuple[int, int]]:
    """The "Remote Procedure Call statistics by message type" section of
    ``sdiag`` or ``sacctmgr show stats`` (the backend's parser; none: empty)."""
    try:
        return parse_sdiag_rpcs(text)
    except StatError:
        return {}


def sbatch(*args: str, minutes: int = 5) -> str:
    """Submit ``sbatch ARGS`` (output to /dev/null) and return the job id."""
    out = _cmd(
        "sbatch", "--parsable", "-t", str(minutes), "-o", "/dev/null", "-e", "/dev/null",
        "-D", "/tmp", *args,
    )  # fmt: skip
    return out.strip().split(";")[0]


def sbatch_sleeper(marker_dir: Path, *args: str) -> tuple[str, Callable[[], None]]:
    """Submit a job whose script sleeps 300 s; return its id and a function that
    waits until the script itself runs.

    squeue says RUNNING as soon as slurmctld allocates the nodes, before
    slurmstepd has started the batch script.  A job cancelled in that window
    never runs its script, and what Slurm then records as its exit code is not
    the "killed by SIGTERM" (271) of a running script.  Tests that cancel a
    running job and expect 271 wait for the script's own marker first.
    """
    marker = marker_dir / f"started-{secrets.token_hex(6)}"
    job_id = sbatch("--wrap", f"touch {marker}; sleep 300", *args)

    def started() -> None:
        eventually(marker.exists, timeout=60, what=f"job {job_id}'s script starting")

    return job_id, started


# The slurmctld hook's settings -------------------------------------------------------
def write_hook_env(path: Path, url: str, site: str, log: Path) -> None:
    """The hook's settings file: poke ``site`` on ``url`` with this venv's jobtap."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"# jobtap tests and benchmarks (pid {os.getpid()})\nJOBTAP_SITE={site}\n"
        f"JOBTAP_REDIS={url}\nJOBTAP_BIN={JOBTAP}\nJOBTAP_HOOK_LOG={log}\n"
    )
    path.chmod(0o600)


@contextlib.contextmanager
def hook_settings(url: str | None, site: str, log: Path) -> Iterator[Path]:
    """Point the cluster under test's installed hook (its ``hook_env``) at
    ``url`` for the block (None: no settings file, the hook does nothing);
    whatever was there before, a real set-up's file included, is put back.
    Yields the hook's log file."""
    path = cluster().hook_env
    saved = path.read_bytes() if path.exists() else None
    made_dir = not path.parent.exists()
    if url is None:
        path.unlink(missing_ok=True)
    else:
        write_hook_env(path, url, site, log)
    try:
        yield log
    finally:
        if saved is None:
            path.unlink(missing_ok=True)
            if made_dir:
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
        else:
            path.write_bytes(saved)
            path.chmod(0o600)


# The collector ---------------------------------------------------------------------
class CycleFailed(Exception):
    """A collector cycle failed where it must not (not an AssertionError, so that
    eventually() stops at once)."""


class Harness:
    """The real collector on the real Slurm, each cycle drained by a real rq worker."""

    def __init__(self, r, *, timeout: float = 30.0, **backend_options):
        self.r = r
        self.backend = cluster().backend(timeout=timeout, **backend_options)
        self.collector = Collector(self.backend, r, site=SITE, nodes_every=1)
        # The tests drive cycles and refreshes by hand, with pauses far longer
        # than an interval: the lease, taken at the first of them, outlasts the test.
        self.service = CollectorService(
            self.collector, interval=0.5, backend_name="slurm", lease=600
        )

    def cycle(self) -> bool:
        ok = self.service.run_one()
        drain(self.r, SITE)
        return ok

    def reconcile_next(self) -> None:
        """Make the next cycle a reconciliation (a full stat), as the next one
        due would be: what moves no state (a pending reason) is seen by the
        state probe only then (docs/slurm.md)."""
        self.collector.plan.reset()

    def run_cycle(self, **kw):
        """One cycle of the collector itself (``Collector.run_cycle``), the lease held."""
        self.service.ensure_lease()
        return self.collector.run_cycle(**kw)

    def refresh(self, job_ids):
        """Follow mode's refresh of these jobs (``Collector.refresh``), the lease held."""
        self.service.ensure_lease()
        return self.collector.refresh(job_ids)

    def until(self, what: str, done: Callable[[], bool], timeout: float = 60) -> None:
        """Run cycles until ``done()``; fail with the job events seen if it takes
        too long, and at once if a cycle fails."""

        def cycle_then_check() -> bool:
            if not self.cycle():
                raise CycleFailed(meta(self.r, SITE).get("last_error"))
            return done()

        try:
            eventually(cycle_then_check, timeout=timeout, interval=0.4)
        except AssertionError as e:
            raise AssertionError(f"no {what} ({e}); job events: {self.summary()}") from None

    def events(self, object_id: str | None = None, kind: str = "job") -> list[dict]:
        """The site's events of ``object_id`` (all of ``kind``), read whole
        (``whole_event``): a check reads every field whatever the format."""
        return [
            whole_event(e)
            for e in site_events(self.r, SITE)
            if e["kind"] == kind and (object_id is None or e["object_id"] == object_id)
        ]

    def states(self, job_id: str) -> list[str]:
        """The job's observed states, consecutive repeats folded."""
        out: list[str] = []
        for e in self.events(job_id):
            state = e["record"]["state"]
            if not out or out[-1] != state:
                out.append(state)
        return out

    def seen(self, job_id: str, state: str) -> bool:
        return state in self.states(job_id)

    def final(self, job_id: str) -> dict | None:
        """The record of the job's final, with its native record (from the hash)."""
        finals = [e for e in self.events(job_id) if e["type"] == "final"]
        return final_record(self.r, SITE, finals[-1]) if finals else None

    def summary(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for e in self.events():
            rec = e["record"]
            out.setdefault(e["object_id"], []).append(
                (e["type"], rec["state"], rec["exit_status"], rec["reason"])
            )
        return out


def _exit_evidence(native: object) -> dict[str, object]:
    """What Slurm said about a job's exit, for an assertion's message: squeue's
    wait status, or sacct's text codes and its JSON job and step codes."""
    if not isinstance(native, dict):
        return {}
    steps = native.get("steps") if isinstance(native.get("steps"), list) else []
    return {
        "exit_code": native.get("exit_code"),
        "derived_exit_code": native.get("derived_exit_code"),
        "jobtap_exit_codes": native.get("jobtap_exit_codes"),
        "steps": [(s.get("step", {}).get("id"), s.get("exit_code"), s.get("state")) for s in steps],
    }


def assert_lifecycle(
    h: Harness,
    job_id: str,
    *,
    final: tuple[str, int | None | frozenset[int]],
    must_see: tuple[str, ...] = (),
    reason: str | None = "any",
) -> list[str]:
    """One job's events: versions 1, 2, 3...; states that never go back; the
    states ``must_see`` among them; exactly one ``final``, the last event, with
    the expected state and exit status (one of a set, such as
    ``KILLED_BY_SIGTERM``, where Slurm may report either) and reason, unless
    "any"."""
    events = h.events(job_id)
    assert events, f"no event for job {job_id}"
    assert [e["version"] for e in events] == list(range(1, len(events) + 1)), job_id
    assert events[0]["type"] == "new", (job_id, events[0]["type"])
    types = [e["type"] for e in events]
    assert types.count("final") == 1 and types[-1] == "final", (job_id, types)
    states = h.states(job_id)
    ranks = [RANK[s] for s in states]
    assert ranks == sorted(ranks), f"job {job_id} went back: {states}"
    for state in must_see:
        assert state in states, f"job {job_id}: {state} not observed in {states}"
    record = final_record(h.r, SITE, events[-1])
    state, status = final
    statuses = status if isinstance(status, frozenset) else {status}
    assert record["state"] == state and record["exit_status"] in statuses, (
        job_id,
        states,
        record["reason"],
        record["exit_status"],
        _exit_evidence(record.get("native")),
    )
    if reason != "any":
        assert record["reason"] == reason, (job_id, record["reason"])
    return states


# The tests -------------------------------------------------------------------------
