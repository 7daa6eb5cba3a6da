"""Imports point down the layers: surfaces -> app -> features -> core (auth -> audit -> store)."""

from __future__ import annotations

import ast
from pathlib import Path

import armarius

SOURCE = Path(armarius.__file__).parent

#: Higher layers may import lower ones, never the other way round.
LAYERS: dict[str, int] = {
    "errors": 0, "canonical": 0, "textview": 0,
    "config": 1, "validation": 1, "files": 1, "textdiff": 1,
    "store": 2,
    "audit": 3,
    "auth": 4,
    "memory": 5, "drafts": 5, "sessions": 5, "research": 5, "evidence": 5, "repairs": 5,
    "transfer": 5,
    "app": 6,
    "mcp": 7,
    "web": 8,  # hosts /mcp next to the API
    "cli": 9,
    "__init__": 10, "__main__": 10,
}


def _top(module_path: Path) -> str:
    relative = module_path.relative_to(SOURCE)
    return relative.parts[0].removesuffix(".py")


FEATURES = {name for name, layer in LAYERS.items() if layer == LAYERS["memory"]}


def _imported(tree: ast.AST) -> set[tuple[str, str]]:
    """(package, module) of every armarius import: ('memory', 'service') for armarius.memory.service."""
    found = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "armarius" and len(parts) > 1:
                found.add((parts[1], parts[2] if len(parts) > 2 else ""))
    return found


def test_every_package_has_a_layer() -> None:
    tops = {_top(path) for path in SOURCE.rglob("*.py")}
    assert tops <= set(LAYERS), f"give these a layer: {tops - set(LAYERS)}"


def test_imports_only_point_down() -> None:
    violations = []
    for path in SOURCE.rglob("*.py"):
        here = _top(path)
        for imported, module in _imported(ast.parse(path.read_text(encoding="utf-8"))):
            if imported == here:
                continue
            # A feature may call another feature's service (and use its model, such as research's captures),
            # never its tables.
            if here in FEATURES and imported in FEATURES and module in ("service", "model", "captures"):
                continue
            if LAYERS[imported] >= LAYERS[here]:
                violations.append(f"{path.relative_to(SOURCE)} imports armarius.{imported}.{module}")
    assert not violations, "\n".join(violations)


def test_only_the_composition_root_and_the_cli_read_settings() -> None:
    readers = set()
    for path in SOURCE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if "load_settings(" in text or "os.environ" in text or "getenv(" in text:
            readers.add(str(path.relative_to(SOURCE)))
    assert readers <= {"config.py", "cli/context.py"}, readers
