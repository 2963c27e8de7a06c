"""The Slurm backend: runs Slurm's commands (locally or through a prefix such
as ``ssh head1``) and feeds :mod:`.listing`, :mod:`.accounting`, :mod:`.rest`
and :mod:`.sdiag`; the records go to :mod:`.normalise`.  Which commands it runs
depends on the release (:mod:`.versions`), learnt from what Slurm prints."""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Iterable, Sequence

from jobtap.contract import meta
from jobtap.schema import EXITING, RUNNING, SUSPENDED, TERMINAL

from ..base import BadRecord, Native, PokedReads, Probe, Record, StatError
from ..common import CommandBackend
from ..run import first_line
from . import rest
from .accounting import (
    ENDED_STATES,
    exit_unsure,
    nothing_found,
    parse_sacct,
    parse_sacct_exit_codes,
)
from .hook import completion_record
from .listing import (
    PROBE_ARGV,
    PROBE_FIELDS,
    STATE_PROBE_ARGV,
    STATE_PROBE_FIELDS,
    describe_errors,
    load_document,
    parse_nodes,
    parse_probe,
    parse_scontrol_partitions,
    squeue_jobs,
)
from .normalise import job_state, normalise_job, normalise_node, normalise_queue
from .sdiag import LISTING_RPCS, LOCAL_SINGLE_RPCS, SINGLE_RPCS, parse_sdiag_rpcs
from .values import JOB_ID, expand_hostlist
from .versions import FORMATS, Format, UnknownFormat, document_format, generation_of, release_of

log = logging.getLogger("jobtap.collector")

__all__ = ["SlurmBackend", "format_of_release"]

# Keys that change at every scheduler pass without meaning anything to a reader;
# SlurmBackend drops them so that polling does not turn every pending job into
# an update event each cycle (the node keys are the format's: Format.volatile_node_keys).
# ``show_flags`` (23.02 to 24.05) echoes the flags the request was made with,
# not the job: a single read through slurmrestd and a listing differ there alone.
VOLATILE_JOB_KEYS = ("last_sched_evaluation", "show_flags")
# squeue's arguments for a listing of every job.  22.05's ``--json`` lists every
# job whatever the filters say (the same output with or without these); later
# releases apply squeue's default filter, no finished job, unless told
# ``--states=all``; ``--all`` adds hidden partitions, ``--local`` keeps to this
# cluster of a federation (22.05's --json: SHOW_ALL, SHOW_LOCAL).
LISTING_ARGV = ("--json", "--all", "--local", "--states=all")
_ON_NODES = frozenset({RUNNING, SUSPENDED, EXITING})
_FATAL = re.compile(rb"fatal: [^\n]*")
_RELEASE = re.compile(r"(\d+)\.(\d+)\.\d+")


def format_of_release(version_text: str) -> Format:
    """The format a release writes by default, from what ``scontrol --version``
    prints (``slurm 24.11.5``, Debian's ``slurm-wlm 24.11.5``).  A release
    this jobtap does not know raises :class:`UnknownFormat` naming it."""
    match = _RELEASE.search(version_text)
    if match is None:
        raise StatError(f"scontrol --version printed no release: {version_text.strip()[:80]!r}")
    release = f"{int(match[1]):02d}.{int(match[2]):02d}"
    for fmt in FORMATS.values():
        if fmt.releases == release:
            return fmt
    known = ", ".join(f.releases for f in FORMATS.values())
    raise UnknownFormat(
        f"Slurm {match[0]} is a release this jobtap does not know (it reads {known})"
    )


# The backend -----------------------------------------------------------------------
# How long the epilog's poke of an ended job waits for the completion record that
# jobcomp/script sends as slurmctld completes the job (only once the poke stream
# has carried such records: a site without JobCompLoc never waits).  On 24.11 the
# epilog's poke came first for 44 of 61 jobs, and each was read through slurmrestd
# for nothing: the record followed and was the final (docs/performance.md).
COMPLETION_RECORD_WAIT = 0.5
# A job the prolog poked is read this long after the poke, not at once: the prolog
# pokes as slurmctld launches the job, and a read then waits behind the launch.
PROLOG_SETTLE = 0.25


def _slurm_job_ids(job_ids: Iterable[str]) -> list[str]:
    """The ids that are Slurm job ids (``N`` or ``N_T``), once each: a
    poke names what its sender wrote, and one bad id makes squeue refuse a
    whole ``--jobs`` listing."""
    return list(dict.fromkeys(j for j in job_ids if isinstance(j, str) and JOB_ID.match(j)))


class SlurmBackend(CommandBackend):
    """Slurm through its commands: ``squeue --json`` (jobs), ``sinfo --json``
    (nodes), ``scontrol show partition -o`` (queues), ``sacct --json`` (history);
    ``squeue --only-job-state`` (23.11+) or a compact ``squeue`` text line
    per job as the cheap probe, and
    ``slurmrestd`` (inetd mode, see :mod:`.rest`) for the full records of
    a few jobs.

    ``prefix``: a command prefix such as ``"ssh head1"`` (a string is split with
    shlex; words are shell-quoted when it runs ssh).  ``squeue``, ``sinfo``,
    ``sacct``, ``scontrol``, ``slurmrestd``: the commands (``slurmrestd=""``:
    never use it; a targeted stat is then one ``squeue --json`` filtered).
    ``timeout``: seconds per command.  ``history_batch``: job ids per sacct
    call.  ``drop_volatile``: leave out the keys that change at every scheduler
    pass (``last_sched_evaluation`` of jobs, ``cpu_load`` and ``free_memory``
    of nodes), so that they do not make every pending job and every node an
    update event each cycle.  ``state_probe``: probe with ``squeue
    --only-job-state`` where Slurm has it (23.11+; see :meth:`probe`), else
    with one compact line per job.

    ``stat_nodes`` and ``stat_queues`` use the jobs of the latest ``stat_jobs``
    (this cycle's or, when the collector stats nodes first, the previous one's),
    kept up to date by the probes and targeted stats since, to add each node's
    running jobs (``jobtap_jobs``) and each partition's job counts
    (``jobtap_counts``); before any job stat they add neither.
    """

    scheduler: str
    # In follow mode the collector relies on the hook's pokes between
    # reconciliations (a pushed plan, collector/plan.py), not on the probe: before
    # 23.11 the probe costs slurmctld a full stat (see probe()); from 23.11 the
    # state probe is cheap, but the pokes bring starts and ends already and a
    # probe every interval would only add to their cost.
    follow_pushed = True

    def __init__(
        self,
        *,
        prefix: str | Sequence[str] = (),
        squeue: str = "squeue",
        sinfo: str = "sinfo",
        sacct: str = "sacct",
        scontrol: str = "scontrol",
        slurmrestd: str = "slurmrestd",
        sdiag: str = "sdiag",
        timeout: float = 60.0,
        scheduler: str = "slurm",
        history_batch: int = 500,
        drop_volatile: bool = True,
        state_probe: bool = True,
    ) -> None:
        super().__init__(prefix=prefix, timeout=timeout)
        self.squeue = squeue
        self.sinfo = sinfo
        self.sacct = sacct
        self.scontrol = scontrol
        self.slurmrestd = slurmrestd
        self.scheduler = scheduler
        if history_batch < 1:
            raise ValueError("history_batch must be at least 1")
        self.history_batch = int(history_batch)
        self.drop_volatile = bool(drop_volatile)
        self.state_probe = bool(state_probe)
        self._state_probe_refused: str | None = None  # squeue's complaint, once
        self._last_jobs: dict[str, Native] | None = None
        # Replaced, never changed in place: follow mode's single reads (stat_some) run
        # beside a cycle that iterates it (stat_queues, stat_nodes).  The last listing's
        # records, with what single reads found since.
        self._format: Format | None = None  # what this Slurm writes (versions.py)
        self._release: str | None = None  # "24.11.5", from squeue's meta
        self._rest_unavailable: str | None = None  # why slurmrestd is not used
        self.sdiag = sdiag
        self._rpc_seen: dict[str, tuple[int, int]] | None = None  # sdiag's, last time

    def __repr__(self) -> str:
        return f"SlurmBackend({self.squeue!r}{self._via()})"

    # Stats ---------------------------------------------------------------------
    def stat_jobs(self) -> dict[str, Native]:
        jobs = self._squeue()
        self._last_jobs = jobs
        return jobs

    def listing_of(self, job_ids: list[str]) -> dict[str, Native]:
        """The records of these jobs from one listing (follow mode's, when one
        costs slurmctld less than their single reads): from 24.05 ``squeue
        --json --jobs=...`` prints these jobs alone; before, every job (as
        :meth:`stat_jobs`).  Either way slurmctld packs every job; a burst's
        listing of 2,300 jobs took squeue 4-7 s of wall time on 24.11 (the
        JSON it writes), which every job it was made for waited out.  Ids that
        are no Slurm job id (a poke names what its sender wrote) are not asked
        for: squeue would refuse the whole listing."""
        if not self._filters_json(job_ids):
            return self.stat_jobs()
        wanted = _slurm_job_ids(job_ids)
        if not wanted:
            return {}
        return self._remember_live(self._squeue(wanted))

    def _remember_live(self, found: dict[str, Native]) -> dict[str, Native]:
        """Note ``found``, read apart from a full stat, as the latest live
        records (what the next cycle's reads start from); returns it."""
        if self._last_jobs is not None:  # a new dict: a cycle may be iterating the old one
            self._last_jobs = {**self._last_jobs, **found}
        return found

    def _filters_json(self, job_ids: list[str]) -> bool:
        """Whether ``squeue --json --jobs=`` would print these jobs alone
        (``Format.json_filters``: the format of the last listing says)."""
        return bool(job_ids) and self._format is not None and self._format.json_filters

    def _squeue(self, job_ids: list[str] | None = None) -> dict[str, Native]:
        """Every job of ``squeue --json``, volatile keys left out: the one source
        of live records of a full stat (and of a targeted one without
        slurmrestd).  Notes the openapi plugin that wrote it, which slurmrestd
        must use to write the same records.  ``job_ids``: ask for these jobs
        only (``--jobs``; see :meth:`_filters_json`), by job number: asked for
        ``A_T``, squeue prints a pending task cut out of its array's record,
        which the full listing does not; asked for ``A``, every task of the
        array as the full listing prints them."""
        argv = [self.squeue, *LISTING_ARGV]
        numbers = dict.fromkeys(j.partition("_")[0] for j in job_ids or ())
        if numbers:
            argv.append("--jobs=" + ",".join(numbers))
        try:
            raw = self._run(argv)
        except StatError as exc:  # asked for one job alone, squeue fails if it is gone
            if len(numbers) == 1 and "Invalid job id specified" in str(exc):
                return {}
            raise
        return self._squeue_document(raw)

    def _squeue_document(self, raw: bytes) -> dict[str, Native]:
        doc, fmt = load_document(raw, "squeue")
        self._format = fmt
        self._release = release_of(doc) or self._release
        return self._without_volatile(squeue_jobs(doc, fmt))

    def _without_volatile(self, jobs: dict[str, Native]) -> dict[str, Native]:
        if self.drop_volatile:
            for native in jobs.values():
                if isinstance(native, dict):
                    for key in VOLATILE_JOB_KEYS:
                        native.pop(key, None)
        return jobs

    def probe(self, since: float | None) -> Probe:
        """The cheap probe, every job listed (``since`` plays no part), a line
        per job (see :func:`parse_probe`).  Jobs it no longer lists are dropped
        from the jobs that node and partition records are built from.

        From 23.11 (unless ``state_probe`` is off) it is the state probe,
        ``squeue --only-job-state`` (``STATE_PROBE_ARGV``): ids and states,
        which slurmctld answers 16 times cheaper than a listing.  Only a new
        state then makes a job worth a read; what changes without one (a
        pending reason, a priority, an edited limit, a hold) waits for the next
        reconciliation.  Before 23.11, or where squeue refuses the option, it
        is the line probe (``PROBE_ARGV``: state, reason, priority, times,
        nodes, limit...), which slurmctld answers with the RPC of a full stat
        (REQUEST_JOB_INFO, which packs every job whatever is printed), so it
        costs slurmctld as much; what it saves is squeue's JSON rendering and
        the collector's parsing: about 20 times fewer bytes
        (docs/performance.md)."""
        named = self._state_probe() if self._probes_states() else None
        return self._probed(named if named is not None else self._line_probe())

    def _line_probe(self) -> dict[str, str]:
        return parse_probe(self._run([self.squeue, *PROBE_ARGV]), PROBE_FIELDS)

    def _state_probe(self) -> dict[str, str] | None:
        """``squeue --only-job-state``'s ids and states; None where squeue refuses
        the option (noted: the line probe from then on).  Any other failure says
        little (slurmctld down, 24.11: "Unable to query jobs state: Unspecified
        error"): the line probe then says why, or stands in this once, its lines
        cut to the state they start with."""
        try:
            raw = self._run([self.squeue, *STATE_PROBE_ARGV])
        except StatError as exc:
            if "only-job-state" in str(exc):
                self._state_probe_refused = str(exc)[:300]
                log.warning("squeue refuses --only-job-state (%s): the probe lists every job",
                            self._state_probe_refused)  # fmt: skip
                return None
            log.warning("the state probe failed (%s): the line probe stands in", exc)
            return {j: sig.split("|", 1)[0] for j, sig in self._line_probe().items()}
        return parse_probe(raw, STATE_PROBE_FIELDS)

    def _probed(self, named: dict[str, str]) -> Probe:
        if self._last_jobs is not None:
            self._last_jobs = {j: n for j, n in self._last_jobs.items() if j in named}
        return Probe(named=named, complete=True)

    def _probes_states(self) -> bool:
        """Whether :meth:`probe` asks for states only (``squeue --only-job-state``)."""
        fmt = self._format
        return bool(self.state_probe and fmt and fmt.state_probe and not self._state_probe_refused)

    def stat_some(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """The current records of these jobs, live or finished (the targeted
        stat of a probe cycle, and follow mode's refresh), keyed like
        :meth:`stat_jobs` and :meth:`history` (``"12"``, ``"12_3"``); ids Slurm
        does not know are absent.

        A job slurmctld still knows (queued, running, or finished less than
        ``MinJobAge`` ago) gets exactly the record :meth:`stat_jobs` would give
        it, so an unchanged job has the same fingerprint whichever of the two
        saw it, and the next full stat ships nothing for it: through
        ``slurmrestd``, one single-job RPC per job, written by the plugin that
        wrote the last ``squeue --json`` (:mod:`.rest`).  When that is not
        possible (no full stat yet, ``slurmrestd`` missing or switched off), it
        is one ``squeue --json`` filtered here (22.05's ``squeue --json`` prints
        every job whatever ``-j`` says).  When so many jobs are poked that one
        listing costs slurmctld less, the collector's plan asks
        :meth:`stat_jobs` instead (plan.ReadBudget, :meth:`read_costs`).

        A job that slurmctld no longer knows gets its final record from
        :meth:`history` (``sacct``), which is also what a full cycle ships for
        it.  If ``sacct`` fails (slurmdbd away), those jobs are left out (the
        next full cycle looks them up again) and the live ones still come back.

        An array task is ``ARRAY_TASK``; its own job number (``SLURM_JOB_ID`` of
        the task, e.g. ``25`` for ``20_3``) is not one of its ids and comes back
        absent: deploy/slurm/jobtap-slurmctld-hook.sh pokes ``20_3``.
        """
        wanted = _slurm_job_ids(job_ids)
        if not wanted:
            return {}
        live = self._live_records(wanted)
        found = self._remember_live({job_id: live[job_id] for job_id in wanted if job_id in live})
        gone = [job_id for job_id in wanted if job_id not in live]
        if gone:
            try:
                found.update(self.history(gone))
            except StatError as exc:
                log.warning("targeted stat: sacct of %d jobs failed: %s", len(gone), exc)
        return found

    def _live_records(self, job_ids: list[str]) -> dict[str, Native]:
        """Records of these jobs as ``squeue --json`` writes them (and maybe of
        others): through slurmrestd when it can, else from one full ``squeue
        --json``.  Whether one listing would cost slurmctld less than these
        single reads is the plan's decision (plan.ReadBudget), made before."""
        fmt = self._format
        numbers = list(dict.fromkeys(j.partition("_")[0] for j in job_ids))
        if self.slurmrestd and fmt and not self._rest_unavailable:
            try:
                return self._rest_records(numbers, fmt)
            except _RestUnavailable as exc:
                self._rest_unavailable = str(exc)
                log.warning("slurmrestd cannot be used (%s): targeted stats list every job", exc)
        return self._squeue(job_ids if self._filters_json(job_ids) else None)

    def _rest_records(self, numbers: list[str], fmt: Format) -> dict[str, Native]:
        """``GET /slurm/VERSION/job/N`` for each job number, through one
        slurmrestd (and one more for the requests after an unknown job, whose
        error answer closes the connection), VERSION being the format of the
        last ``squeue --json``.  An array's number brings all its tasks.
        Unknown jobs are absent; any other error is a StatError.

        slurmrestd refuses to run as root (or SlurmUser) unless
        ``SLURMRESTD_SECURITY=disable_user_check`` says otherwise, which it
        gets here only as root; from 25.05 on, release builds refuse that
        setting itself (a ``fatal``): there, as root, slurmrestd is unusable and
        single reads become listings (run the collector as a user of its own)."""
        security = ["SLURMRESTD_SECURITY=disable_user_check"] if os.geteuid() == 0 else []
        argv = ["env", *security, self.slurmrestd, "-a", "rest_auth/local", *fmt.rest_argv]
        out: dict[str, Native] = {}
        while numbers:
            asked = rest.requests(fmt.version, numbers, fmt.rest_query)
            status, raw, err = self._run_full(argv, input=asked)
            if status in (126, 127):  # env could not run it: not installed, not executable
                raise _RestUnavailable(first_line(err))
            got = rest.answers(raw)
            fatal = _FATAL.search(err)
            if not got and fatal:  # it will not run here (its user, its settings)
                raise _RestUnavailable(fatal[0].decode(errors="replace")[:300])
            if not got:
                raise StatError(f"slurmrestd answered none of {len(numbers)} requests"
                                f" (status {status}): {first_line(err)}")  # fmt: skip
            for (code, doc), number in zip(got, numbers, strict=False):
                if rest.unknown_job(code, doc):
                    continue
                errors = doc.get("errors")
                if code != 200 or errors:
                    raise StatError(f"slurmrestd on job {number}: HTTP {code}, "
                                    f"{describe_errors(errors)}")  # fmt: skip
                out.update(squeue_jobs(doc, document_format(doc, "slurmrestd"), "slurmrestd"))
            numbers = numbers[len(got) :]
        return self._without_volatile(out)

    def poked_reads(self) -> PokedReads:
        """Completion records come with their pokes (:mod:`.hook`), a moment
        after the epilog's record-less poke (:data:`COMPLETION_RECORD_WAIT`);
        single reads through slurmrestd; ``sdiag`` says what each read costs
        slurmctld."""
        return PokedReads(
            carried=self.poked_record,
            carried_soon=COMPLETION_RECORD_WAIT,
            settle=PROLOG_SETTLE,
            costs=self.read_costs,
            singly=self.reads_singly,
            listing_of=self.listing_of,
        )

    def reads_singly(self) -> bool:
        """Whether :meth:`stat_some` reads live jobs one by one (slurmrestd)."""
        return bool(self.slurmrestd and self._format and not self._rest_unavailable)

    def read_costs(self) -> dict[str, float]:
        """slurmctld's own time per read since the previous call, from
        ``sdiag``'s RPC statistics: ``listing`` (REQUEST_JOB_INFO, what
        ``squeue`` costs) and ``single`` (a job read on its own through
        slurmrestd: REQUEST_JOB_INFO_SINGLE, plus its REQUEST_FED_INFO before
        23.11, whose requests cannot say LOCAL), each
        present only if such RPCs ran since (the first call: since slurmctld's
        statistics were last reset).  They are every client's RPCs of those
        types: what one costs slurmctld now, whoever asks."""
        stats = parse_sdiag_rpcs(self._run([self.sdiag]))
        prev, self._rpc_seen = self._rpc_seen, stats
        out: dict[str, float] = {}
        local = self._format is not None and self._format.rest_local
        single = LOCAL_SINGLE_RPCS if local else SINGLE_RPCS
        for key, rpcs in (("listing", LISTING_RPCS), ("single", single)):
            total = 0.0
            for rpc in rpcs:
                count, micros = stats.get(rpc, (0, 0))
                before = (prev or {}).get(rpc, (0, 0))
                if count < before[0]:  # statistics were reset since
                    before = (0, 0)
                if count - before[0] <= 0:
                    break
                total += (micros - before[1]) / (count - before[0]) / 1e6
            else:
                out[key] = total
        return out

    def poked_record(self, job_id: str, raw: bytes) -> Native | None:
        """The completion record a poke carried (jobcomp/script: :mod:`.hook`),
        if it can be the job's final: its facts and what the last listing or
        single read said of the rest; None: read the job as for any poke."""
        return completion_record(job_id, raw, (self._last_jobs or {}).get(job_id))

    def slurm_format(self) -> Format:
        """The format this Slurm writes: the last ``squeue --json``'s, else the
        default of the release ``scontrol --version`` names (no RPC)."""
        if self._format is None:
            self._format = format_of_release(self._run([self.scontrol, "--version"]).decode())
        return self._format

    def describe(self) -> dict[str, str]:
        """Which Slurm this is and which ways of reading it are in use, for
        ``jobtap status`` and ``jobtap doctor`` (the collector keeps them in
        ``meta``): ``scheduler`` and ``scheduler_paths``."""
        fmt = self._format
        if fmt is None:
            return {meta.SCHEDULER: "Slurm (release not known before the first job listing)"}
        release = self._release or f"{fmt.releases}.x"
        if self.reads_singly():
            single = f"slurmrestd {fmt.version}"
        elif self._rest_unavailable:
            single = f"a listing (slurmrestd unusable: {self._rest_unavailable})"
        else:
            single = "a listing (slurmrestd switched off)"
        if self._probes_states():
            probe = f"{self.squeue} --only-job-state"
        elif self._state_probe_refused:
            probe = f"{self.squeue} lines (--only-job-state refused: {self._state_probe_refused})"
        else:
            probe = f"{self.squeue} lines"
        paths = [
            f"jobs: {self.squeue} {' '.join(LISTING_ARGV)}",
            f"probe: {probe}",
            f"nodes: {' '.join(fmt.nodes_argv)}",
            f"single reads: {single}",
            f"ended jobs: {self.sacct} --json",
        ]
        return {
            meta.SCHEDULER: f"Slurm {release}, JSON {fmt.version}",
            meta.SCHEDULER_PATHS: "; ".join(paths),
        }

    def stat_nodes(self) -> dict[str, Native]:
        """Every node: 22.05's ``sinfo --json``, later ``scontrol show nodes
        --json`` (later ``sinfo --json`` groups nodes by partition and state)."""
        fmt = self.slurm_format()
        command, *args = fmt.nodes_argv
        path = {"sinfo": self.sinfo, "scontrol": self.scontrol}[command]
        nodes = parse_nodes(self._run([path, *args]), command)
        on_node = self._jobs_by_node() if self._last_jobs is not None else None
        for name, native in nodes.items():
            if not isinstance(native, dict):
                continue
            if self.drop_volatile:
                for key in fmt.volatile_node_keys:
                    native.pop(key, None)
            if on_node is not None:
                native["jobtap_jobs"] = on_node.get(name, [])
        return nodes

    def stat_queues(self) -> dict[str, Native]:
        partitions = parse_scontrol_partitions(
            self._run([self.scontrol, "show", "partition", "-o"])
        )
        if self._last_jobs is not None:
            counts = self._counts_by_partition()
            for name, native in partitions.items():
                native["jobtap_counts"] = counts.get(name, {"total": 0})
        return partitions

    def _jobs_by_node(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for job_id, native in (self._last_jobs or {}).items():
            if not isinstance(native, dict):
                continue
            try:
                state = job_state(native.get("job_state"), None, None)
            except BadRecord:
                continue
            if state not in _ON_NODES:
                continue
            for node in expand_hostlist(generation_of(native).job_nodes(native)):
                out.setdefault(node, []).append(job_id)
        return out

    def _counts_by_partition(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for native in (self._last_jobs or {}).values():
            if not isinstance(native, dict):
                continue
            try:
                state = job_state(
                    native.get("job_state"), native.get("state_reason"), native.get("priority")
                )
            except BadRecord:
                continue
            if state in TERMINAL:
                continue
            partitions = native.get("partition")
            for partition in partitions.split(",") if isinstance(partitions, str) else ():
                counts = out.setdefault(partition, {"total": 0})
                counts[state] = counts.get(state, 0) + 1
                counts["total"] += 1
        return out

    def history(self, job_ids: Iterable[str]) -> dict[str, Native]:
        """Final records of jobs from ``sacct --json -j ID,ID,...``, for the ids the
        accounting database knows; the others are absent from the result (when
        it knows none of them, 22.05's sacct reports "Nothing found" as an
        error: that is an empty result, not a failure).

        For the jobs that ended other than COMPLETED, one more call, ``sacct -n -P
        -o JobID,ExitCode -j ...``, supplies the exit codes that 22.05's JSON
        prints as 0 (added to the record as ``jobtap_exit_codes``).
        """
        wanted: list[str] = []
        seen: set[str] = set()
        for job_id in job_ids:
            # Only plain ids and array tasks reach the command line.
            if isinstance(job_id, str) and job_id not in seen and JOB_ID.match(job_id):
                seen.add(job_id)
                wanted.append(job_id)
        found: dict[str, Native] = {}
        for start in range(0, len(wanted), self.history_batch):
            batch = wanted[start : start + self.history_batch]
            ids = ",".join(batch)
            raw = self._run([self.sacct, "--json", "-j", ids])
            try:
                records = parse_sacct(raw)
            except StatError:
                if not nothing_found(raw):
                    raise
                records = {}  # sacct knows none of them
            records = {job_id: records[job_id] for job_id in batch if job_id in records}
            found.update(self._with_exit_codes(records))
        return found

    def _with_exit_codes(self, records: dict[str, Native]) -> dict[str, Native]:
        """``records`` with ``jobtap_exit_codes`` added to those whose JSON exit
        code may be wrong (one ``sacct -o JobID,ExitCode`` per batch)."""
        unsure = [job_id for job_id, native in records.items() if exit_unsure(native)]
        for start in range(0, len(unsure), self.history_batch):
            batch = unsure[start : start + self.history_batch]
            out = self._run([self.sacct, "-n", "-P", "-o", "JobID,ExitCode", "-j", ",".join(batch)])
            codes = parse_sacct_exit_codes(out)
            for job_id in batch:
                if job_id in codes:
                    records[job_id] = {**records[job_id], "jobtap_exit_codes": codes[job_id]}
        return records

    def ended_since(self, since: float) -> dict[str, Native]:
        """Final records of every job that ended at ``since`` (seconds since the
        epoch) or later, whoever its user, as :meth:`history` gives them:
        ``sacct --json -a -s ENDED_STATES -S now-N -E now``.  With ``-s``, sacct's
        window selects the jobs that reached one of those states within it.
        The start is given relative to sacct's own clock (``now-N``, N seconds
        rounded up), so no time zone or clock of this host's is involved but
        the length of the window.

        A reconciliation asks this for the window since the previous one: a
        job that was submitted, ran and left ``squeue`` in between, with no poke
        (hook off, poke lost), still gets its ``new`` and ``final``."""
        seconds = max(1, math.ceil(time.time() - since))
        raw = self._run([self.sacct, "--json", "-a", "-s", ENDED_STATES,
                         "-S", f"now-{seconds}", "-E", "now"])  # fmt: skip
        try:
            records = parse_sacct(raw)
        except StatError:
            if not nothing_found(raw):
                raise
            records = {}
        records = {j: n for j, n in records.items() if JOB_ID.match(j)}
        return self._with_exit_codes(records)

    # Normalising ---------------------------------------------------------------
    def normalise_job(self, job_id: str, native: Native) -> Record:
        return normalise_job(job_id, native, scheduler=self.scheduler)

    def normalise_node(self, name: str, native: Native) -> Record:
        return normalise_node(name, native, scheduler=self.scheduler)

    def normalise_queue(self, name: str, native: Native) -> Record:
        return normalise_queue(name, native, scheduler=self.scheduler)


class _RestUnavailable(Exception):
    """slurmrestd cannot run here (not installed, not executable)."""
