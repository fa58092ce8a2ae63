"""`gradetrail plan` and `gradetrail run --max-cost`: the calls and cost of a run,
worked out before any call, against a partly warm cache."""

import json
import math
import subprocess
from pathlib import Path

from tests.conftest import run_cli, write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer

SECRET = "sk-test-plan-0123456789"
WARM, ALL = 4, 10
MAX_TOKENS = 16  # write_spec's params
JUDGE_PROMPT = "Ref {{ answer }} Resp {{ response }} GRADE: C or I"
JUDGE = """
  - name: judged
    type: judge
    prompt_file: judge.j2
    model:
      {{provider: anthropic, name: claude-sonnet-4-5, base_url: "{url}", api_key_env: GT_TEST_KEY}}
    params: {{temperature: 0, max_tokens: 8}}
"""


def _answer(i: int) -> int:
    return i + 2 * i + 1 + (1 if i % 4 == 0 else 0)  # write_addition_dataset's


def _prompt_tokens(i: int) -> int:
    # The rendered prompt of sample i ("Q: a + b" and the block scalar's newline), ~4
    # characters a token.
    return math.ceil(len(f"Q: {i} + {2 * i + 1}\n") / 4)


def _setup(tmp_path: Path, server: FakeLLMServer, *, judge: bool = False) -> Path:
    url = f"{server.base_url}/v1"
    write_addition_dataset(tmp_path / "data" / "add.jsonl", WARM)
    spec = write_spec(
        tmp_path / "add.yaml",
        base_url=url,
        provider="anthropic",
        model="claude-haiku-4-5",
        extra_model=", api_key_env: GT_TEST_KEY",
    )
    if judge:
        (tmp_path / "judge.j2").write_text(JUDGE_PROMPT)
        text = spec.read_text().replace(
            "scorer: {type: numeric}\n", "scorers:\n  - {name: score, type: numeric}"
        )
        spec.write_text(text + JUDGE.format(url=url))
    warm = _cli(tmp_path, "run", str(spec))
    assert warm.returncode == 0, warm.stderr
    assert server.calls == WARM * (2 if judge else 1)
    server.reset_counts()
    write_addition_dataset(tmp_path / "data" / "add.jsonl", ALL)  # 6 new samples
    return spec


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"GT_TEST_KEY": SECRET, "GRADETRAIL_CACHE": str(tmp_path / "cache.duckdb")}
    return run_cli(*args, "--results" if args[0] == "run" else "--json",
                   *([str(tmp_path / "results")] if args[0] == "run" else []),
                   cwd=tmp_path, env=env)  # fmt: skip


def test_plan_counts_hits_misses_tokens_and_cost_and_calls_nothing(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    spec = _setup(tmp_path, fake_server)
    done = _cli(tmp_path, "plan", str(spec))
    assert done.returncode == 0, done.stderr
    assert fake_server.calls == 0, "plan sends nothing"
    (model,) = json.loads(done.stdout)["models"]
    target = model["target"]
    misses = range(WARM, ALL)
    tokens = sum(_prompt_tokens(i) for i in misses)
    assert model["samples"] == ALL
    assert (target["calls"], target["hits"], target["misses"]) == (ALL, WARM, ALL - WARM)
    assert target["input_tokens"] == tokens
    assert target["tokenizer"] == "estimated (~4 characters a token)"
    assert target["output_tokens_worst"] == MAX_TOKENS * (ALL - WARM)
    # claude-haiku-4-5: $1 in, $5 out per million tokens.
    low, high = tokens / 1e6, (tokens + 5 * MAX_TOKENS * (ALL - WARM)) / 1e6
    assert math.isclose(target["cost_low"], low) and math.isclose(target["cost_high"], high)
    assert math.isclose(model["worst_case_usd"], high)
    # Side by side: the same misses by batch, at the price list's half price.
    assert math.isclose(target["batch_cost_low"], low / 2)
    assert math.isclose(target["batch_cost_high"], high / 2)
    assert math.isclose(model["batch_worst_case_usd"], high / 2)
    assert math.isclose(json.loads(done.stdout)["batch_worst_case_usd"], high / 2)
    assert model["scorers"] == []

    text = run_cli("plan", str(spec), cwd=tmp_path,
                   env={"GRADETRAIL_CACHE": str(tmp_path / "cache.duckdb")})  # fmt: skip
    assert text.returncode == 0, text.stderr
    assert f"cache hits {WARM}, misses {ALL - WARM}" in text.stdout
    assert f"Input tokens of the misses: {tokens}, estimated (~4 characters a token)" in text.stdout
    assert f"Cost: ${low:.6f} to ${high:.6f}; by batch: ${low / 2:.6f} to ${high / 2:.6f}" in (
        text.stdout
    )
    assert fake_server.calls == 0


def test_plan_counts_judge_calls(tmp_path: Path, fake_server: FakeLLMServer) -> None:
    spec = _setup(tmp_path, fake_server, judge=True)
    done = _cli(tmp_path, "plan", str(spec))
    assert done.returncode == 0, done.stderr
    assert fake_server.calls == 0
    (model,) = json.loads(done.stdout)["models"]
    (judge,) = model["scorers"]
    assert (judge["role"], judge["model"]) == ("scorer judged", "claude-sonnet-4-5")
    # The cached responses' judge calls were made by the warm run: exact hits; each new
    # sample's is a miss, its input the prompt with an empty response plus max_tokens.
    assert (judge["calls"], judge["hits"], judge["misses"]) == (ALL, WARM, ALL - WARM)
    tokens = sum(
        math.ceil(len(f"Ref {_answer(i)} Resp  GRADE: C or I") / 4) + MAX_TOKENS
        for i in range(WARM, ALL)
    )
    assert judge["input_tokens"] == tokens
    assert judge["output_tokens_worst"] == 8 * (ALL - WARM)
    assert judge["notes"] and "estimated" in judge["notes"][0]
    high = (3 * tokens + 15 * 8 * (ALL - WARM)) / 1e6  # claude-sonnet-4-5: $3 in, $15 out
    assert math.isclose(judge["cost_high"], high)
    assert math.isclose(model["worst_case_usd"], model["target"]["cost_high"] + high)


def test_plan_of_an_unpriced_model_says_unknown(tmp_path: Path, fake_server: FakeLLMServer) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 3)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    done = _cli(tmp_path, "plan", str(spec))
    assert done.returncode == 0, done.stderr
    (model,) = json.loads(done.stdout)["models"]
    assert model["target"]["misses"] == 3 and model["worst_case_usd"] is None
    assert not (tmp_path / "cache.duckdb").exists(), "plan creates no cache"
    refused = _cli(tmp_path, "run", str(spec), "--max-cost", "100")
    assert refused.returncode == 2
    assert "worst case is unknown" in refused.stderr
    assert fake_server.calls == 0


def test_max_cost_refuses_over_the_worst_case_and_allows_under(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    spec = _setup(tmp_path, fake_server)
    plan = json.loads(_cli(tmp_path, "plan", str(spec)).stdout)
    worst = plan["worst_case_usd"]
    runs_before = sorted((tmp_path / "results").iterdir())

    refused = _cli(tmp_path, "run", str(spec), "--max-cost", f"{worst / 2:.8f}")
    assert refused.returncode == 2, refused.stdout
    assert f"worst case is ${worst:.6f}" in refused.stderr
    assert f"--max-cost ${worst / 2:.6f}" in refused.stderr
    assert fake_server.calls == 0, "nothing is sent"
    assert sorted((tmp_path / "results").iterdir()) == runs_before, "nothing is written"

    allowed = _cli(tmp_path, "run", str(spec), "--max-cost", f"{worst * 2:.8f}")
    assert allowed.returncode == 0, allowed.stderr
    assert fake_server.calls == ALL - WARM


def test_max_cost_with_no_cache_counts_every_sample_as_a_miss(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    spec = _setup(tmp_path, fake_server)
    partly_warm = json.loads(_cli(tmp_path, "plan", str(spec)).stdout)["worst_case_usd"]
    cold = _cli(tmp_path, "plan", str(spec), "--cache", str(tmp_path / "empty.duckdb"))
    every_sample = json.loads(cold.stdout)["worst_case_usd"]
    assert 0 < partly_warm < every_sample
    limit = f"{(partly_warm + every_sample) / 2:.8f}"

    # --no-cache sends every request, so its worst case is every sample's.
    refused = _cli(tmp_path, "run", str(spec), "--no-cache", "--max-cost", limit)
    assert refused.returncode == 2, refused.stdout
    assert f"worst case is ${every_sample:.6f}" in refused.stderr
    assert fake_server.calls == 0
    allowed = _cli(tmp_path, "run", str(spec), "--max-cost", limit)
    assert allowed.returncode == 0, allowed.stderr
    assert fake_server.calls == ALL - WARM


def test_calls_judging_responses_to_come_are_noted_once_for_the_whole_run(
    tmp_path: Path,
) -> None:
    from gradetrail_lib.engine.estimate import estimate_run, format_plan
    from gradetrail_lib.engine.plan import BATCH_ITEMS, plan
    from gradetrail_lib.providers.pricing import load_prices
    from gradetrail_lib.spec.spec import load_spec

    n = BATCH_ITEMS + 5  # two batches, summed
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    (tmp_path / "judge.j2").write_text(JUDGE_PROMPT)
    spec = write_spec(tmp_path / "add.yaml", base_url="http://127.0.0.1:9/v1")
    spec.write_text(
        spec.read_text().replace(
            "scorer: {type: numeric}\n", "scorers:\n  - {name: score, type: numeric}"
        )
        + JUDGE.format(url="http://127.0.0.1:9/v1")
    )
    loaded = load_spec(spec)
    estimated = estimate_run(plan(loaded, loaded.spec.models[0]), None, load_prices())
    (judge,) = estimated.scorers
    assert judge.pending == judge.misses == n
    note = f"{n} of the calls judge target responses still to come"
    rest = "counted as misses, their input estimated as the prompt plus the target's max_tokens"
    assert [x for x in judge.all_notes if "still to come" in x] == [f"{note}: {rest}"]
    assert format_plan(estimated).count("still to come") == 1
    assert judge.to_json()["notes"] == judge.all_notes


def test_max_cost_checks_the_mode_the_run_will_use() -> None:
    import pytest

    from gradetrail_lib.engine.estimate import CallPlan, ModelPlan, check_max_cost
    from gradetrail_lib.errors import UsageError

    def one(batch_high: float | None) -> ModelPlan:
        target = CallPlan(
            role="target", provider="openai", model="gpt-5", calls=2, hits=0, misses=2,
            input_tokens=10, output_tokens_worst=10, cost_low=0.5, cost_high=1.0,
            batch_cost_low=0.25, batch_cost_high=batch_high,
        )  # fmt: skip
        return ModelPlan(spec="s", model="m", provider="openai", samples=2, target=target,
                         scorers=[])  # fmt: skip

    with pytest.raises(UsageError, match=r"worst case is \$1\.000000"):
        check_max_cost([one(0.5)], 0.75)
    check_max_cost([one(0.5)], 0.75, batch=True)  # half price: under the limit
    with pytest.raises(UsageError, match="unknown .no price for openai/gpt-5"):
        check_max_cost([one(None)], 0.75, batch=True)
