"""Dagster's `scores`/`stats` tables and the run history in a Postgres store, on a real
Postgres: two partitions materialized write their rows there (none into the DuckDB file),
the leaderboard reads them, a re-materialization replaces a partition's rows, a stream
that fails part way leaves the old rows, and the store's password is in no snapshot the
UI reads."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb
import pytest
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster._serdes import serialize_value

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import settings_from_environment
from gradetrail_assets.tables import SCORE_COLUMNS, STATS_COLUMNS, PostgresTables
from gradetrail_lib.cache.postgres import close_pools
from gradetrail_lib.history.entries import origin_of
from tests.conftest import write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer, default_responder

N = 12
SECRET = "s3cret-pw"
SCORERS = 1  # the spec's: numeric


def count(url: str, sql: str, *params: Any) -> int:
    import psycopg  # (here: the fixture skips the tests where it is not installed)

    with psycopg.connect(url) as connection:
        row = connection.execute(sql, list(params)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def store(postgres_url: str) -> Iterator[str]:
    yield postgres_url
    close_pools()


# The snapshot reads a deprecated schedule property of Dagster's own.
@pytest.mark.filterwarnings("ignore:Property `ScheduleDefinition.environment_vars`")
def test_partitions_write_their_rows_into_postgres_and_the_leaderboard_reads_them(
    tmp_path: Path,
    instance: dg.DagsterInstance,
    fake_server: FakeLLMServer,
    store: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_server.responder = lambda body: (
        "Answer: 0" if body["model"] == "bad" else default_responder(body)
    )
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", N)
    url = f"{fake_server.base_url}/v1"
    spec = write_spec(specs / "add.yaml", base_url=url, model="good")
    spec.write_text(
        spec.read_text().replace(
            "models:\n",
            f'models:\n  - {{provider: openai_compatible, name: bad, base_url: "{url}"}}\n',
        )
    )
    cache = tmp_path / ".gradetrail" / "gradetrail.duckdb"
    # As a deployment sets it: the environment, the store's URL with a password in it.
    monkeypatch.setenv("GRADETRAIL_STORE", store.replace("postgres@", f"postgres:{SECRET}@"))
    monkeypatch.setenv("GRADETRAIL_CACHE", str(cache))
    monkeypatch.setenv("GRADETRAIL_RESULTS", str(tmp_path / "results"))
    defs = build_definitions(specs, settings_from_environment())
    # What the webserver shows of the definitions (resources' config included).
    snapshot = serialize_value(RepositorySnap.from_def(defs.get_repository_def()))
    assert "GRADETRAIL_STORE" in snapshot and SECRET not in snapshot

    instance.add_dynamic_partitions("add__models", ["good", "bad"])
    job = defs.resolve_job_def("add__eval")
    steps = [dg.AssetKey(["add", s]) for s in ("dataset", "responses", "scores", "stats")]
    io = {"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))}

    def materialize(model: str, keys: list[dg.AssetKey]) -> None:
        done = job.execute_in_process(
            instance=instance, partition_key=model, asset_selection=keys, resources=io
        )
        assert done.success

    for model in ("good", "bad"):
        materialize(model, steps)
    scores_sql = "SELECT count(*) FROM scores WHERE spec = 'add' AND model = %s"
    for model in ("good", "bad"):
        assert count(store, scores_sql, model) == N * SCORERS
        assert count(store, "SELECT count(*) FROM stats WHERE model = %s", model) == SCORERS
    passed = sum(1 for i in range(N) if i % 4)
    assert count(store, "SELECT count(*) FROM scores WHERE passed AND model = 'good'") == passed
    # The run history is the store's too, each run's origin this results root.
    assert count(
        store, "SELECT count(*) FROM gradetrail_history WHERE origin = %s",
        origin_of(tmp_path / "results"),
    ) == 2  # fmt: skip
    # The DuckDB file holds the cache only.
    with duckdb.connect(str(cache), read_only=True) as db:
        tables = {row[0] for row in db.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "responses" in tables and not tables & {"scores", "stats"}

    board_job = dg.define_asset_job("board", selection=[dg.AssetKey(["add", "leaderboard"])])
    with_board = dg.Definitions.merge(defs, dg.Definitions(jobs=[board_job]))
    result = with_board.resolve_job_def("board").execute_in_process(instance=instance)
    assert result.success
    board = result.asset_materializations_for_node("add__leaderboard")[0].metadata["board"].value
    assert [(m["model"], m["passed"], m["n"]) for m in board["models"]] == [
        ("good", passed, N), ("bad", 0, N),
    ]  # fmt: skip
    (pair,) = board["pairs"]
    assert (pair["winner"], pair["n"]) == ("good", N)

    # Scores and stats again: the partition's rows replaced, not added to.
    materialize("good", steps[2:])
    assert count(store, scores_sql, "good") == N * SCORERS
    assert count(store, "SELECT count(*) FROM stats") == 2 * SCORERS
    assert count(store, "SELECT count(*) FROM gradetrail_history") == 3


def rows_of(n: int, model: str, fail_at: int | None = None) -> Iterator[tuple[Any, ...]]:
    for i in range(n):
        if i == fail_at:
            raise RuntimeError("a bad line in the middle")
        # A NUL, which Postgres's text cannot hold, in the reason; a whole-number score.
        yield ("add", model, "identity", f"s{i}", i, "sc", "exact", True, 1, True,
               "nul\x00here", *[None] * (len(SCORE_COLUMNS) - 11))  # fmt: skip


def test_a_partition_is_swapped_in_one_transaction_in_postgres(store: str) -> None:
    import psycopg

    tables = PostgresTables(store, where="the store")
    tables.replace_partition("scores", SCORE_COLUMNS, "add", "other", rows_of(3, "other"))
    tables.replace_partition("scores", SCORE_COLUMNS, "add", "m", rows_of(4, "m"))
    sql = "SELECT count(*) FROM scores WHERE model = %s"
    # A stream that fails after two batches went in leaves the old rows.
    with pytest.raises(RuntimeError, match="bad line"):
        tables.replace_partition(
            "scores", SCORE_COLUMNS, "add", "m", rows_of(10, "m", fail_at=7), batch_rows=3
        )
    assert (count(store, sql, "m"), count(store, sql, "other")) == (4, 3)
    tables.replace_partition("scores", SCORE_COLUMNS, "add", "m", rows_of(10, "m"), batch_rows=3)
    assert (count(store, sql, "m"), count(store, sql, "other")) == (10, 3)
    with psycopg.connect(store) as connection:
        row = connection.execute("SELECT reason, score FROM scores LIMIT 1").fetchone()
    assert row == ("nul\ufffdhere", 1.0)
    # A table of an older layout is rebuilt (its rows are derived data).
    with psycopg.connect(store, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS stats")
        connection.execute("CREATE TABLE stats (spec text, model text)")
    assert tables.replace_partition("stats", STATS_COLUMNS, "add", "m", iter(()))
    assert not tables.replace_partition("stats", STATS_COLUMNS, "add", "m", iter(()))
    assert tables.read_stats("add") == []
