"""The layers of docs/design.md hold: each package imports only its own layer and the ones before it, and
the two cycles the layers once had (protocol.compiler -> protocol, storage.log <-> storage.log_loader) stay
cut. Read from the source with `ast`, so an import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "kafkalite"

LAYER = {
    "error_codes": 0, "errors": 0, "clock": 0, "scheduler": 0, "__init__": 0,
    "records": 1,
    "storage": 2,
    "config": 3, "cleaner": 3, "manager": 3,
    "protocol": 4, "broker": 4, "coordinator": 4, "client": 4, "partitioner": 4, "cluster": 4, "security": 4,
    "spark": 6,
    "cli": 7,
}


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


def test_no_package_imports_a_later_layer():
    wrong = []
    for path in SRC.rglob("*.py"):
        own = _top("kafkalite." + ".".join(path.relative_to(SRC).with_suffix("").parts))
        for module in _imports(path):
            if LAYER[_top(module)] > LAYER[own]:
                wrong.append(f"{path.relative_to(SRC)} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_protocol_compiler_does_not_import_its_package():  # (log_loader's cycle: test_storage_imports.py)
    compiler = ast.parse((SRC / "protocol" / "compiler.py").read_text())
    assert not [n for n in ast.walk(compiler) if isinstance(n, ast.ImportFrom) and n.module == "kafkalite.protocol"]


def test_cluster_does_not_import_the_broker():
    """The broker builds on the cluster package (controller, store, metadata cache), never the reverse."""
    wrong = [f"{p.relative_to(SRC)} imports {m}" for p in (SRC / "cluster").rglob("*.py") for m in _imports(p)
             if _top(m) in ("broker", "coordinator", "client")]
    assert not wrong, "\n".join(wrong)
