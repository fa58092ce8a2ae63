"""Code comments cite documents inside the repository only (measured facts live in
docs/performance.md), never a notes file outside it: every `*.md` a source file names
exists here, and nothing points above the repository (`../shared/...`)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ("gradetrail_lib", "gradetrail_assets", "tests", "bench", "scripts")
DOCUMENT = re.compile(r"(?<![\w.])((?:\.\./)*[\w/-]+\.md)\b")
OUTSIDE = re.compile(r"\.\./(?:shared|notes)\b|\bFACTS\.md\b|\bDESIGN\.md\b")


def _sources() -> list[Path]:
    return [
        path
        for folder in FOLDERS
        for path in sorted((REPO / folder).rglob("*"))
        if path.suffix in (".py", ".sh", ".j2") and "__pycache__" not in path.parts
    ]


def test_every_cited_document_is_in_the_repository() -> None:
    missing, outside = [], []
    for path in _sources():
        if path == Path(__file__).resolve() or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(REPO)
        outside += [f"{where}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
        for match in DOCUMENT.finditer(text):
            cited = match.group(1)
            if not (REPO / cited).is_file() and not (path.parent / cited).is_file():
                missing.append(f"{where}: {cited}")
    assert not outside, outside
    assert not missing, missing
