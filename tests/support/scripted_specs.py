"""A spec of scripted models with known right and wrong cases, for the tests that rank,
compare or decide between models (`rank`, `run --until-decided`): case `c{i}` asks for
`a{i}`, and each model answers it right exactly on the cases its rule picks, so every
count the statistics see is known in advance."""

import json
from collections.abc import Callable, Mapping
from pathlib import Path

Rule = Callable[[int], bool]


def write_scripted_spec(
    root: Path,
    *,
    name: str,
    cases: int,
    models: Mapping[str, Rule],
    repeats: int | None = None,
    file: str = "s.yaml",
) -> Path:
    """Writes `root/data/r.jsonl` and the spec `root/file`: one `scripted` model per
    entry of `models`, right on case i when its rule says so (else it answers "no"),
    scored by `exact` on the answer."""
    (root / "data").mkdir()
    rows = [
        {"id": f"c{i}", "answer": f"a{i}"}
        | {model: f"a{i}" if right(i) else "no" for model, right in models.items()}
        for i in range(cases)
    ]
    (root / "data" / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    entries = "".join(
        f"  - {{provider: scripted, name: {model}, answer_field: {model}}}\n" for model in models
    )
    spec = root / file
    spec.write_text(
        f"name: {name}\n"
        "dataset: {path: data/r.jsonl}\n"
        "prompt: 'say {{ answer }}'\n"
        f"models:\n{entries}"
        + (f"repeats: {repeats}\n" if repeats is not None else "")
        + "params: {temperature: 0, max_tokens: 8}\n"
        "scorers:\n"
        "  - {name: exact, type: exact, field: answer}\n"
    )
    return spec
