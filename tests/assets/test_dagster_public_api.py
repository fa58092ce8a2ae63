"""gradetrail_assets uses Dagster's public API only: no import of a private module
(`dagster._core` and the like), which may change in any release. (Tests may use one.)"""

import ast
from pathlib import Path

import gradetrail_assets


def _is_private(module: str) -> bool:
    first, *rest = module.split(".")
    return first.startswith("dagster") and any(part.startswith("_") for part in rest)


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        found += [f"{path.name}:{node.lineno}: {m}" for m in modules if _is_private(m)]
    return found


def test_no_private_dagster_module_is_imported() -> None:
    package = Path(gradetrail_assets.__file__).parent
    assert [hit for f in sorted(package.rglob("*.py")) for hit in _private_imports(f)] == []
