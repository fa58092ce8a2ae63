"""The Dagster layer with several scorers: a judge (scripted, in-process) and a Python
scorer beside the primary numeric one. An edit to the judge's prompt file or to the
Python scorer's source makes `scores` stale and leaves `responses` fresh (Dagster's own
stale status), and re-materializing it makes no target call; the asset checks fail when
they should."""

import json
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from dagster_duckdb import DuckDBResource

from gradetrail_assets.build import build_definitions
from gradetrail_assets.checks import latest_data_version, served_model_check
from gradetrail_assets.resources import GradetrailResource, settings_from_environment
from gradetrail_assets.tables import STATS_COLUMNS, replace_partition
from gradetrail_lib.results.runs import load_run
from tests.support.fake_llm_server import FakeLLMServer, default_responder
from tests.support.staleness import StaleStatus, resolver_for

N = 8
MODEL = "fake-1"
STEPS = ("dataset", "responses", "scores", "stats", "report")
JUDGE_PROMPT = "Is {{ response }} the sum of {{ a }} and {{ b }}? Reply GRADE: C or GRADE: I.\n"
PY_SCORER = "def has_answer(sample, response):\n    return sample['answer'] in response\n"


def write_project(root: Path, base_url: str, grades: list[str] | None = None) -> Path:
    """A spec with three scorers (`num` primary, judge `j`, Python `py`) over N sums the
    fake server answers right; the scripted judge answers each sample's `grade`."""
    specs = root / "specs"
    (specs / "data").mkdir(parents=True)
    (specs / "scorers").mkdir()
    grades = grades or ["GRADE: C"] * N
    with open(specs / "data" / "add.jsonl", "w") as out:
        for i in range(N):
            row = {"id": f"s{i}", "a": i, "b": i + 1, "answer": str(2 * i + 1), "grade": grades[i]}
            out.write(json.dumps(row) + "\n")
    (specs / "judge.j2").write_text(JUDGE_PROMPT)
    (specs / "scorers" / "x.py").write_text(PY_SCORER)
    (specs / "add.yaml").write_text(
        f"""name: add
dataset: {{path: data/add.jsonl}}
prompt: "Q: {{{{ a }}}} + {{{{ b }}}}"
models:
  - {{provider: openai_compatible, name: {MODEL}, base_url: "{base_url}"}}
params: {{temperature: 0, max_tokens: 16}}
scorers:
  - {{name: num, type: numeric}}
  - name: j
    type: judge
    prompt_file: judge.j2
    model: {{provider: scripted, name: grader, answer_field: grade}}
  - {{name: py, type: python, ref: "scorers/x.py:has_answer"}}
"""
    )
    return specs


def settings(root: Path, **overrides: float) -> GradetrailResource:
    return GradetrailResource(
        database=str(root / "gradetrail.duckdb"), results_dir=str(root / "results"), **overrides
    )


def materialize(
    defs: dg.Definitions, instance: dg.DagsterInstance, root: Path, steps: tuple[str, ...]
) -> dg.ExecuteInProcessResult:
    result = defs.resolve_job_def("add__eval").execute_in_process(
        instance=instance,
        partition_key=MODEL,
        asset_selection=[dg.AssetKey(["add", s]) for s in steps],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(root / "storage"))},
    )
    assert result.success
    return result


def stale(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, StaleStatus]:
    resolver = resolver_for(defs, instance)
    return {s: resolver.get_status(dg.AssetKey(["add", s]), partition_key=MODEL) for s in STEPS}


def scores_metadata(result: dg.ExecuteInProcessResult) -> dict[str, object]:
    event = result.asset_materializations_for_node("add__scores")[0]
    return {k: v.value for k, v in event.metadata.items()}


def checks_of(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {c.check_name: c for c in result.get_asset_check_evaluations()}


def assert_only_scores_stale(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    status = stale(defs, instance)
    assert (status["dataset"], status["responses"]) == (StaleStatus.FRESH, StaleStatus.FRESH)
    assert status["scores"] == StaleStatus.STALE
    causes = resolver_for(defs, instance).get_stale_causes(
        dg.AssetKey(["add", "scores"]), partition_key=MODEL
    )
    assert [c.reason for c in causes] == ["has a new code version"]


def rescore(
    defs: dg.Definitions, instance: dg.DagsterInstance, root: Path, server: FakeLLMServer
) -> dict[str, object]:
    """Scores, then stats, then report, each stale once the step above it re-materialized
    (Dagster's staleness goes one edge deep); no target call on the way."""
    meta = scores_metadata(materialize(defs, instance, root, ("scores",)))
    status = stale(defs, instance)
    assert (status["responses"], status["scores"]) == (StaleStatus.FRESH, StaleStatus.FRESH)
    assert status["stats"] == StaleStatus.STALE
    materialize(defs, instance, root, ("stats",))
    assert stale(defs, instance)["report"] == StaleStatus.STALE
    materialize(defs, instance, root, ("report",))
    assert set(stale(defs, instance).values()) == {StaleStatus.FRESH}
    assert server.calls == N, "re-scoring must not call the target"
    return meta


def test_judge_file_and_python_scorer_edits_make_scores_stale_not_responses_and_call_no_target(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    specs = write_project(tmp_path, f"{fake_server.base_url}/v1")
    instance.add_dynamic_partitions("add__models", [MODEL])
    defs = build_definitions(specs, settings(tmp_path))
    first = materialize(defs, instance, tmp_path, STEPS)
    assert fake_server.calls == N
    meta = scores_metadata(first)
    # The judge's calls are the scores asset's, counted apart from the target's.
    assert (meta["judge_calls"], meta["judge_cache_hits"], meta["judge_errors"]) == (N, 0, 0)
    assert meta["primary_scorer"] == "num"
    assert set(meta["scorers"]) == {"num", "j", "py"}  # type: ignore[arg-type]
    assert (meta["mean_score[j]"], meta["mean_score[py]"]) == (1.0, 1.0)
    assert all(c.passed for c in checks_of(first).values())
    stats_event = first.asset_materializations_for_node("add__stats")[0]
    assert set(stats_event.metadata["stats"].value) == {"num", "j", "py"}  # type: ignore[arg-type]
    assert set(stale(defs, instance).values()) == {StaleStatus.FRESH}
    tick0 = dg.evaluate_automation_conditions(defs=defs, instance=instance)

    # 1. Only the judge's prompt file: every judge request is new, the target's are not.
    (specs / "judge.j2").write_text(JUDGE_PROMPT + "Be strict.\n")
    edited = build_definitions(specs, settings(tmp_path))
    assert_only_scores_stale(edited, instance)
    # One automation tick asks for scores and, in the same run, what follows it.
    tick = dg.evaluate_automation_conditions(defs=edited, instance=instance, cursor=tick0.cursor)
    requested = {s for s in STEPS for _ in tick.get_requested_partitions(dg.AssetKey(["add", s]))}
    assert requested == {"scores", "stats", "report"}
    meta = rescore(edited, instance, tmp_path, fake_server)
    assert (meta["judge_calls"], meta["judge_cache_hits"]) == (N, 0)

    # 2. Only the Python scorer's source: no call at all, the judge's answers are cached.
    (specs / "scorers" / "x.py").write_text(
        "def has_answer(sample, response):\n"
        "    return sample['answer'] in response, 'edited: answer found or not'\n"
    )
    edited = build_definitions(specs, settings(tmp_path))
    assert_only_scores_stale(edited, instance)
    # What automation runs: scores, stats and report in one run.
    meta = scores_metadata(materialize(edited, instance, tmp_path, ("scores", "stats", "report")))
    assert (meta["judge_calls"], meta["judge_cache_hits"]) == (0, N)
    assert set(stale(edited, instance).values()) == {StaleStatus.FRESH}
    assert fake_server.calls == N

    with duckdb.connect(str(tmp_path / "gradetrail.duckdb")) as db:
        per_scorer = db.execute(
            'SELECT scorer, "primary", count(*), count(DISTINCT identity) FROM scores '
            "GROUP BY ALL ORDER BY scorer"
        ).fetchall()
        assert per_scorer == [("j", False, N, 1), ("num", True, N, 1), ("py", False, N, 1)]
        stats_rows = db.execute(
            'SELECT scorer, "primary", n, passed, identity = ? FROM stats ORDER BY scorer',
            [meta["identity"]],
        ).fetchall()
        assert stats_rows == [
            ("j", False, N, N, True), ("num", True, N, N, True), ("py", False, N, N, True),
        ]  # fmt: skip
        judged = db.execute("SELECT sum(judge_calls) FROM scores WHERE scorer = 'j'").fetchone()
        assert judged == (N,)
        reasons = db.execute("SELECT DISTINCT reason FROM scores WHERE scorer = 'py'")
        assert reasons.fetchall() == [("edited: answer found or not",)]


def test_checks_fail_on_a_served_model_a_judge_error_rate_and_a_changed_dataset(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    # Two of eight judge outputs hold no grade: a judge-error rate of 0.25 > 0.05.
    grades = ["GRADE: C"] * (N - 2) + ["I am not sure.", "GRADE: maybe"]
    specs = write_project(tmp_path, f"{fake_server.base_url}/v1", grades)
    fake_server.served_model = "impostor-9"
    instance.add_dynamic_partitions("add__models", [MODEL])
    defs = build_definitions(specs, settings(tmp_path))
    materialize(defs, instance, tmp_path, ("dataset",))
    # The data changes after the dataset asset recorded it.
    data = specs / "data" / "add.jsonl"
    data.write_text(data.read_text().replace('"answer": "1"', '"answer": "2"'))
    result = materialize(defs, instance, tmp_path, ("responses", "scores"))

    checks = checks_of(result)
    assert {name: c.passed for name, c in checks.items()} == {
        "provider_error_rate": True,
        "truncation_rate": True,
        "judge_error_rate": False,
        "served_model_matches": False,
        "dataset_hash_matches": False,
        "judge_agreement": True,  # no human label: nothing to hold the judge to
    }
    judge = checks["judge_error_rate"]
    assert judge.metadata["rate"].value == 2 / N
    assert judge.metadata["threshold"].value == 0.05
    served = checks["served_model_matches"]
    assert served.severity == dg.AssetCheckSeverity.ERROR
    assert served.metadata["served"].value == ["impostor-9"]
    assert "impostor-9" in (served.description or "")
    dataset = checks["dataset_hash_matches"].metadata
    assert dataset["run_dataset_hash"].value != dataset["dataset_data_version"].value
    meta = scores_metadata(result)
    # Two samples without a usable grade are two judge errors, though the calls worked.
    assert meta["errors[j]"] == 2 and meta["judge_errors"] == 2
    assert meta["judge_errors[j]"] == 2 and meta["judge_failed_calls"] == 0
    assert meta["served_models"] == ["impostor-9"]

    # A looser threshold passes the same rate; the dataset, materialized again, matches.
    loose = build_definitions(specs, settings(tmp_path, max_judge_error_rate=0.25))
    again = materialize(loose, instance, tmp_path, ("dataset", "responses", "scores"))
    assert checks_of(again)["judge_error_rate"].passed
    assert checks_of(again)["dataset_hash_matches"].passed
    assert fake_server.calls == N

    # A dated snapshot of the requested alias fails with a warning; nothing served passes.
    manifest = load_run(Path(str(meta["run_dir"]))).manifest
    snapshot = manifest.model.model_copy(update={"served": [f"{MODEL}-2026-01-01"]})
    warned = served_model_check(manifest.model_copy(update={"model": snapshot}))
    assert (warned.passed, warned.severity) == (False, dg.AssetCheckSeverity.WARN)
    nothing = manifest.model.model_copy(update={"served": []})
    assert served_model_check(manifest.model_copy(update={"model": nothing})).passed


def test_leaderboard_ranks_on_the_primary_scorer_and_shows_the_others(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    """Model "bad" answers 0 everywhere: last on `num` (primary), level on `j`."""
    fake_server.responder = lambda body: (
        "Answer: 0" if body["model"] == "bad" else default_responder(body)
    )
    specs = write_project(tmp_path, f"{fake_server.base_url}/v1")
    spec = specs / "add.yaml"
    url = f"{fake_server.base_url}/v1"
    spec.write_text(
        spec.read_text().replace(
            "models:\n",
            f'models:\n  - {{provider: openai_compatible, name: bad, base_url: "{url}"}}\n',
        )
    )
    instance.add_dynamic_partitions("add__models", ["bad", MODEL])
    defs = build_definitions(specs, settings(tmp_path))
    job = defs.resolve_job_def("add__eval")
    for model in ("bad", MODEL):
        assert job.execute_in_process(
            instance=instance,
            partition_key=model,
            asset_selection=[dg.AssetKey(["add", s]) for s in ("responses", "scores", "stats")],
            resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))},
        ).success
    board_job = dg.define_asset_job("board", selection=[dg.AssetKey(["add", "leaderboard"])])
    with_board = dg.Definitions.merge(defs, dg.Definitions(jobs=[board_job]))
    result = with_board.resolve_job_def("board").execute_in_process(instance=instance)
    event = result.asset_materializations_for_node("add__leaderboard")[0]
    board = event.metadata["board"].value
    assert isinstance(board, dict)
    assert (board["primary"], board["scorers"]) == ("num", ["num", "j", "py"])
    assert [(m["model"], m["scorer"], m["passed"]) for m in board["models"]] == [
        (MODEL, "num", N), ("bad", "num", 0),
    ]  # fmt: skip
    for m in board["models"]:
        assert m["others"]["j"]["passed"] == N  # the scripted judge grades every sample C
    assert board["models"][1]["others"]["py"]["passed"] == 0
    (pair,) = board["pairs"]
    assert (pair["scorer"], pair["winner"]) == ("num", MODEL)
    table = str(event.metadata["leaderboard"].value)
    assert "pass rate (num)" in table and "j pass rate" in table and "py pass rate" in table


def test_judge_error_threshold_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADETRAIL_MAX_JUDGE_ERROR_RATE", "0.2")
    assert settings_from_environment().max_judge_error_rate == 0.2
    monkeypatch.delenv("GRADETRAIL_MAX_JUDGE_ERROR_RATE")
    assert settings_from_environment().max_judge_error_rate == 0.05


def test_a_table_an_older_gradetrail_wrote_is_rebuilt_with_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    with duckdb.connect(str(path)) as db:
        db.execute("CREATE TABLE stats (spec VARCHAR, model VARCHAR, n BIGINT)")
        db.execute("INSERT INTO stats VALUES ('add', 'old', 3)")
    resource = DuckDBResource(database=str(path))
    assert replace_partition(resource, "stats", STATS_COLUMNS, "add", MODEL, [])
    assert not replace_partition(resource, "stats", STATS_COLUMNS, "add", MODEL, [])
    with duckdb.connect(str(path)) as db:
        columns = [r[0] for r in db.execute("DESCRIBE stats").fetchall()]
        assert columns == [name.strip('"') for name, _ in STATS_COLUMNS]
        assert db.execute("SELECT count(*) FROM stats").fetchone() == (0,)


def scores_version(instance: dg.DagsterInstance) -> str | None:
    return latest_data_version(instance, dg.AssetKey(["add", "scores"]), MODEL)


def test_a_scorer_edit_that_changes_scores_or_reasons_changes_the_scores_data_version(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    specs = write_project(tmp_path, f"{fake_server.base_url}/v1")
    instance.add_dynamic_partitions("add__models", [MODEL])
    defs = build_definitions(specs, settings(tmp_path))
    materialize(defs, instance, tmp_path, ("dataset", "responses", "scores"))
    first = scores_version(instance)
    assert first is not None

    # The same inputs scored again: the same data version (it is a content hash).
    materialize(defs, instance, tmp_path, ("scores",))
    assert scores_version(instance) == first

    # Only the Python scorer's reasons change: the scores are the same, the version not.
    scorer = specs / "scorers" / "x.py"
    scorer.write_text(
        "def has_answer(sample, response):\n"
        "    return sample['answer'] in response, 'a new reason'\n"
    )
    reasoned = build_definitions(specs, settings(tmp_path))
    meta = scores_metadata(materialize(reasoned, instance, tmp_path, ("scores",)))
    assert meta["mean_score[py]"] == 1.0
    second = scores_version(instance)
    assert second not in (None, first)

    # Now its scores change.
    scorer.write_text("def has_answer(sample, response):\n    return False, 'a new reason'\n")
    rescored = build_definitions(specs, settings(tmp_path))
    meta = scores_metadata(materialize(rescored, instance, tmp_path, ("scores",)))
    assert meta["mean_score[py]"] == 0.0
    assert scores_version(instance) not in (None, first, second)
    assert fake_server.calls == N
