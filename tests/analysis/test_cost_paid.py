"""What a run paid, apart from what the cached answers it reused had cost."""

import json
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.analysis.summary import format_summary, summarize
from gradetrail_lib.results.totals import RunTotals
from gradetrail_lib.results.trace import TraceRecord
from tests.conftest import run_cli, write_addition_dataset
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.oracle import oracle_project


def test_a_cached_rerun_pays_nothing_and_says_what_it_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 4)
    with FakeLLMServer() as srv:
        (tmp_path / "s.yaml").write_text(
            "name: add\ndataset: {path: data/add.jsonl}\nprompt: 'Q: {{ a }} + {{ b }}'\n"
            f"model: {{provider: anthropic, name: claude-haiku-4-5, base_url: "
            f'"{srv.base_url}/v1", api_key_env: GT_KEY}}\n'
            "params: {temperature: 0, max_tokens: 16}\nscorer: {type: numeric}\n"
        )
        kwargs = {"results_root": tmp_path / "cold", "cache": tmp_path / "c.db"}
        (cold,) = run_spec(tmp_path / "s.yaml", **kwargs)
        (warm,) = run_spec(tmp_path / "s.yaml", **{**kwargs, "results_root": tmp_path / "warm"})
    paid = cold.manifest.target.cost_paid_usd
    assert paid is not None and paid > 0
    assert warm.manifest.target.cost_paid_usd == 0.0
    assert warm.manifest.target.cost_usd == pytest.approx(paid)
    done = run_cli("cost", str(warm.run_dir), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    assert model["paid_usd"] == 0.0 and model["reused_from_cache_usd"] == pytest.approx(paid)
    text = run_cli("cost", str(cold.run_dir), cwd=tmp_path).stdout
    assert "reused from cache" in text and "paid by these runs" in text


def _records_of(tmp_path: Path) -> list[TraceRecord]:
    (done,) = run_spec(oracle_project(tmp_path, 4), results_root=tmp_path / "r",
                       cache=tmp_path / "c.duckdb")  # fmt: skip
    return done.records


def _summary(records: list[TraceRecord]) -> str:
    scorers = [("exact", "exact")]
    return format_summary(RunTotals.of(records, ["exact"]), summarize(records, scorers), 1.0)


def test_a_local_model_has_no_price_in_the_summary_and_scripted_costs_nothing(
    tmp_path: Path,
) -> None:
    records = _records_of(tmp_path)
    assert "Cost: $0.000000 paid; $0.000000 reused from cache\n" in _summary(records)
    for record in records:
        for call in record.calls:  # as the bundled local model's calls (priced $0 in the list)
            call.provider, call.model = "local", "smollm2-135m"
    assert "Cost: no price (local model)\n" in _summary(records)
    for record in records:  # a local model the price list does not know: not "unknown"
        for call in record.calls:
            call.model, call.cost_usd = "qwen-local", None
    summary = _summary(records)
    assert "Cost: no price (local model)\n" in summary and "unknown" not in summary
