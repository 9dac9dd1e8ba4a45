"""The loader builds a log's parts without knowing the log: no import of `storage.log` from `storage.log_loader`."""

from __future__ import annotations

import ast
from pathlib import Path

import kafkalite.storage.log_loader as log_loader


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):  # also inside `if TYPE_CHECKING:` and functions
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_log_loader_does_not_import_log():
    modules = imported_modules(Path(log_loader.__file__))
    assert "kafkalite.storage.log" not in modules
    assert "kafkalite.storage.log.Log" not in modules
    assert not any(m.startswith("kafkalite.storage.log.") for m in modules)
