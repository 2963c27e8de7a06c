"""Every ``meta`` field name and every key name is defined once, in its owner
module of the contract (``sdk/contract/meta.py``, ``sdk/contract/keys.py``): a
string literal naming one anywhere else in the stages' sources fails here.

Python is read with :mod:`ast` (docstrings and comments do not count, an
f-string's literal parts do); Lua, in ``.lua`` files and in Python strings that
hold a script, by its quoted strings.  A field name that is also an everyday word
or another structure's field (``status``, ``cycle``, ``epoch``... see
:data:`AMBIGUOUS`) is checked where it can only mean the ``meta`` field: in a
hash command on ``meta``, in a mapping written to it, in a lookup of a dict named
``meta``, and in Lua lines that name ``meta``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobtap.contract import meta
from jobtap.contract.keys import PREFIX, SiteKeys
from tests.support.release import CHECKOUT_ONLY

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("collector", "workers", "sdk", "cli", "acl", "sim", "integrations")
META_OWNER = "sdk/contract/meta.py"
KEYS_OWNER = "sdk/contract/keys.py"

FIELDS = set(meta.FIELDS.values())
# field names that also mean something else (a record's field, a chunk's, a word)
AMBIGUOUS = {
    meta.STATUS,
    meta.SCHEDULER,
    meta.EPOCH,
    meta.CYCLE,
    meta.FEED,
    meta.COLLECTOR,
    meta.INTERVAL,
    meta.FOLLOW,
    meta.PUSHED,
    meta.BACKEND,
    meta.PROBING,
}
# the literal parts of the fields named after something (meta.count() ...)
PATTERN_PREFIXES = ("count_", "time_", "cycles_", "failures_", "events_")
PATTERN_PARTS = ("_last_",)
# Literals allowed where they are (file, literal): none.
ELSEWHERE: set[tuple[str, str]] = set()
HASH_COMMANDS = {"hset", "hget", "hmget", "hincrby", "hdel", "hsetnx", "hexists", "hgetall"}


def key_fragments() -> set[str]:
    """What a key name is made of beside the site and the names in it: each
    site-wide key's tail, and the per-user, node and queue parts."""
    k = SiteKeys("s")
    tails = {v[len(k.base) :] for v in vars(k).values() if isinstance(v, str) and v != k.base}
    tails.discard("")
    made = {
        k.job("u", "j")[len(k.user_base("u")) :].removesuffix("j"),  # ":job:"
        k.user_jobs("u")[len(k.user_base("u")) :],  # ":jobs"
        k.user_base("u")[len(k.base) :].removesuffix("u"),  # ":u:"
        k.node("n")[len(k.base) :].removesuffix("n"),  # ":node:"
        k.queue("q")[len(k.base) :].removesuffix("q"),  # ":queue:"
    }
    return tails | made | {f"{PREFIX}:{{", f"{PREFIX}:*", ":bell"}


FRAGMENTS = key_fragments()
_FRAGMENT = re.compile(
    "(" + "|".join(re.escape(f) for f in sorted(FRAGMENTS, key=len, reverse=True)) + r")(?![\w-])"
)
_LUA_STRING = re.compile(r"""'([^'\n]*)'|"([^"\n]*)\"""")


def sources(suffix: str) -> Iterator[Path]:
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob(f"*{suffix}")):
            # The rig and the stand-ins (CHECKOUT_ONLY) are the tests' tools, not
            # stages: like tests/, they may spell what they check.
            if not rel(path).startswith(CHECKOUT_ONLY):
                yield path


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- Python --------------------------------------------------------------------------------
def _docstrings(tree: ast.AST) -> set[int]:
    """The string statements (docstrings, bare strings): not code."""
    return {
        id(n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)
    }


def _is_meta(node: ast.expr) -> bool:
    """``keys.meta``, ``self.keys.meta``, ``meta``: the meta hash or a dict of it."""
    return (isinstance(node, ast.Attribute) and node.attr == "meta") or (
        isinstance(node, ast.Name) and node.id == "meta"
    )


def _meta_contexts(tree: ast.AST) -> set[int]:
    """The string constants that can only name a meta field: arguments of a hash
    command on meta, keys of a mapping written to it (given there or through a
    name bound to a dict literal), lookups in a dict named ``meta``."""
    found: set[int] = set()
    for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.Module)]:
        mappings: set[str] = set()
        for n in ast.walk(func):
            if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Attribute):
                continue
            attr = n.func.attr
            if attr in HASH_COMMANDS and n.args and _is_meta(n.args[0]):
                for a in n.args[1:]:
                    found.update(id(c) for c in ast.walk(a) if isinstance(c, ast.Constant))
                for kw in n.keywords:
                    if kw.arg == "mapping" and isinstance(kw.value, ast.Dict):
                        found.update(id(k) for k in kw.value.keys if k is not None)
                    elif kw.arg == "mapping" and isinstance(kw.value, ast.Name):
                        mappings.add(kw.value.id)
            elif attr in ("get", "pop") and _is_meta(n.func.value) and n.args:
                found.add(id(n.args[0]))
        for n in ast.walk(func):
            if isinstance(n, ast.Subscript) and _is_meta(n.value):
                found.add(id(n.slice))
            elif isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict):
                if any(isinstance(t, ast.Name) and t.id in mappings for t in n.targets):
                    found.update(id(k) for k in n.value.keys if k is not None)
            elif isinstance(n, ast.Assign | ast.AugAssign):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                        if t.value.id in mappings:
                            found.add(id(t.slice))
    return found


def python_literals(path: Path, text: str) -> list[str]:
    """What ``text`` (the module at ``path``) spells that its owner should."""
    tree = ast.parse(text)
    skip = _docstrings(tree)
    in_meta = _meta_contexts(tree)
    name = rel(path) if path.is_absolute() else str(path)
    wrong = []
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr) and name != META_OWNER:
            parts = [v.value for v in n.values if isinstance(v, ast.Constant)]
            first = n.values[0] if n.values else None
            if isinstance(first, ast.Constant) and str(first.value).startswith(PATTERN_PREFIXES):
                wrong.append(f"{name}:{n.lineno}: meta field pattern f{first.value!r}...")
            elif any(p in PATTERN_PARTS or str(p).endswith("_last") for p in parts):
                wrong.append(f"{name}:{n.lineno}: meta field pattern {parts!r}")
        if not isinstance(n, ast.Constant) or not isinstance(n.value, str) or id(n) in skip:
            continue
        s = n.value
        if (
            name != META_OWNER
            and s in FIELDS
            and (s not in AMBIGUOUS or id(n) in in_meta)
            and (name, s) not in ELSEWHERE
        ):
            wrong.append(f"{name}:{n.lineno}: meta field {s!r}")
        if name != META_OWNER and id(n) in in_meta and s.startswith(PATTERN_PREFIXES):
            wrong.append(f"{name}:{n.lineno}: meta field {s!r}")
        if "redis.call" in s and name != META_OWNER:
            wrong += [f"{name}:{n.lineno}: {w}" for w in lua_literals(s)]
        if name != KEYS_OWNER and (m := _FRAGMENT.search(s)):
            wrong.append(f"{name}:{n.lineno}: key name {m.group()!r} in {s[:60]!r}")
    return wrong


# -- Lua -----------------------------------------------------------------------------------
def lua_literals(text: str) -> list[str]:
    wrong = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("--", 1)[0]
        for m in _LUA_STRING.finditer(code):
            s = m.group(1) if m.group(1) is not None else m.group(2)
            if s in FIELDS and (s not in AMBIGUOUS or "meta" in code.lower()):
                wrong.append(f"line {number}: meta field {s!r}")
            if f := _FRAGMENT.search(s):
                wrong.append(f"line {number}: key name {f.group()!r}")
    return wrong


def test_every_meta_field_and_key_name_is_spelled_once():
    wrong = []
    for path in sources(".py"):
        wrong += python_literals(path, path.read_text())
    for path in sources(".lua"):
        wrong += [f"{rel(path)}: {w}" for w in lua_literals(path.read_text())]
    assert not wrong, "spell these with jobtap.contract (meta.X, SiteKeys):\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "code",
    [
        'r.hincrby(keys.meta, "applied_chunks", 1)',
        'x = "lease_generation"',
        'pipe.hset(self.keys.meta, mapping={"status": "ok"})',
        'def f(meta):\n    return meta.get("epoch")',
        'def f(r, k):\n    fields = {"status": 1}\n    r.hset(k.meta, mapping=fields)',
        'f"count_{name}"',
        'def f(meta):\n    return meta.get("count_changed", 0)',
        'f"{tier}_last_{what}"',
        'p = f"{tier}_last"',
        'key = f"{keys.base}:collector"',
        "SCRIPT = \"redis.call('HGET', KEYS[1], 'lease_generation')\"",
        'ACL = ("jobtap:*:events",)',
    ],
)
def test_the_check_sees_a_planted_literal(code):
    assert python_literals(Path("collector/planted.py"), code)


@pytest.mark.parametrize(
    "code",
    [
        '"""The status and the lease_generation, in a docstring."""',
        "# meta's 'lease_generation', in a comment\nx = 1",
        'record = {"status": "R", "cycle": 3}',  # a record's fields, not meta's
        'log.warning("jobtap: lost the connection")',
        "from jobtap.contract import meta\nr.hget(keys.meta, meta.LEASE_GENERATION)",
    ],
)
def test_the_check_lets_pass_what_is_no_literal_of_a_name(code):
    assert python_literals(Path("collector/planted.py"), code) == []


def test_the_check_reads_lua():
    assert lua_literals("redis.call('HGET', meta, 'lease_generation')")
    assert lua_literals("redis.call('HSET', KEYS[5], 'epoch', e)  -- meta") == []  # comment
    assert lua_literals("redis.call('HSET', meta, 'epoch', e)")
    assert lua_literals("redis.call('HSET', key, 'epoch', e)") == []  # an object's epoch
