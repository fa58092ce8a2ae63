"""An agent in Dagster: tests/agents/test_agent.py's tool spec is a partitioned graph like any
other, against the loopback fake (real instance, real DuckDB). Its responses asset runs
every case's steps; the metadata counts each failure mode; `agent_stop_rate` checks the
thrash + budget_exhausted rate; editing only a scorer makes scores stale and responses
fresh (Dagster's own stale status), and re-scoring calls nothing."""

import json
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest

from gradetrail_assets.build import build_definitions
from gradetrail_assets.checks import CHECK_DESCRIPTIONS, check_specs
from gradetrail_assets.resources import GradetrailResource, settings_from_environment
from tests.agents.test_agent import CITIES, agent, project
from tests.support.agent_scripts import conversation
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.staleness import StaleStatus, resolver_for

MODEL, STEADY = "agent-1", "agent-2"
N = len(CITIES)
STEPS = ("dataset", "responses", "scores", "stats", "report")
# agent-1's trajectories (tests/agents/test_agent.py): Paris 2 steps, Rome 2, Atlantis 2
# (a tool error), Nowhere 2 (no scripted result), Loop 2 (thrash), Budget 3 (budget).
AGENT_CALLS = 2 + 2 + 2 + 2 + 2 + 3
ANSWER = '{name: answer, type: regex, pattern: "(?i)sunny"}'


def responder(body: dict[str, Any]) -> Any:
    """agent-1 plays tests/agents/test_agent.py's agent; agent-2 answers Loop and Budget instead
    of thrashing or running over the budget (the others as agent-1)."""
    city = conversation(body).messages[0]["content"].split(" in ")[1].rstrip("?")
    if body["model"] == STEADY and city in ("Loop", "Budget"):
        return f"It is sunny in {city}."
    return agent(body)


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")


@pytest.fixture
def server() -> Any:
    with FakeLLMServer(responder=responder) as srv:
        yield srv


def write_specs(root: Path, base_url: str) -> Path:
    """The weather tool spec with two models, in a specs folder."""
    specs = root / "specs"
    specs.mkdir()
    spec = project(specs, base_url)
    text = spec.read_text()
    line = next(x for x in text.splitlines() if x.startswith("model: "))
    one = line.removeprefix("model: ")
    spec.write_text(text.replace(line, f"models:\n  - {one}\n  - {one.replace(MODEL, STEADY)}"))
    return specs


def settings(root: Path, **overrides: Any) -> GradetrailResource:
    return GradetrailResource(
        database=str(root / "gradetrail.duckdb"), results_dir=str(root / "results"), **overrides
    )


def asset(step: str) -> dg.AssetKey:
    return dg.AssetKey(["weather", step])


def materialize(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    root: Path,
    steps: tuple[str, ...],
    partition: str = MODEL,
) -> dg.ExecuteInProcessResult:
    result = defs.resolve_job_def("weather__eval").execute_in_process(
        instance=instance,
        partition_key=partition,
        asset_selection=[asset(s) for s in steps],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(root / "storage"))},
    )
    assert result.success
    return result


def metadata_of(result: dg.ExecuteInProcessResult, step: str) -> dict[str, Any]:
    event = result.asset_materializations_for_node(f"weather__{step}")[0]
    return {k: v.value for k, v in event.metadata.items()}


def checks_of(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {c.check_name: c for c in result.get_asset_check_evaluations()}


def stale(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, StaleStatus]:
    resolver = resolver_for(defs, instance)
    return {s: resolver.get_status(asset(s), partition_key=MODEL) for s in STEPS}


def test_a_tool_spec_is_a_partitioned_graph_its_failure_modes_counted_and_checked(
    tmp_path: Path, instance: dg.DagsterInstance, server: FakeLLMServer
) -> None:
    specs = write_specs(tmp_path, f"{server.base_url}/v1")
    instance.add_dynamic_partitions("weather__models", [MODEL, STEADY])
    defs = build_definitions(specs, settings(tmp_path))
    first = materialize(defs, instance, tmp_path, STEPS)
    assert server.calls == AGENT_CALLS

    # responses ran every case's steps: its figures are steps, not cases.
    responses = metadata_of(first, "responses")
    assert (responses["cases"], responses["steps"], responses["requests"]) == (
        N, AGENT_CALLS, AGENT_CALLS,
    )  # fmt: skip
    assert (responses["provider_calls"], responses["cache_hits"]) == (AGENT_CALLS, 0)
    assert responses["cache_misses"] == AGENT_CALLS
    assert (responses["thrash"], responses["budget_exhausted"]) == (1, 1)
    assert responses["cases_with_tool_errors"] == 2  # Atlantis and Nowhere

    # Each failure mode counted, zeros included, in scores and stats alike.
    expected = {
        "wrong_answer": 0, "truncated": 0, "provider_error": 0, "scorer_error": 0,
        "judge_error": 0, "tool_error": 1, "thrash": 1, "budget_exhausted": 1,
    }  # fmt: skip
    scores, stats = metadata_of(first, "scores"), metadata_of(first, "stats")
    for meta in (scores, stats):
        assert meta["failure_modes"] == expected
        assert {m: meta[f"failures_{m}"] for m in expected} == expected
    summary = str(scores["summary"])
    assert "| thrash | 1 |" in summary and "| budget_exhausted | 1 |" in summary
    assert "| sample | failure (calls) | steps | reason |" in summary
    assert "| loop | thrash | 2 |" in summary and "| budget | budget_exhausted | 3 |" in summary
    assert "**Failure modes**: wrong_answer 0" in str(stats["summary"])
    assert (scores["primary_scorer"], scores["judge_calls"]) == ("calls", 0)

    # 2 of 6 samples stopped early: over the default threshold of 0.1.
    checks = checks_of(first)
    assert set(checks) == {*CHECK_DESCRIPTIONS, "agent_stop_rate"}
    assert {name: c.passed for name, c in checks.items() if name != "agent_stop_rate"} == (
        dict.fromkeys(CHECK_DESCRIPTIONS, True)
    )
    stop = checks["agent_stop_rate"]
    assert not stop.passed
    assert {k: v.value for k, v in stop.metadata.items()} == {
        "rate": 2 / N, "thrash": 1, "budget_exhausted": 1, "n": N, "threshold": 0.1,
    }  # fmt: skip
    assert "1 thrash + 1 over the step budget of 6 samples" in (stop.description or "")

    # The scores table: a row per case and scorer, an agent's figures its calls' totals.
    run_dir = Path(str(scores["run_dir"]))
    records = {
        json.loads(line)["id"]: json.loads(line)
        for line in (run_dir / "results.jsonl").read_text().splitlines()
    }
    with duckdb.connect(str(tmp_path / "gradetrail.duckdb")) as db:
        rows = db.execute(
            "SELECT id, failure_mode, input_tokens, output_tokens, request_key, cache_hit "
            "FROM scores WHERE scorer = 'calls' ORDER BY id"
        ).fetchall()
    assert len(rows) == N
    for sample, mode, tokens_in, tokens_out, request_key, cache_hit in rows:
        steps = records[sample]["trajectory"]
        assert mode == records[sample]["failure_mode"]
        assert tokens_in == sum(s["input_tokens"] for s in steps)
        assert tokens_out == sum(s["output_tokens"] for s in steps)
        assert (request_key, cache_hit) == (steps[-1]["request_key"], False)

    # The report shows the failed cases' steps.
    html = Path(str(metadata_of(first, "report")["report"])).read_text()
    assert html.count('<details class="step"') == 2 + 2 + 3  # Atlantis, Loop, Budget
    assert "thrash (same call, nothing new)" in html and "over the step budget" in html
    assert set(stale(defs, instance).values()) == {StaleStatus.FRESH}

    # A looser threshold passes the same rate; re-scoring calls nothing.
    loose = build_definitions(specs, settings(tmp_path, max_agent_stop_rate=0.34))
    again = materialize(loose, instance, tmp_path, ("scores",))
    assert checks_of(again)["agent_stop_rate"].passed
    assert server.calls == AGENT_CALLS

    # Responses again: every step replayed from the cache, the same data version, so
    # what follows stays fresh.
    replayed = metadata_of(materialize(defs, instance, tmp_path, ("responses",)), "responses")
    assert (replayed["provider_calls"], replayed["cache_hits"]) == (0, AGENT_CALLS)
    assert replayed["cache_misses"] == 0
    assert server.calls == AGENT_CALLS
    assert set(stale(defs, instance).values()) == {StaleStatus.FRESH}


def test_a_scorer_edit_makes_scores_stale_not_responses_and_rescoring_calls_nothing(
    tmp_path: Path, instance: dg.DagsterInstance, server: FakeLLMServer
) -> None:
    specs = write_specs(tmp_path, f"{server.base_url}/v1")
    instance.add_dynamic_partitions("weather__models", [MODEL, STEADY])
    defs = build_definitions(specs, settings(tmp_path))
    first = metadata_of(materialize(defs, instance, tmp_path, STEPS), "scores")
    assert server.calls == AGENT_CALLS
    assert first["mean_score[answer]"] == 2 / N  # Paris and Nowhere say sunny
    tick0 = dg.evaluate_automation_conditions(defs=defs, instance=instance)

    # Only the secondary scorer's pattern: Rome's "rainy" passes too now.
    spec = specs / "weather.yaml"
    edited_answer = ANSWER.replace("(?i)sunny", "(?i)sunny|rainy")
    assert ANSWER in spec.read_text()
    spec.write_text(spec.read_text().replace(ANSWER, edited_answer))
    edited = build_definitions(specs, settings(tmp_path))
    status = stale(edited, instance)
    assert (status["dataset"], status["responses"]) == (StaleStatus.FRESH, StaleStatus.FRESH)
    assert status["scores"] == StaleStatus.STALE
    causes = resolver_for(edited, instance).get_stale_causes(asset("scores"), partition_key=MODEL)
    assert [c.reason for c in causes] == ["has a new code version"]
    tick = dg.evaluate_automation_conditions(defs=edited, instance=instance, cursor=tick0.cursor)
    requested = {s for s in STEPS for _ in tick.get_requested_partitions(asset(s))}
    assert requested == {"scores", "stats", "report"}

    # What automation runs: scores, stats and report, with no call at all.
    result = materialize(edited, instance, tmp_path, ("scores", "stats", "report"))
    assert server.calls == AGENT_CALLS, "re-scoring must not call the target"
    meta = metadata_of(result, "scores")
    assert meta["mean_score[answer]"] == 3 / N
    assert (meta["failures_thrash"], meta["failures_budget_exhausted"]) == (1, 1)
    assert meta["judge_calls"] == 0
    assert meta["identity"] != first["identity"]
    assert set(stale(edited, instance).values()) == {StaleStatus.FRESH}


def test_the_stop_check_passes_a_model_that_stops_on_its_own(
    tmp_path: Path, instance: dg.DagsterInstance, server: FakeLLMServer
) -> None:
    specs = write_specs(tmp_path, f"{server.base_url}/v1")
    instance.add_dynamic_partitions("weather__models", [MODEL, STEADY])
    defs = build_definitions(specs, settings(tmp_path))
    result = materialize(defs, instance, tmp_path, ("responses", "scores"), partition=STEADY)
    assert server.calls == 2 + 2 + 2 + 2 + 1 + 1
    stop = checks_of(result)["agent_stop_rate"]
    assert stop.passed and stop.metadata["rate"].value == 0.0
    meta = metadata_of(result, "scores")
    assert (meta["failures_thrash"], meta["failures_budget_exhausted"]) == (0, 0)
    assert meta["failures_tool_error"] == 1  # Atlantis still calls a tool that is not there


def test_only_a_tool_spec_has_the_stop_check_and_its_threshold_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = dg.AssetKey(["x", "scores"])
    assert "agent_stop_rate" not in {c.name for c in check_specs(key)}
    assert "agent_stop_rate" in {c.name for c in check_specs(key, agent=True)}
    monkeypatch.setenv("GRADETRAIL_MAX_AGENT_STOP_RATE", "0.25")
    assert settings_from_environment().max_agent_stop_rate == 0.25
    monkeypatch.delenv("GRADETRAIL_MAX_AGENT_STOP_RATE")
    assert settings_from_environment().max_agent_stop_rate == 0.1
