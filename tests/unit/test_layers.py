"""The house rules of the layout: imports run one way (http -> endpoints -> planner -> vendors ->
core; http -> limits -> store -> core; gateway/__init__.py), and no hand-written module grows past 400 lines.

Read from the source with `ast`, every import counts (inside functions and TYPE_CHECKING blocks
too): a layer that needs something from above it is a design problem, not a typing detail."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("gateway", "handlers", "generated", "contract")

# What each part may import of ours (besides itself): the layers below it, never one above.
# `generated` is the contract's models: a leaf.
ALLOWED = {
    "gateway.core": {"generated"},
    "gateway.vendors": {"gateway.core", "generated"},
    "gateway.planner": {"gateway.vendors", "gateway.core", "generated"},
    # One unit per endpoint, over the shared planner (gateway/endpoints/).
    "gateway.endpoints": {"gateway.planner", "gateway.vendors", "gateway.core", "generated"},
    "gateway.store": {"gateway.core"},
    # Limits count in the store's database and Redis, and read the ledger's sums.
    "gateway.limits": {"gateway.store", "gateway.core"},
    # Administration (gateway/admin.py): one service over accounts, keys, limits and prices, with its audit.
    "gateway.admin": {"gateway.limits", "gateway.store", "gateway.core"},
    "gateway.http": {"gateway.endpoints", "gateway.planner", "gateway.vendors", "gateway.limits", "gateway.store", "gateway.core",
                     "generated"},
    # The handlers sit above http; only the assembly at the top may import them.
    "handlers": {"gateway.http", "gateway.endpoints", "gateway.planner", "gateway.admin", "gateway.limits", "gateway.store",
                 "gateway.vendors", "gateway.core", "generated"},
    "generated": set(),
    # The contract's gate (make check-contract): a development tool apart from the gateway, which
    # nothing of the gateway imports.
    "contract": set(),
}
TOP = {"gateway", "gateway.cli", "gateway.cli_output", "gateway.limits_cli", "gateway.services", "gateway.__main__"}  # the assembly: anything
# Imports against the grain on their way out, each named with its reason (none now).
LEAVING: dict[str, set[str]] = {}


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
    assert unknown == [], "add the new package to tests/unit/test_layers.py ALLOWED, with the layers it may import"


@pytest.mark.parametrize("path", SOURCES, ids=[module_name(p) for p in SOURCES])
def test_imports_run_one_way(path):
    layer = part_of(module_name(path))
    if layer is None:
        return
    wrong = []
    for name in sorted(imports(path)):
        target = part_of(name)
        if name == "gateway" or (target is None and name not in TOP):
            continue  # `gateway` itself (the package docstring, __version__)
        leaving = LEAVING.get(module_name(path), ())
        if any(name == gone or name.startswith(gone + ".") for gone in leaving):
            continue
        if target != layer and target not in ALLOWED[layer]:
            wrong.append(name)
    assert wrong == [], f"{module_name(path)} ({layer}) may import only {sorted(ALLOWED[layer])} of ours"


def test_the_check_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from gateway.planner.plan import Plan\nimport gateway.http.server.app\n")
    assert imports(bad) == {"gateway.planner.plan", "gateway.planner.plan.Plan", "gateway.http.server.app"}
    assert part_of("gateway.store.ledger") == "gateway.store"
    assert "gateway.planner" not in ALLOWED["gateway.store"]


# Inside vendors/: the HTTP client, transports, proxies and SSE reader (transport/) apart from every
# protocol; a protocol's folder is its shared wire parts and one translator per endpoint.
PROTOCOL_FOLDERS = tuple(f"gateway.vendors.{folder.name}" for folder in sorted((ROOT / "gateway" / "vendors").iterdir())
                         if (folder / "__init__.py").exists() and folder.name != "transport")
TRANSPORT = sorted(p for p in (ROOT / "gateway" / "vendors" / "transport").rglob("*.py"))


@pytest.mark.parametrize("path", TRANSPORT, ids=[module_name(p) for p in TRANSPORT])
def test_the_transport_knows_no_protocol(path):
    wrong = [name for name in sorted(imports(path)) if name.startswith(PROTOCOL_FOLDERS)]
    assert wrong == [], f"{module_name(path)} imports a protocol's module: {wrong}"


def foreign(module: str, names: set[str]) -> list[str]:
    """The protocol folders' modules among `names` that are not `module`'s own folder's."""
    own = next(f for f in PROTOCOL_FOLDERS if module == f or module.startswith(f + "."))
    return [name for name in sorted(names)
            if name.startswith(PROTOCOL_FOLDERS) and not (name == own or name.startswith(own + "."))]


IN_PROTOCOLS = sorted(p for folder in PROTOCOL_FOLDERS for p in (ROOT / folder.replace(".", "/")).rglob("*.py"))


@pytest.mark.parametrize("path", IN_PROTOCOLS, ids=[module_name(p) for p in IN_PROTOCOLS])
def test_no_protocol_imports_another(path):
    """What several protocols share (the OpenAI chat wire, the gateway's lingua franca: chat_wire.py;
    conversations, logprobs, untrusted reading) lives in vendors/ beside them, so a protocol's
    folder can change, or go, without another's."""
    wrong = foreign(module_name(path), imports(path))
    assert wrong == [], f"{module_name(path)} imports another protocol's folder: {wrong}"


def test_the_protocol_check_sees_a_foreign_import():
    assert foreign("gateway.vendors.anthropic.chat", {"gateway.vendors.openai.chat", "gateway.vendors.chat_wire",
                                                      "gateway.vendors.anthropic.messages"}) == ["gateway.vendors.openai.chat"]


PROTOCOL_MODULES = sorted(p for folder in PROTOCOL_FOLDERS for p in (ROOT / folder.replace(".", "/")).glob("*.py")
                          if p.name != "adapter.py")


@pytest.mark.parametrize("path", PROTOCOL_MODULES, ids=[module_name(p) for p in PROTOCOL_MODULES])
def test_a_translator_never_imports_its_adapter(path):
    """The adapter (adapter.py) holds its translators; a translator is made with what it uses of
    the adapter (vendors/base.py), so a protocol's folder has no import circle."""
    folder = module_name(path).rpartition(".")[0]
    assert f"{folder}.adapter" not in imports(path), f"{module_name(path)} imports {folder}.adapter"


MAX_LINES = 400


@pytest.mark.parametrize("path", [p for p in SOURCES if p.parts[-2] != "generated"],
                         ids=[module_name(p) for p in SOURCES if p.parts[-2] != "generated"])
def test_no_hand_written_module_is_over_400_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module_name(path)} has {lines} lines: split it by what its parts do"


# -- the tests and the benchmarks --------------------------------------------------------------------
# Test modules share code only through the harness (tests/support/); benchmarks take the harness from
# there too, and of each other only the benchmarks' own harness and in-process driver, or a part of
# their own run (bench.run's instruction counts, bench.routing's end-to-end half).
BENCH_SHARED = {"bench.harness", "bench.inprocess"}
BENCH_PARTS = {"bench.run": {"bench.instructions"}, "bench.routing": {"bench.routing_http"}}
TEST_KINDS = ("unit", "integration", "contract")
# The contract's fuzz run and its hooks' modules (tests/contract/fuzz_*.py): the vendor tests run it
# per protocol.
FUZZ = {"tests.contract.fuzz", *(f"tests.contract.{p.stem}" for p in (ROOT / "tests" / "contract").glob("fuzz_*.py"))}


def ours_outside(path: Path) -> set[str]:
    """The modules of tests/ and bench/ a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from bench import inprocess` imports the module bench.inprocess
            found |= {node.module} if "." in node.module else {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.split(".")[0] in ("tests", "bench")}


def wrong_harness_imports(module: str, imported: set[str]) -> list[str]:
    allowed_bench = BENCH_SHARED | BENCH_PARTS.get(module, set()) | {module}
    wrong = []
    for name in sorted(imported):
        if name == "tests.support" or name.startswith("tests.support."):
            continue
        if name.startswith("bench.") and module.startswith("bench.") and name in allowed_bench:
            continue
        if module.startswith("tests.") and name in FUZZ:
            continue
        wrong.append(name)
    return wrong


HARNESS_USERS = sorted([*(ROOT / "bench").glob("*.py"), *(p for kind in TEST_KINDS for p in (ROOT / "tests" / kind).glob("*.py"))])


@pytest.mark.parametrize("path", HARNESS_USERS, ids=[module_name(p) for p in HARNESS_USERS])
def test_tests_and_benchmarks_share_code_only_through_the_harness(path):
    wrong = wrong_harness_imports(module_name(path), ours_outside(path))
    assert wrong == [], f"{module_name(path)} imports {wrong}: move what it needs into tests/support/ or bench/harness.py"


def test_the_harness_check_sees_a_test_importing_a_test():
    assert wrong_harness_imports("tests.unit.test_a", {"tests.integration.test_b", "tests.support.cli"}) == [
        "tests.integration.test_b"]
    assert wrong_harness_imports("bench.limits", {"bench.run", "bench.harness"}) == ["bench.run"]
