"""The Dagster layer, in process: loading, materializing, staleness, automation."""

from pathlib import Path

import dagster as dg
import duckdb
import pytest

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import GradetrailResource
from tests.conftest import write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer, default_responder
from tests.support.staleness import StaleStatus, resolver_for

N = 8
MODEL = "fake-1"
STEPS = ("dataset", "responses", "scores", "stats", "report")
CHECKS = (
    "provider_error_rate", "truncation_rate", "judge_error_rate", "served_model_matches",
    "dataset_hash_matches", "judge_agreement",
)  # fmt: skip


@pytest.fixture
def project(tmp_path: Path, fake_server: FakeLLMServer) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", N)
    write_spec(specs / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    return tmp_path


def settings(project: Path) -> GradetrailResource:
    return GradetrailResource(
        database=str(project / ".gradetrail" / "gradetrail.duckdb"),
        results_dir=str(project / "results"),
    )


def defs_for(project: Path) -> dg.Definitions:
    return build_definitions(project / "specs", settings(project))


def materialize(
    defs: dg.Definitions, instance: dg.DagsterInstance, project: Path, selection: list[str]
) -> dg.ExecuteInProcessResult:
    spec_job = defs.resolve_job_def("add__eval")
    return spec_job.execute_in_process(
        instance=instance,
        partition_key=MODEL,
        asset_selection=[dg.AssetKey(["add", s]) for s in selection],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(project / "storage"))},
    )


def stale_status(defs: dg.Definitions, instance: dg.DagsterInstance, step: str) -> StaleStatus:
    return resolver_for(defs, instance).get_status(dg.AssetKey(["add", step]), partition_key=MODEL)


def test_definitions_load_and_a_broken_spec_does_not_take_the_others_down(
    project: Path,
) -> None:
    (project / "specs" / "broken.yaml").write_text("name: broken\nprompt: hi\nbogus: 1\n")
    defs = defs_for(project)
    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {f"add/{step}" for step in STEPS} | {"add/leaderboard"} <= keys
    errors = defs.resolve_assets_def(dg.AssetKey(["gradetrail", "spec_errors"]))
    description = errors.descriptions_by_key[dg.AssetKey(["gradetrail", "spec_errors"])]
    assert "broken.yaml:3: bogus: unknown key" in description
    assert defs.resolve_job_def("add__eval").partitions_def is not None


def test_materialize_then_scorer_edit_is_stale_only_downstream_and_costs_no_calls(
    project: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    instance.add_dynamic_partitions("add__models", [MODEL])
    defs = defs_for(project)
    result = materialize(defs, instance, project, list(STEPS))
    assert result.success
    assert fake_server.calls == N
    scores_event = result.asset_materializations_for_node("add__scores")[0]
    assert scores_event.metadata["samples"].value == N
    assert scores_event.metadata["cache_hits"].value == 0
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == dict.fromkeys(CHECKS, True)
    stats_event = result.asset_materializations_for_node("add__stats")[0]
    passed = sum(1 for i in range(N) if i % 4)
    assert stats_event.metadata["pass_rate"].value == passed / N
    assert "wilson, n=8" in str(stats_event.metadata["summary"].value)
    low, high = (
        stats_event.metadata["pass_rate_low"].value,
        stats_event.metadata["pass_rate_high"].value,
    )
    assert 0 < low < passed / N < high < 1
    report_event = result.asset_materializations_for_node("add__report")[0]
    report_path = Path(str(report_event.metadata["report"].value))
    assert report_path.is_file() and "<details" in report_path.read_text()
    with duckdb.connect(str(project / ".gradetrail" / "gradetrail.duckdb")) as db:
        # One scorer (the spec's `scorer:`, named `score`): a row per sample, one stats row.
        rows = db.execute('SELECT scorer, "primary", count(*) FROM scores GROUP BY ALL')
        assert rows.fetchall() == [("score", True, N)]
        assert db.execute('SELECT scorer, "primary", n, passed FROM stats').fetchall() == [
            ("score", True, N, passed)
        ]
    for step in STEPS:
        assert stale_status(defs, instance, step) == StaleStatus.FRESH

    # Edit only the scorer: scores is stale ("new code version"), responses is not.
    write_spec(
        project / "specs" / "add.yaml",
        base_url=f"{fake_server.base_url}/v1",
        scorer="{type: regex, pattern: 'Answer: 1'}",
    )
    edited = defs_for(project)
    assert stale_status(edited, instance, "responses") == StaleStatus.FRESH
    assert stale_status(edited, instance, "scores") == StaleStatus.STALE

    rescored = materialize(edited, instance, project, ["scores"])
    assert rescored.success
    assert fake_server.calls == N, "re-scoring must not call the provider"
    assert stale_status(edited, instance, "scores") == StaleStatus.FRESH

    # Re-materializing responses after an unrelated edit costs zero calls too.
    again = materialize(edited, instance, project, ["responses"])
    responses_event = again.asset_materializations_for_node("add__responses")[0]
    assert responses_event.metadata["cache_hits"].value == N
    assert responses_event.metadata["provider_calls"].value == 0
    assert fake_server.calls == N


def test_automation_carries_a_scorer_edit_down_without_touching_responses(
    project: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    instance.add_dynamic_partitions("add__models", [MODEL])
    defs = defs_for(project)
    assert materialize(defs, instance, project, ["dataset", "responses", "scores"]).success
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    write_spec(
        project / "specs" / "add.yaml",
        base_url=f"{fake_server.base_url}/v1",
        scorer="{type: regex, pattern: 'Answer: 1'}",
    )
    edited = defs_for(project)
    tick = dg.evaluate_automation_conditions(defs=edited, instance=instance, cursor=first.cursor)
    requested = {
        (k.to_user_string(), p)
        for k in (dg.AssetKey(["add", s]) for s in ("dataset", "responses", "scores"))
        for p in tick.get_requested_partitions(k)
    }
    assert requested == {("add/scores", MODEL)}


def test_leaderboard_ranks_models_with_intervals_and_a_paired_verdict(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    """Two models of one spec: "good" answers right, "bad" answers every sample wrong."""
    fake_server.responder = lambda body: (
        "Answer: 0" if body["model"] == "bad" else default_responder(body)
    )
    specs = tmp_path / "specs"
    specs.mkdir()
    n = 24
    write_addition_dataset(specs / "data" / "add.jsonl", n)
    url = f"{fake_server.base_url}/v1"
    spec = write_spec(specs / "add.yaml", base_url=url, model="good")
    spec.write_text(
        spec.read_text().replace(
            "models:\n",
            f'models:\n  - {{provider: openai_compatible, name: bad, base_url: "{url}"}}\n',
        )
    )
    instance.add_dynamic_partitions("add__models", ["good", "bad"])
    defs = build_definitions(specs, settings(tmp_path))
    job = defs.resolve_job_def("add__eval")
    for model in ("good", "bad"):
        assert job.execute_in_process(
            instance=instance,
            partition_key=model,
            asset_selection=[
                dg.AssetKey(["add", s]) for s in ("dataset", "responses", "scores", "stats")
            ],
            resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))},
        ).success
    board_job = dg.define_asset_job("board", selection=[dg.AssetKey(["add", "leaderboard"])])
    with_board = dg.Definitions.merge(defs, dg.Definitions(jobs=[board_job]))
    result = with_board.resolve_job_def("board").execute_in_process(instance=instance)
    assert result.success
    board = result.asset_materializations_for_node("add__leaderboard")[0].metadata["board"].value
    assert [m["model"] for m in board["models"]] == ["good", "bad"]
    assert board["models"][0]["passed"] == sum(1 for i in range(n) if i % 4)
    assert board["models"][1]["passed"] == 0
    (pair,) = board["pairs"]
    assert (pair["a"], pair["b"], pair["n"]) == ("good", "bad", n)
    assert (pair["verdict"], pair["winner"]) == ("A", "good")
    assert pair["high"] < 0
    assert pair["paired_test"] == "mcnemar-exact" and pair["paired_p"] < 0.001
    # One pair: Holm's adjustment leaves its p, and the two models are separated into
    # tiers with rank intervals of one rank each.
    assert pair["adjusted_p"] == pair["paired_p"] and pair["better"] == "good"
    assert [(m["tier"], m["rank_interval"]["best"], m["rank_interval"]["worst"])
            for m in board["models"]] == [(1, 1, 1), (2, 2, 2)]  # fmt: skip
    assert board["ranking"]["tiers"] == [["good"], ["bad"]]
    markdown = str(
        result.asset_materializations_for_node("add__leaderboard")[0].metadata["leaderboard"].value
    )
    assert "mrsw-2024-holm" in markdown and "Holm's step-down" in markdown


# What enters the requests, edited one at a time (the model: its provider, same name, so
# the partition stays): each makes `responses` stale and costs a new call per sample.
REQUEST_EDITS = {
    "prompt": {"prompt": "Please.\n  Q: {{ a }} + {{ b }}"},
    "params": {"params": "{temperature: 0, max_tokens: 32}"},
    "model": {"provider": "anthropic", "extra_model": ", api_key_env: GT_TEST_KEY"},
}


@pytest.mark.parametrize("edit", list(REQUEST_EDITS))
def test_a_prompt_params_or_model_edit_makes_responses_stale(
    project: Path,
    instance: dg.DagsterInstance,
    fake_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    edit: str,
) -> None:
    monkeypatch.setenv("GT_TEST_KEY", "sk-test-key")
    instance.add_dynamic_partitions("add__models", [MODEL])
    defs = defs_for(project)
    assert materialize(defs, instance, project, ["dataset", "responses", "scores"]).success
    assert fake_server.calls == N
    assert stale_status(defs, instance, "responses") == StaleStatus.FRESH

    spec = project / "specs" / "add.yaml"
    changes = dict(REQUEST_EDITS[edit])
    params = changes.pop("params", None)
    write_spec(spec, base_url=f"{fake_server.base_url}/v1", **changes)
    if params is not None:
        text = spec.read_text()
        assert "params: {temperature: 0, max_tokens: 16}" in text
        spec.write_text(text.replace("{temperature: 0, max_tokens: 16}", params))
    edited = defs_for(project)
    assert stale_status(edited, instance, "dataset") == StaleStatus.FRESH
    assert stale_status(edited, instance, "responses") == StaleStatus.STALE
    resolver = resolver_for(edited, instance)
    causes = resolver.get_stale_causes(dg.AssetKey(["add", "responses"]), partition_key=MODEL)
    assert [c.reason for c in causes] == ["has a new code version"]

    # Every request is new: re-materializing sends each sample again, then it is fresh.
    assert materialize(edited, instance, project, ["responses"]).success
    assert fake_server.calls == 2 * N
    assert stale_status(edited, instance, "responses") == StaleStatus.FRESH
