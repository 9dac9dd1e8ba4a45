"""The layers of docs/design.md hold: each package imports only itself and the packages before it, and no two
modules import each other (a cycle of two files is a seam that a layer does not show). Read from the source with
`ast`, so an import inside a function counts too; imports under `if TYPE_CHECKING:` are types only and never
run, so they are left out of the cycle check."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "kafkalite"

# Every package in order: a package may import those before it, never one after. The base modules
# share the first place.
ORDER = [
    ("error_codes", "errors", "clock", "scheduler", "backoff", "__init__"),
    ("records",),
    ("storage",),
    ("config",),
    ("cleaner",),
    ("manager",),
    ("protocol",),
    ("security",),
    ("cluster",),
    ("replication",),
    ("coordinator",),
    ("broker",),
    ("client", "partitioner"),
    ("spark",),
    ("cli",),
]
LAYER = {name: rank for rank, names in enumerate(ORDER) for name in names}


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return [m for m in out if m == "kafkalite" or m.startswith("kafkalite.")]


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_package_has_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in SRC.iterdir() if p.suffix == ".py" or p.is_dir()}
    tops.discard("__pycache__")
    assert tops <= set(LAYER), f"add to LAYER (and docs/design.md): {sorted(tops - set(LAYER))}"


def layer_violations(src: Path) -> list[str]:
    wrong = []
    for path in src.rglob("*.py"):
        own = _top("kafkalite." + ".".join(path.relative_to(src).with_suffix("").parts))
        for module in _imports(path):
            if LAYER[_top(module)] > LAYER[own]:
                wrong.append(f"{path.relative_to(src)} imports {module}")
    return wrong


@pytest.mark.slow
def test_no_package_imports_a_later_layer():
    wrong = layer_violations(SRC)
    assert not wrong, "\n".join(wrong)


def _module(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(["kafkalite", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The kafkalite modules `path` imports when it runs (`from package import module` counts as the module)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                   for stmt in node.body for n in ast.walk(stmt)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out & modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_pairs(src: Path) -> list[tuple[str, str]]:
    paths = {_module(src, p): p for p in src.rglob("*.py")}
    graph = {m: _runtime_imports(p, set(paths)) - {m} for m, p in paths.items()}
    return sorted({(min(a, b), max(a, b)) for a, imported in graph.items() for b in imported if a in graph[b]})


@pytest.mark.slow
def test_no_two_modules_import_each_other():
    pairs = import_pairs(SRC)
    assert not pairs, "modules importing each other: " + ", ".join(f"{a} <-> {b}" for a, b in pairs)


def test_the_checks_see_an_upward_import_and_a_circle(tmp_path):
    """Not vacuous: on a tree with what issue 34 found (the group coordinator importing the broker's Partition,
    broker.apis and broker.authz importing each other) both checks fail; a type-only import is no circle."""
    fake = tmp_path / "kafkalite"
    files = {
        "coordinator/offsets_topic.py": "from kafkalite.broker.partition import Partition\n",
        "broker/partition.py": "",
        "broker/apis.py": "def handle():\n    from kafkalite.broker.authz import check\n",
        "broker/authz.py": "from kafkalite.broker import apis\n",
        "storage/checkpoint.py": "from kafkalite.storage.leader_epoch import EpochEntry\n",
        "storage/leader_epoch.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from kafkalite.storage.checkpoint import File\n",
    }
    for name, text in files.items():
        (fake / name).parent.mkdir(parents=True, exist_ok=True)
        (fake / name).write_text(text)
    assert layer_violations(fake) == ["coordinator/offsets_topic.py imports kafkalite.broker.partition"]
    assert import_pairs(fake) == [("kafkalite.broker.apis", "kafkalite.broker.authz")]


def test_protocol_compiler_does_not_import_its_package():  # (log_loader's cycle: test_storage_imports.py)
    compiler = ast.parse((SRC / "protocol" / "compiler.py").read_text())
    assert not [n for n in ast.walk(compiler) if isinstance(n, ast.ImportFrom) and n.module == "kafkalite.protocol"]


def test_cluster_does_not_import_the_broker():
    """The broker builds on the cluster package (controller, store, metadata cache), never the reverse."""
    wrong = [f"{p.relative_to(SRC)} imports {m}" for p in (SRC / "cluster").rglob("*.py") for m in _imports(p)
             if _top(m) in ("broker", "coordinator", "client")]
    assert not wrong, "\n".join(wrong)
