"""The Dagster layer at scale (issue 15 item 9): scores and stats read the run directory
as a stream (no list of the run's records), the tables take their rows a batch at a time
in one transaction, the failures shown are read until there are enough, and the costs
are numbers in the metadata that Dagster plots over materializations."""

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
from dagster_duckdb import DuckDBResource

import gradetrail_assets.tables as tables
from gradetrail_assets.build import build_definitions
from gradetrail_assets.metadata import FAILURES_SHOWN, FirstFailures, scores_metadata
from gradetrail_assets.tables import SCORE_COLUMNS, STATS_COLUMNS, replace_partition
from gradetrail_lib import run_spec
from gradetrail_lib.analysis.stats import run_stats
from gradetrail_lib.analysis.summary import summarize
from gradetrail_lib.engine.run import CompletedRun
from gradetrail_lib.results.runs import RESULTS_FILE, Run, load_run
from gradetrail_lib.results.totals import call_totals
from gradetrail_lib.results.trace import TraceRecord, iter_records
from tests.assets.test_dagster_scorers import N, materialize, settings, write_project
from tests.conftest import write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer

MODEL = "fake-1"
JUDGE_COLUMNS = (
    "judge_calls, judge_cache_hits, judge_errors, judge_input_tokens, judge_output_tokens, "
    "judge_cost_usd"
)


def forbid_whole_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading every record of a run into a list fails the test."""

    def refuse(self: object) -> list[TraceRecord]:
        raise AssertionError("a whole run's records were read into memory")

    monkeypatch.setattr(CompletedRun, "records", property(refuse))
    monkeypatch.setattr(Run, "records", property(refuse))


def test_scores_and_stats_stream_the_run_and_give_what_the_records_give(
    tmp_path: Path,
    instance: dg.DagsterInstance,
    fake_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Three scorers (numeric, a scripted judge, Python); two judge outputs hold no grade.
    grades = ["GRADE: C"] * (N - 2) + ["no idea", "GRADE: maybe"]
    specs = write_project(tmp_path, f"{fake_server.base_url}/v1", grades)
    instance.add_dynamic_partitions("add__models", [MODEL])
    defs = build_definitions(specs, settings(tmp_path, max_judge_error_rate=0.5))
    forbid_whole_runs(monkeypatch)
    inserted: dict[str, list[int]] = {"scores": [], "stats": []}
    insert = tables.insert_rows

    def counted(connection: Any, table: str, columns: Sequence[tuple[str, str]], rows: Any) -> None:
        inserted[table].append(len(rows))
        insert(connection, table, columns, rows)

    monkeypatch.setattr(tables, "insert_rows", counted)
    monkeypatch.setattr(tables, "INSERT_ROWS", 5)
    result = materialize(defs, instance, tmp_path, ("dataset", "responses", "scores", "stats"))
    # 8 samples x 3 scorers, 5 rows an INSERT; the stats' 3 rows in one.
    assert inserted == {"scores": [5, 5, 5, 5, 4], "stats": [3]}
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    judged = checks["judge_error_rate"].metadata["scorers"].value
    assert judged == {"j": {"errors": 2, "answered": N, "rate": 2 / N}}
    assert checks["judge_error_rate"].passed
    monkeypatch.undo()

    # The same figures as from the records in memory.
    run_dir = Path(
        str(result.asset_materializations_for_node("add__scores")[0].metadata["run_dir"].value)
    )
    run = load_run(run_dir)
    records = run.records
    stats_event = result.asset_materializations_for_node("add__stats")[0]
    assert stats_event.metadata["stats"].value == {
        name: run_stats(records, name).to_json() for name in run.manifest.scorer_names
    }
    with duckdb.connect(str(tmp_path / "gradetrail.duckdb")) as db:
        for name in run.manifest.scorer_names:
            row = db.execute(f"SELECT {JUDGE_COLUMNS} FROM stats WHERE scorer = ?", [name])
            judge = call_totals(records, "judge", name)
            # Judge errors as the run's summary counts them: samples without a grade.
            ungraded = sum(r.error_of(name) == "judge_error" for r in records)
            assert ungraded == (2 if name == "j" else 0)
            assert row.fetchone() == (
                judge.calls, judge.cache_hits, ungraded, judge.input_tokens,
                judge.output_tokens, judge.cost_usd,
            )  # fmt: skip
        rows = db.execute("SELECT id, scorer, score, reason, error FROM scores").fetchall()
    assert sorted(rows) == sorted(
        (r.id, name, r.score_of(name), e.reason, e.error)
        for r in records
        for name, e in r.scores.items()
    )
    assert len(rows) == N * 3


def rows_of(n: int, model: str, fail_at: int | None = None) -> Iterator[tuple[Any, ...]]:
    for i in range(n):
        if i == fail_at:
            raise RuntimeError("a bad line in the middle")
        yield ("add", model, "identity", f"s{i}", *[None] * (len(SCORE_COLUMNS) - 4))


def test_replace_partition_swaps_a_stream_of_rows_in_one_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resource = DuckDBResource(database=str(tmp_path / "t.duckdb"))
    replace_partition(resource, "scores", SCORE_COLUMNS, "add", "other", rows_of(3, "other"))
    replace_partition(resource, "scores", SCORE_COLUMNS, "add", MODEL, rows_of(4, MODEL))
    sizes: list[int] = []
    insert = tables.insert_rows

    def counted(connection: Any, table: str, columns: Any, rows: Any) -> None:
        sizes.append(len(rows))
        insert(connection, table, columns, rows)

    monkeypatch.setattr(tables, "insert_rows", counted)

    # A stream that fails part way (after two batches went in) leaves the old rows.
    with pytest.raises(RuntimeError, match="bad line"):
        replace_partition(
            resource, "scores", SCORE_COLUMNS, "add", MODEL, rows_of(10, MODEL, fail_at=7),
            batch_rows=3,
        )  # fmt: skip
    assert sizes == [3, 3]

    def count(model: str) -> int:
        with duckdb.connect(str(tmp_path / "t.duckdb")) as db:
            found = db.execute("SELECT count(*) FROM scores WHERE model = ?", [model]).fetchone()
        assert found is not None
        return int(found[0])

    assert (count(MODEL), count("other")) == (4, 3)

    sizes.clear()
    replace_partition(
        resource, "scores", SCORE_COLUMNS, "add", MODEL, rows_of(10, MODEL), batch_rows=3
    )
    assert sizes == [3, 3, 3, 1]
    assert (count(MODEL), count("other")) == (10, 3)
    # An empty stream empties the partition.
    replace_partition(resource, "stats", STATS_COLUMNS, "add", MODEL, iter(()))
    replace_partition(resource, "scores", SCORE_COLUMNS, "add", MODEL, iter(()))
    assert (count(MODEL), count("other")) == (0, 3)


def test_rows_that_do_not_fit_in_the_memory_limit_go_in_again_without_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    resource = DuckDBResource(database=str(tmp_path / "t.duckdb"))
    replace_partition(resource, "scores", SCORE_COLUMNS, "add", MODEL, rows_of(4, MODEL))

    def count() -> int:
        with duckdb.connect(str(tmp_path / "t.duckdb")) as db:
            found = db.execute("SELECT count(*) FROM scores").fetchone()
        assert found is not None
        return int(found[0])

    # A stream cannot be read twice: the error, and the old rows.
    with pytest.raises(duckdb.OutOfMemoryException):
        replace_partition(
            resource, "scores", SCORE_COLUMNS, "add", MODEL, rows_of(2000, MODEL),
            memory_limit="1MB",
        )  # fmt: skip
    assert count() == 4
    # A function of the rows gives them again, and they go in without the limit.
    streams = 0

    def rows() -> Iterator[tuple[Any, ...]]:
        nonlocal streams
        streams += 1
        return rows_of(2000, MODEL)

    with caplog.at_level("WARNING", logger="gradetrail_assets"):
        replace_partition(resource, "scores", SCORE_COLUMNS, "add", MODEL, rows, memory_limit="1MB")
    assert (streams, count()) == (2, 2000)
    assert "did not fit in 1MB" in caplog.text


def test_the_failures_shown_are_read_until_there_are_enough(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    n = 100  # every 4th sample's stored answer is wrong: 25 failures, at 0, 4, 8, ...
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    (done,) = run_spec(spec, results_root=tmp_path / "results", cache=tmp_path / "c.duckdb")
    read = 0

    def counting() -> Iterator[TraceRecord]:
        nonlocal read
        for record in iter_records(done.run_dir / RESULTS_FILE):
            read += 1
            yield record

    metadata = scores_metadata(done.summary, counting(), done.manifest, str(done.run_dir))
    assert read == 4 * (FAILURES_SHOWN - 1) + 1  # up to the 20th failure, not past it
    shown = [
        line for line in str(metadata["summary"].value).splitlines() if line.startswith("| s0")
    ]
    assert [line.split(" | ")[0] for line in shown] == [f"| s{4 * i:03d}" for i in range(20)]

    # Kept on the way through a stream another reader consumes whole.
    failures = FirstFailures()
    assert sum(1 for _ in failures.watch(iter_records(done.run_dir / RESULTS_FILE))) == n
    assert [r.id for r in failures.records] == [f"s{4 * i:03d}" for i in range(20)]
    again = scores_metadata(done.summary, failures.records, done.manifest, str(done.run_dir))
    assert again["summary"].value == metadata["summary"].value

    # The run's totals read back from its directory, whole or a batch at a time, are the
    # ones it summarized.
    scorers = [(s.name, s.type) for s in done.manifest.scorers]
    for batch_records in (None, 7):
        totals = load_run(done.run_dir).totals(batch_records)
        assert summarize(totals, scorers) == done.summary
        assert totals.answered == n and totals.target.totals().calls == n


def floats(event: dg.AssetMaterialization) -> dict[str, float]:
    return {
        name: float(value.value)
        for name, value in event.metadata.items()
        if isinstance(value, dg.FloatMetadataValue) and value.value is not None
    }


def test_cost_is_a_number_in_the_metadata_beside_the_pass_rate(
    tmp_path: Path,
    instance: dg.DagsterInstance,
    fake_server: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", N)
    # A model the price list knows, answered by the fake server in the Anthropic shape.
    write_spec(
        specs / "add.yaml", base_url=f"{fake_server.base_url}/v1", provider="anthropic",
        model="claude-haiku-4-5", extra_model=", api_key_env: GT_KEY",
    )  # fmt: skip
    instance.add_dynamic_partitions("add__models", ["claude-haiku-4-5"])
    defs = build_definitions(specs, settings(tmp_path))
    job = defs.resolve_job_def("add__eval")

    def materialize_all() -> tuple[dict[str, float], dict[str, float]]:
        result = job.execute_in_process(
            instance=instance,
            partition_key="claude-haiku-4-5",
            asset_selection=[
                dg.AssetKey(["add", s]) for s in ("dataset", "responses", "scores", "stats")
            ],
            resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))},
        )
        assert result.success
        scores = result.asset_materializations_for_node("add__scores")[0]
        stats = result.asset_materializations_for_node("add__stats")[0]
        assert "reused from cache" not in str(stats.metadata["cost"].value)  # the text stays
        return floats(scores), floats(stats)

    scores, stats = materialize_all()
    paid = scores["cost_usd"]
    assert paid > 0 and scores["cost_paid_usd"] == pytest.approx(paid)
    assert (scores["judge_cost_usd"], scores["judge_cost_paid_usd"]) == (0.0, 0.0)  # no judge
    assert stats["cost_usd"] == pytest.approx(paid)
    assert stats["cost_paid_usd"] == pytest.approx(paid)
    assert "pass_rate" in stats
    assert fake_server.calls == N

    # Everything cached: the same cost, nothing paid.
    scores, stats = materialize_all()
    assert fake_server.calls == N
    assert scores["cost_usd"] == pytest.approx(paid) and scores["cost_paid_usd"] == 0.0
    assert stats["cost_usd"] == pytest.approx(paid) and stats["cost_paid_usd"] == 0.0

    # Over materializations, as the UI plots it: a number each time, beside pass_rate.
    found = instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(["add", "stats"]), asset_partitions=["claude-haiku-4-5"]
        ),
        limit=10,
    )
    series = [
        {k: v.value for k, v in r.asset_materialization.metadata.items()}
        for r in found.records
        if r.asset_materialization is not None
    ]
    assert [s["cost_paid_usd"] for s in reversed(series)] == [pytest.approx(paid), 0.0]
    assert all(isinstance(s["cost_usd"], float) and "pass_rate" in s for s in series)


def test_an_unknown_cost_is_left_out_not_shown_as_zero(
    tmp_path: Path, instance: dg.DagsterInstance, fake_server: FakeLLMServer
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", N)
    write_spec(specs / "add.yaml", base_url=f"{fake_server.base_url}/v1")  # fake-1: no price
    instance.add_dynamic_partitions("add__models", [MODEL])
    defs = build_definitions(specs, settings(tmp_path))
    result = materialize(defs, instance, tmp_path, ("dataset", "responses", "scores", "stats"))
    for node in ("add__scores", "add__stats"):
        metadata = result.asset_materializations_for_node(node)[0].metadata
        assert "cost_usd" not in metadata and "cost_paid_usd" not in metadata
        assert str(metadata["cost"].value) == "unknown"
    scores = result.asset_materializations_for_node("add__scores")[0].metadata
    assert scores["judge_cost_usd"].value == 0.0  # no judge call: nothing to price
