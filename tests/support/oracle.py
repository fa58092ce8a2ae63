"""A small project whose model is an in-process oracle (`scripted`, answering each
sample's `answer`) scored by `exact` against its `gold`: runs without a server."""

import json
from pathlib import Path
from typing import Any


def oracle_rows(n: int) -> list[dict[str, Any]]:
    return [{"id": f"s{i}", "gold": str(i % 3), "answer": str(i % 2)} for i in range(n)]


def write_rows(tmp_path: Path, rows: list[dict[str, Any]]) -> None:
    """The project's dataset, `data/x.jsonl`."""
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def oracle_project(tmp_path: Path, n: int, repeats: int = 1) -> Path:
    """`s.yaml` over n samples ("Number {{ id }}?"), each run `repeats` times."""
    write_rows(tmp_path, oracle_rows(n))
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\ndataset: {path: data/x.jsonl}\nprompt: 'Number {{ id }}?'\n"
        f"repeats: {repeats}\n"
        "model: {provider: scripted, name: oracle, answer_field: answer}\n"
        "scorer: {type: exact, field: gold}\n"
    )
    return spec
