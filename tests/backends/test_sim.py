"""The simulated PBS cluster (collector/sim.py) and its backend.

The simulation is the ground truth other tests compare the collector with, so
these tests check that it is deterministic, that it renders what OpenPBS
prints, that every kind of event really happens, and that its ground truth
agrees with its own records.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

import orjson
import pytest

from jobtap.collector.backends.base import StatError
from jobtap.schema import CANCELLED, COMPLETED, FAILED, HELD, QUEUED, RUNNING, TERMINAL
from jobtap.sim import SimBackend, Simulation
from jobtap.sim.model import START
from jobtap.sim.pbs import EXIT_NODE_FAIL, EXIT_QDEL, EXIT_WALLTIME, SERVER
from jobtap.sim.truth import pbs_state

PBS_TIME = "%a %b %d %H:%M:%S %Y"
STEP = 60.0
HOURS = 4


@dataclass
class Run:
    """A default simulation advanced HOURS hours, observed every STEP seconds."""

    sim: Simulation
    live_counts: list[int] = field(default_factory=list)
    node_states: Counter[str] = field(default_factory=Counter)
    job_states: Counter[str] = field(default_factory=Counter)


@pytest.fixture(scope="module")
def run() -> Run:
    sim = Simulation(seed=1)
    observed = Run(sim)
    for _ in range(int(HOURS * 3600 / STEP)):
        sim.advance(STEP)
        live = sim.live_jobs()
        observed.live_counts.append(len(live))
        observed.job_states.update(native["job_state"] for native in live.values())
        observed.node_states.update(native["state"] for native in sim.nodes().values())
        for job_id, native in live.items():
            truth = sim.truth[job_id]
            # Live means not finished, and the record says what the truth says.
            assert truth.final_state is None, job_id
            assert pbs_state(native) == truth.state, job_id
    return observed


def _finished(sim: Simulation, tag: str) -> list:
    return [t for t in sim.truth.values() if tag in t.tags and t.final_state is not None]


# Determinism --------------------------------------------------------------------------
def _drive(sim: Simulation) -> bytes:
    for seconds in (5, 30, 0.5, 300, 61, 1800):
        sim.advance(seconds)
    return sim.qstat_json(include_history=True) + sim.pbsnodes_json() + sim.qstat_queues_json()


def test_same_seed_same_calls_same_bytes():
    a = Simulation(seed=7, nodes=50, initial_jobs=600)
    b = Simulation(seed=7, nodes=50, initial_jobs=600)
    assert a.qstat_json() == b.qstat_json()
    assert _drive(a) == _drive(b)
    assert a.truth == b.truth
    c = Simulation(seed=8, nodes=50, initial_jobs=600)
    assert _drive(c) != _drive(a)


def test_virtual_clock():
    sim = Simulation(seed=2, nodes=20, initial_jobs=100)
    assert sim.now == START
    sim.advance(90.5)
    assert sim.now == START + 90.5
    assert orjson.loads(sim.qstat_json())["timestamp"] == int(START + 90)
    with pytest.raises(ValueError):
        sim.advance(-1)


# Population and rates -------------------------------------------------------------------
def test_population_stays_steady(run: Run):
    counts = run.live_counts
    assert min(counts) > 0.7 * 3000 and max(counts) < 1.3 * 3000, (min(counts), max(counts))
    # The cluster is busy: nearly all cpus assigned, and a queue behind them.
    assigned = sum(n["resources_assigned"].get("ncpus", 0) for n in run.sim.nodes().values())
    assert assigned > 0.8 * run.sim.total_cpus
    assert run.job_states["Q"] > run.job_states["R"] > 0


def test_few_jobs_change_per_cycle(run: Run):
    """Running jobs report usage about once a minute, not every cycle: at a 5 s
    collector interval only a few percent of the records change."""
    sim = Simulation(seed=3)
    sim.advance(600)
    before = sim.live_jobs()
    sim.advance(5)
    after = sim.live_jobs()
    changed = sum(1 for job_id, native in after.items() if before.get(job_id) != native)
    assert 0 < changed < 0.05 * len(after)


# Every kind of event happens -------------------------------------------------------------
def test_completed_and_failed(run: Run):
    sim = run.sim
    finals = Counter(t.final_state for t in sim.truth.values() if t.final_state)
    assert finals[COMPLETED] > 100 and finals[FAILED] > 10 and finals[CANCELLED] > 10
    failed = [t for t in _finished(sim, "exit_nonzero") if not t.purged]
    record = sim.history_jobs([failed[0].id])[failed[0].id]
    assert record["substate"] == 93 and record["Exit_status"] not in (0, None)
    assert record["comment"].endswith(" and failed")


def test_walltime_kill(run: Run):
    sim = run.sim
    killed = [t for t in _finished(sim, "walltime") if not t.purged]
    assert killed
    record = sim.history_jobs([killed[0].id])[killed[0].id]
    assert record["job_state"] == "F" and record["substate"] == 93
    assert record["Exit_status"] == EXIT_WALLTIME == -29
    assert record["resources_used"]["walltime"] == record["Resource_List"]["walltime"]
    assert record["comment"].endswith("and exceeded resource walltime")
    assert killed[0].final_state == FAILED


def test_qdel_queued_and_running(run: Run):
    sim = run.sim
    queued = [t for t in _finished(sim, "qdel_queued") if not t.purged]
    running = [t for t in _finished(sim, "qdel_running") if not t.purged]
    assert queued and running
    for truth in queued:
        assert truth.final_state == CANCELLED and truth.exit_status is None
        assert RUNNING not in {state for _, state in truth.transitions}
    record = sim.history_jobs([queued[0].id])[queued[0].id]
    assert record["substate"] == 91 and "Exit_status" not in record
    for truth in running:
        assert truth.final_state == CANCELLED and truth.exit_status == EXIT_QDEL
        assert [s for _, s in truth.transitions][-3:] == [RUNNING, "exiting", CANCELLED]
    record = sim.history_jobs([running[0].id])[running[0].id]
    assert record["substate"] == 91 and record["Exit_status"] == 271
    assert " and terminated by " in record["comment"]


def test_hold_and_release(run: Run):
    sim = run.sim
    released = [t for t in sim.truth.values() if "released" in t.tags]
    assert released
    states = [s for _, s in released[0].transitions]
    assert HELD in states and states[states.index(HELD) + 1] == QUEUED
    assert run.job_states["H"] > 0 and run.job_states["W"] > 0
    assert any("held" in t.tags and "qdel_queued" in t.tags for t in sim.truth.values())


def test_node_outages(run: Run):
    sim = run.sim
    assert sim.stats["node_down"] + sim.stats["node_offline"] > 0
    assert sim.stats["node_up"] > 0
    assert run.node_states["down"] + run.node_states["offline"] > 0
    assert run.node_states["free"] + run.node_states["job-busy"] > 0
    killed = [t for t in _finished(sim, "node_kill") if not t.purged]
    assert killed and all(t.final_state == FAILED for t in killed)
    assert {t.exit_status for t in killed} == {EXIT_NODE_FAIL}


def test_arrays(run: Run):
    sim = run.sim
    parents = [t for t in _finished(sim, "array") if "qdel_array" not in t.tags]
    assert parents
    for parent in parents:
        subs = [t for t in sim.truth.values() if t.array_parent == parent.id]
        assert 2 <= len(subs) <= 8
        assert all(t.final_state in TERMINAL for t in subs)
        assert parent.transitions[-1][0] >= max(t.transitions[-1][0] for t in subs)
        assert [s for _, s in parent.transitions][:2] == [QUEUED, RUNNING]
        expected = 0 if all(t.exit_status == 0 for t in subs) else 1
        assert parent.exit_status == expected
        assert parent.final_state == (COMPLETED if expected == 0 else FAILED)
    # Arrays are a minority of the jobs.
    assert sim.stats["arrays"] < 0.1 * sim.stats["submitted"]


def test_array_records_look_like_pbs():
    sim = Simulation(seed=4, nodes=40, initial_jobs=800, p_array=0.3)
    live = sim.live_jobs()
    parents = {i: n for i, n in live.items() if i.endswith(f"[].{SERVER}")}
    assert parents
    for parent_id, parent in parents.items():
        assert parent["array"] == "True" and parent["job_state"] in ("Q", "B")
        number = parent_id.split("[")[0]
        subs = {i: n for i, n in live.items() if i.startswith(number + "[") and i != parent_id}
        assert subs
        for sub_id, sub in subs.items():
            if sub["job_state"] == "Q":
                # Not started: qstat -t shows a copy of the parent.
                assert "array_id" not in sub and sub["Error_Path"] == parent["Error_Path"]
            else:
                assert sub["array_id"] == parent_id
                assert sub_id == f"{number}[{sub['array_index']}].{SERVER}"
        count = dict(kv.split(":") for kv in parent["array_state_count"].split())
        assert int(count["Queued"]) == sum(1 for s in subs.values() if s["job_state"] == "Q")


# Ground truth against records --------------------------------------------------------------
def test_truth_agrees_with_history(run: Run):
    sim = run.sim
    finished = [t for t in sim.truth.values() if t.final_state is not None]
    history = sim.history_jobs(t.id for t in finished)
    live = set(sim.live_ids())
    for truth in finished:
        assert truth.id not in live
        if truth.purged:
            assert truth.id not in history
            continue
        record = history[truth.id]
        assert record["job_state"] == "F"
        assert pbs_state(record) == truth.final_state
        assert record.get("Exit_status") == truth.exit_status
    for truth in sim.truth.values():
        states = [state for _, state in truth.transitions]
        times = [t for t, _ in truth.transitions]
        assert times == sorted(times)
        assert all(a != b for a, b in zip(states, states[1:], strict=False))
        assert not any(state in TERMINAL for state in states[:-1]), truth
        assert (truth.final_state is not None) == (states[-1] in TERMINAL)


def test_history_omits_purged_jobs():
    sim = Simulation(seed=5, nodes=40, initial_jobs=600, history_keep=0.5)
    sim.advance(2 * 3600)
    finished = [t for t in sim.truth.values() if t.final_state is not None]
    purged = [t.id for t in finished if t.purged]
    kept = [t.id for t in finished if not t.purged]
    assert len(purged) > 20 and len(kept) > 20
    assert sim.history_jobs(purged) == {}
    assert set(sim.history_jobs(kept + ["424242.simhost"])) == set(kept)
    # -x lists live and remembered finished jobs, in job id order.
    jobs = orjson.loads(sim.qstat_json(include_history=True))["Jobs"]
    assert set(jobs) == set(sim.live_ids()) | set(kept)


def test_history_expires():
    sim = Simulation(seed=6, nodes=20, initial_jobs=200, history_duration=600.0)
    sim.advance(3600)
    old = [t for t in sim.truth.values() if t.final_state and t.transitions[-1][0] < sim.now - 700]
    assert old and all(t.purged for t in old)
    assert sim.history_jobs(t.id for t in old) == {}


# Rendering ------------------------------------------------------------------------------
def test_records_have_the_shape_of_qstat(run: Run):
    sim = run.sim
    doc = orjson.loads(sim.qstat_json())
    assert set(doc) == {"timestamp", "pbs_version", "pbs_server", "Jobs"}
    assert doc["pbs_server"] == SERVER and doc["Jobs"] == sim.live_jobs()
    for job_id, native in doc["Jobs"].items():
        assert job_id.endswith("." + SERVER)
        assert native["Job_Owner"] == f"{native['euser']}@{SERVER}"
        for key in ("ctime", "qtime", "mtime"):
            time.strptime(native[key], PBS_TIME)
        resources = native["Resource_List"]
        assert {"ncpus", "nodect", "select", "walltime"} <= set(resources)
        if native["job_state"] in ("R", "E"):
            assert native["exec_host"] and native["exec_vnode"].startswith("(")
            assert set(native["resources_used"]) >= {"cput", "mem", "walltime", "ncpus"}
            time.strptime(native["stime"], PBS_TIME)
            assert native["comment"].startswith("Job run at ")
        if native["job_state"] == "W":
            time.strptime(native["Execution_Time"], PBS_TIME)
        if native["job_state"] == "H":
            assert native["Hold_Types"] == "u"
    empty = Simulation(seed=1, nodes=4, initial_jobs=0, arrival_rate=0.0)
    assert set(orjson.loads(empty.qstat_json())) == {"timestamp", "pbs_version", "pbs_server"}


def test_nodes_and_queues(run: Run):
    sim = run.sim
    nodes = sim.nodes()
    assert len(nodes) == 200
    running = {i: n for i, n in sim.live_jobs().items() if n["job_state"] in ("R", "E")}
    on_nodes = Counter()
    for node in nodes.values():
        assert node["state"] in {"free", "job-busy", "down", "offline"}
        assert node["resources_available"]["ncpus"] == 16
        assigned = node["resources_assigned"].get("ncpus", 0)
        assert (node["state"] == "job-busy") == (assigned == 16 and node["state"] != "down")
        if node["state"] in ("down", "offline"):
            assert node["comment"]
        for job_id in node.get("jobs", []):
            assert job_id in running
            on_nodes[job_id] += 1
    assert set(on_nodes) == set(running)
    queues = sim.queues()
    assert set(queues) == {"workq", "bigq"}
    live = sim.live_jobs()
    # PBS does not count the subjobs it has not instantiated (not started yet).
    instantiated = [
        n for i, n in live.items() if not (n["job_state"] == "Q" and "[" in i and "[]" not in i)
    ]
    total = sum(q["total_jobs"] for q in queues.values())
    assert total == len(instantiated)
    for queue in queues.values():
        counts = {k: int(v) for k, v in (kv.split(":") for kv in queue["state_count"].split())}
        assert sum(counts.values()) == queue["total_jobs"]
        assert queue["enabled"] == queue["started"] == "True"
    docs = orjson.loads(sim.pbsnodes_json()), orjson.loads(sim.qstat_queues_json())
    assert docs[0]["nodes"] == nodes and docs[1]["Queue"] == queues


def test_renderings_share_nothing_with_the_simulation():
    sim = Simulation(seed=9, nodes=20, initial_jobs=200)
    before = sim.qstat_json()
    for native in sim.live_jobs().values():
        native["job_state"] = "X"
        for key in ("Resource_List", "resources_used", "Variable_List"):
            if key in native:
                native[key]["poison"] = 1
    for node in sim.nodes().values():
        node["resources_available"]["ncpus"] = 0
        node.get("jobs", []).append("poison")
    finished = [t.id for t in sim.truth.values() if t.final_state]
    for native in sim.history_jobs(finished).values():
        native["Resource_List"]["poison"] = 1
    assert sim.qstat_json() == before
    assert b"poison" not in sim.pbsnodes_json()


# Faults -----------------------------------------------------------------------------------
def test_faults_misbehave_without_changing_the_truth():
    faulty = SimBackend(seed=11, nodes=30, jobs=400, tick=30.0)
    twin = SimBackend(seed=11, nodes=30, jobs=400, tick=30.0)
    normal = twin.stat_jobs()
    assert faulty.stat_jobs() == normal

    faulty.fault("fail", count=2)
    faulty.simulation.fault("empty")
    faulty.fault("short")
    faulty.fault("history_fail")
    assert faulty.simulation.pending_faults == [
        ("fail", 2),
        ("empty", 1),
        ("short", 1),
        ("history_fail", 1),
    ]
    for _ in range(2):
        with pytest.raises(StatError):
            faulty.stat_jobs()
        twin.stat_jobs()
    assert faulty.stat_jobs() == {}
    full = twin.stat_jobs()
    short = faulty.stat_jobs()
    expected = twin.stat_jobs()
    assert 0 < len(short) <= len(expected) // 10 + 1
    assert all(expected[job_id] == native for job_id, native in short.items())
    assert full  # the twin saw jobs all along

    finished = [t.id for t in faulty.simulation.truth.values() if t.final_state]
    with pytest.raises(StatError):
        faulty.history(finished)
    assert faulty.history(finished) == twin.history(finished)
    assert faulty.stat_jobs() == twin.stat_jobs()
    assert faulty.simulation.pending_faults == []
    assert faulty.simulation.truth == twin.simulation.truth
    assert faulty.simulation.qstat_json(True) == twin.simulation.qstat_json(True)

    with pytest.raises(ValueError):
        faulty.fault("explode")


def test_backend_tick():
    backend = SimBackend(seed=12, nodes=20, jobs=200, tick=0)
    sim = backend.simulation
    backend.stat_jobs()
    assert sim.now == START
    sim.advance(100)
    assert backend.stat_jobs() == sim.live_jobs()
    ticking = SimBackend(seed=12, nodes=20, jobs=200, tick=30)
    ticking.stat_jobs()
    ticking.stat_jobs()
    assert ticking.simulation.now == START + 60
    shared = SimBackend(simulation=sim, tick=0)
    assert shared.simulation is sim
    assert set(backend.stat_nodes()) == set(sim.nodes())
    assert set(backend.stat_queues()) == {"workq", "bigq"}


def test_backend_normalises_with_the_pbs_functions(run: Run):
    backend = SimBackend(simulation=run.sim, tick=0)
    sim = run.sim
    for job_id, native in backend.stat_jobs().items():
        record = backend.normalise_job(job_id, native)
        assert record["scheduler"] == "sim"
        assert record["state"] == sim.truth[job_id].state
        assert record["user"] == sim.truth[job_id].user
        assert record["submit_time"].endswith("+00:00")
    finished = [t for t in sim.truth.values() if t.final_state and not t.purged]
    for job_id, native in backend.history([t.id for t in finished]).items():
        record = backend.normalise_job(job_id, native)
        assert record["state"] == sim.truth[job_id].final_state
        assert record["exit_status"] == sim.truth[job_id].exit_status
    for name, native in backend.stat_nodes().items():
        assert backend.normalise_node(name, native)["state"] in {"free", "busy", "down", "offline"}
    for name, native in backend.stat_queues().items():
        assert backend.normalise_queue(name, native)["counts"]["total"] == native["total_jobs"]


# Scale -------------------------------------------------------------------------------------
def test_bench_scale():
    sim = Simulation.bench(100_000)
    assert sim.live_count == 100_000
    before = sim.live_jobs()
    states = Counter(native["job_state"] for native in before.values())
    assert states["Q"] + states["H"] + states["R"] > 0.9 * 100_000
    changed = sim.mutate_fraction(0.01, random.Random(1))
    after = sim.live_jobs()
    assert 900 <= len(changed) <= 1200
    really = {i for i in before.keys() | after.keys() if before.get(i) != after.get(i)}
    assert really <= changed and len(really) > 0.9 * len(changed)
    assert sim.qstat_json().startswith(b'{"timestamp":')
