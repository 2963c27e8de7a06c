"""The folders' dependencies point one way (docs/architecture.md): read every
module's imports and check who may import whom.  The rig (sim/rig, sim/standins)
is a checkout's, not the wheel's: the shipped packages never import it, it and
bench/ never import tests/, and it is imported as ``sim.rig``, never as
``jobtap.sim.rig``."""

from __future__ import annotations

import ast
from importlib.util import resolve_name
from pathlib import Path

from tests.support.release import CHECKOUT_ONLY

ROOT = Path(__file__).resolve().parent.parent
# folder -> its package, and the jobtap packages it may import besides itself
PACKAGES = {
    "sdk": ("jobtap", set()),
    "workers": ("jobtap.workers", {"jobtap"}),
    "collector": (
        "jobtap.collector",
        # the queue chunks travel in (both sides must take and push it alike); the
        # chunk, the epoch and the lease are the SDK's contract (jobtap.contract)
        {"jobtap", "jobtap.workers.queues"},
    ),
    "sim": ("jobtap.sim", {"jobtap", "jobtap.collector.backends"}),
    "acl": ("jobtap.acl", {"jobtap"}),
    "cli": (
        "jobtap.cli",
        {"jobtap", "jobtap.collector", "jobtap.workers", "jobtap.acl", "jobtap.sim"},
    ),
    "integrations/common": ("jobtap.integrations", {"jobtap"}),
    "integrations/psij": ("jobtap.psij", {"jobtap", "jobtap.integrations"}),
    "integrations/parsl": ("jobtap.parsl", {"jobtap", "jobtap.integrations"}),
    "integrations/snakemake": ("jobtap.snakemake", {"jobtap", "jobtap.integrations"}),
}
SUBPACKAGES = (
    "jobtap.collector",
    "jobtap.workers",
    "jobtap.cli",
    "jobtap.acl",
    "jobtap.sim",
    "jobtap.integrations",
    "jobtap.psij",
    "jobtap.parsl",
    "jobtap.snakemake",
)


def shipped(folder: str) -> list[Path]:
    """The modules of a package folder that the wheel holds (not the rig)."""
    return [
        path
        for path in sorted((ROOT / folder).rglob("*.py"))
        if not any(path.is_relative_to(ROOT / rig) for rig in CHECKOUT_ONLY)
    ]


def absolute_imports(path: Path) -> set[str]:
    """Every module name ``path`` imports absolutely (``from x import y`` gives
    ``x`` and ``x.y``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def under(name: str, *tops: str) -> bool:
    return any(name == top or name.startswith(f"{top}.") for top in tops)


def imported(path: Path, package: str) -> set[str]:
    """The jobtap names ``path`` imports, relative imports resolved against
    ``package`` (the package the module is in)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = resolve_name("." * node.level + (node.module or ""), package)
            names.update(f"{module}.{a.name}" for a in node.names)
    return {n for n in names if n == "jobtap" or n.startswith("jobtap.")}


def owner(name: str) -> str:
    """The jobtap package a name belongs to (``jobtap`` for the SDK)."""
    for sub in SUBPACKAGES:
        if name == sub or name.startswith(sub + "."):
            return sub
    return "jobtap"


def allowed(name: str, own: str, may: set[str]) -> bool:
    if owner(name) in (own, *(m for m in may if m in SUBPACKAGES or m == "jobtap")):
        return True
    return any(name == m or name.startswith(m + ".") for m in may if m != "jobtap")


def test_dependencies_point_one_way():
    wrong = []
    for folder, (package, may) in PACKAGES.items():
        for path in shipped(folder):
            parts = path.relative_to(ROOT / folder).parent.parts
            for name in imported(path, ".".join((package, *parts))):
                if not allowed(name, package, may):
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_bench_and_the_rig_import_nothing_from_tests():
    """What the benches share with the tests lives in the rig (sim/rig,
    sim/standins); tests/ is the tests' own."""
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for folder in ("bench", *CHECKOUT_ONLY)
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name in absolute_imports(path)
        if under(name, "tests")
    ]
    assert not wrong, "\n".join(wrong)


def test_the_wheel_s_code_imports_no_checkout_folder():
    """The shipped packages import neither the rig nor tests/ nor bench/, which a
    pip-installed jobtap does not have."""
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for folder in PACKAGES
        for path in shipped(folder)
        for name in absolute_imports(path)
        if under(name, "sim", "tests", "bench")
        or under(name, *(f"jobtap.{rig.replace('/', '.')}" for rig in CHECKOUT_ONLY))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_rig_is_imported_by_its_checkout_name_only():
    """``sim.rig``, never ``jobtap.sim.rig`` (an editable install would find that
    too, as a second copy of every module)."""
    checkout = [p for p in ROOT.glob("*") if p.is_dir() and not p.name.startswith(".")]
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for folder in checkout
        for path in sorted(folder.rglob("*.py"))
        for name in absolute_imports(path)
        if under(name, *(f"jobtap.{rig.replace('/', '.')}" for rig in CHECKOUT_ONLY))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_collector_names_no_backend_by_string():
    """Backends plug in as entry points (pyproject.toml, group ``jobtap.backends``):
    the collector names no backend module by its path, so not the simulator either."""
    named = [
        f"{path.relative_to(ROOT)}"
        for path in sorted((ROOT / "collector").rglob("*.py"))
        if "jobtap.sim" in path.read_text()
    ]
    assert not named


def test_the_check_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("from jobtap.collector.cycle import Collector\nfrom . import apply\n")
    names = imported(bad, "jobtap.workers")
    assert names == {"jobtap.collector.cycle.Collector", "jobtap.workers.apply"}
    assert not allowed("jobtap.collector.cycle.Collector", "jobtap.workers", {"jobtap"})
    assert allowed("jobtap.workers.apply", "jobtap.workers", {"jobtap"})
    assert allowed("jobtap.keys.SiteKeys", "jobtap.workers", {"jobtap"})
    assert allowed(
        "jobtap.workers.queues.ChunkQueue", "jobtap.collector", {"jobtap.workers.queues"}
    )
    assert allowed("jobtap.contract.chunk.Chunk", "jobtap.workers", {"jobtap"})
    assert not allowed(
        "jobtap.workers.apply.Applier", "jobtap.collector", {"jobtap.workers.queues"}
    )
    assert not allowed("jobtap.cli.app.main", "jobtap.sim", {"jobtap", "jobtap.collector.backends"})
    bench = tmp_path / "b.py"
    bench.write_text("from tests.support.sdk import Writer\nimport tests.psij.upstream\n")
    assert under("tests.support.sdk", "tests") and not under("testsuite", "tests")
    assert {"tests.support.sdk", "tests.psij.upstream"} <= absolute_imports(bench)
