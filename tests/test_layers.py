"""The house rules of the layout: imports run one way (http -> planner -> vendors -> core, store ->
core; gateway/__init__.py), and no hand-written module grows past 400 lines.

Read from the source with `ast`, every import counts (inside functions and TYPE_CHECKING blocks
too): a layer that needs something from above it is a design problem, not a typing detail."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("gateway", "handlers", "generated")

# What each part may import of ours (besides itself): the layers below it, never one above.
# `generated` is the contract's models: a leaf.
ALLOWED = {
    "gateway.core": {"generated"},
    "gateway.vendors": {"gateway.core", "generated"},
    "gateway.planner": {"gateway.vendors", "gateway.core", "generated"},
    "gateway.store": {"gateway.core"},
    "gateway.http": {"gateway.planner", "gateway.vendors", "gateway.store", "gateway.core", "generated"},
    # The handlers sit above http; only the assembly at the top may import them.
    "handlers": {"gateway.http", "gateway.planner", "gateway.store", "gateway.vendors", "gateway.core", "generated"},
    "generated": set(),
}
TOP = {"gateway", "gateway.cli", "gateway.limits_cli", "gateway.services", "gateway.__main__"}  # the assembly: anything


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str | None:
    """The layer a module of ours belongs to (None for the assembly at the top)."""
    if module in TOP:
        return None
    return next((layer for layer in sorted(ALLOWED, key=len, reverse=True)
                 if module == layer or module.startswith(layer + ".")), module)


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            # `from gateway import services` imports the module gateway.services
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in OURS}


SOURCES = sorted(p for top in OURS for p in (ROOT / top).rglob("*.py"))


def test_every_module_belongs_to_a_known_layer():
    unknown = [module_name(p) for p in SOURCES if part_of(module_name(p)) not in (None, *ALLOWED)]
    assert unknown == [], "add the new package to tests/test_layers.py ALLOWED, with the layers it may import"


@pytest.mark.parametrize("path", SOURCES, ids=[module_name(p) for p in SOURCES])
def test_imports_run_one_way(path):
    layer = part_of(module_name(path))
    if layer is None:
        return
    wrong = []
    for name in sorted(imports(path)):
        target = part_of(name)
        if target is None and name not in TOP:
            continue  # `gateway` itself (the package docstring, __version__)
        if target != layer and target not in ALLOWED[layer]:
            wrong.append(name)
    assert wrong == [], f"{module_name(path)} ({layer}) may import only {sorted(ALLOWED[layer])} of ours"


def test_the_check_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from gateway.planner.plan import Plan\nimport gateway.http.app\n")
    assert imports(bad) == {"gateway.planner.plan", "gateway.planner.plan.Plan", "gateway.http.app"}
    assert part_of("gateway.store.ledger") == "gateway.store"
    assert "gateway.planner" not in ALLOWED["gateway.store"]


MAX_LINES = 400


@pytest.mark.parametrize("path", [p for p in SOURCES if p.parts[-2] != "generated"],
                         ids=[module_name(p) for p in SOURCES if p.parts[-2] != "generated"])
def test_no_hand_written_module_is_over_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module_name(path)} has {lines} lines: split it by what its parts do"
