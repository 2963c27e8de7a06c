"""The folders' dependencies point one way (docs/architecture.md): read every
module's imports and check who may import whom."""

from __future__ import annotations

import ast
from importlib.util import resolve_name
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folder -> its package, and the jobtap packages it may import besides itself
PACKAGES = {
    "sdk": ("jobtap", set()),
    "workers": ("jobtap.workers", {"jobtap"}),
    "collector": (
        "jobtap.collector",
        # the chunk, the queue it travels in (both sides must take and push it
        # alike), and the epoch rule
        {"jobtap", "jobtap.workers.chunk", "jobtap.workers.queues", "jobtap.workers.epoch"},
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
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).parent.parts
            for name in imported(path, ".".join((package, *parts))):
                if not allowed(name, package, may):
                    wrong.append(f"{path.relative_to(ROOT)} imports {name}")
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
    assert allowed("jobtap.workers.chunk.Chunk", "jobtap.collector", {"jobtap.workers.chunk"})
    assert not allowed("jobtap.workers.apply.Applier", "jobtap.collector", {"jobtap.workers.chunk"})
    assert not allowed("jobtap.cli.app.main", "jobtap.sim", {"jobtap", "jobtap.collector.backends"})
