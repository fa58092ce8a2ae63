"""The run history in a shared Postgres store (`GRADETRAIL_STORE`), through the real CLI
and a real Postgres: two "machines" (two results roots) see each other's runs in `list`,
`gate --baseline previous` picks its baseline from every machine's runs and says what it
needs when that run's directory is elsewhere, a store that is refused or out of reach
fails before anything is written, a store lost at a run's end keeps the run directory,
and the URL's password appears nowhere."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gradetrail_lib.backends import build_backend
from gradetrail_lib.cache.postgres import close_pools
from gradetrail_lib.engine.api import plan_spec
from gradetrail_lib.engine.run import RunOptions, run_model
from gradetrail_lib.errors import GradetrailError, UsageError
from gradetrail_lib.history.entries import HISTORY_FILE, FileHistory, origin_of
from gradetrail_lib.history.postgres import PostgresHistory
from tests.analysis.test_history_e2e import N, run_dir, write_spec
from tests.conftest import run_cli

SECRET = "s3cret-pw"


def with_password(url: str) -> str:
    """The test server trusts loopback connections: a password in the URL is accepted
    and never needed, which is what lets a test look for it in every output."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")


def gt(cwd: Path, store: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = run_cli(*args, cwd=cwd, env={"GRADETRAIL_STORE": store, "GRADETRAIL_CACHE": ""})
    assert SECRET not in done.stdout + done.stderr
    return done


def run_on(machine: Path, store: str, field: str) -> Path:
    """A run of spec `g` (model x, answers from `field`) on `machine` (its own folder,
    results root and cache file)."""
    spec = write_spec(machine / "g.yaml", field)
    done = gt(
        machine, store, "run", str(spec), "--results", str(machine / "results"),
        "--cache", str(machine / "c.duckdb"),
    )  # fmt: skip
    return run_dir(done)


def test_two_machines_sharing_a_store_see_each_others_runs(
    tmp_path: Path, postgres_url: str
) -> None:
    store = with_password(postgres_url)
    a, b = tmp_path / "a", tmp_path / "b"
    wrong_a = run_on(a, store, "wrong")  # 10 of 20 pass
    other_b = run_on(b, store, "other")  # 15 of 20
    right_b = run_on(b, store, "answer")  # 20 of 20
    # Neither root has a history file: the entries are in Postgres.
    assert not (a / "results" / HISTORY_FILE).exists()
    assert not (b / "results" / HISTORY_FILE).exists()

    listed = gt(a, store, "list", str(a / "results"))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ["g/x", "g/x", "g/x"]
    # Newest first: b's two runs, marked as elsewhere with where they are, then a's own.
    assert lines[0].endswith(f"(elsewhere: {origin_of(b / 'results')}/{right_b.name})")
    assert lines[1].endswith(f"(elsewhere: {origin_of(b / 'results')}/{other_b.name})")
    assert lines[2].endswith(wrong_a.name) and "pass 0.500" in lines[2]
    as_json = json.loads(gt(b, store, "list", str(b / "results"), "--json").stdout)
    assert [(e["state"], e["run_dir"]) for e in as_json] == [
        ("current", right_b.name), ("current", other_b.name), ("elsewhere", wrong_a.name),
    ]  # fmt: skip
    assert as_json[2]["origin"] == origin_of(a / "results")

    # b's gate: the previous run whose results differ is b's own `other` run, not a's
    # older one; its directory is here.
    gate = gt(b, store, "gate", str(right_b), "--baseline", "previous")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert f"baseline: {other_b} (previous run of g/x" in gate.stdout

    # a's next run: its previous run is b's, whose directory a does not have.
    right_a = run_on(a, store, "answer")
    assert right_a.name == right_b.name  # the same identity on both machines
    refused = gt(a, store, "gate", str(right_a), "--baseline", "previous")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    message = refused.stderr
    assert f"the previous run of g/x whose results differ is {other_b.name}" in message
    assert f"rsync -a {origin_of(b / 'results')}/{other_b.name} {a / 'results'}/" in message
    assert "--baseline DIR" in message and "postgres:***@" in message
    # Copied over, it is the baseline.
    shutil.copytree(other_b, a / "results" / other_b.name)
    gate = gt(a, store, "gate", str(right_a), "--baseline", "previous")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert f"baseline: {a / 'results' / other_b.name} (previous run of g/x" in gate.stdout

    # A cache URL is the store when GRADETRAIL_STORE is unset; `local` keeps the file.
    local = gt(a, "local", "list", str(a / "results"))
    assert local.stdout == "" and f"no runs recorded in {a / 'results' / HISTORY_FILE}" in (
        local.stderr
    )
    followed = run_cli(
        "list", str(a / "results"), cwd=a, env={"GRADETRAIL_STORE": "", "GRADETRAIL_CACHE": store}
    )
    assert len(followed.stdout.splitlines()) == 4, followed.stderr


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("mysql://u:pw@h/db", "GRADETRAIL_STORE 'mysql://u:***@h/db': unknown scheme 'mysql'"),
        ("some/folder", "GRADETRAIL_STORE 'some/folder': a store is a postgresql:// URL"),
    ],
)
def test_a_refused_store_fails_before_anything_is_written(
    tmp_path: Path, store: str, said: str
) -> None:
    spec = write_spec(tmp_path / "g.yaml")
    done = gt(tmp_path, store, "run", str(spec), "--results", "results", "--cache", "c.duckdb")
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "c.duckdb").exists()


def test_a_store_out_of_reach_fails_before_anything_is_written(
    tmp_path: Path, postgres_url: str
) -> None:
    # The test server's URL with a database that does not exist.
    gone = with_password(postgres_url.rsplit("/", 1)[0] + "/no_such_db")
    spec = write_spec(tmp_path / "g.yaml")
    done = gt(tmp_path, gone, "run", str(spec), "--results", "results", "--cache", "c.duckdb")
    assert done.returncode == 1, done.stderr
    assert "postgres:***@" in done.stderr and "cannot open the history" in done.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "c.duckdb").exists()


def test_a_store_lost_at_the_end_keeps_the_run_directory(tmp_path: Path, postgres_url: str) -> None:
    store = PostgresHistory(postgres_url, where="the store", results_root=tmp_path / "results")
    import psycopg  # (here: the fixture skips the test where it is not installed)

    # The table goes away between the store's opening and the run's end.
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("DROP TABLE gradetrail_history")
    (plan,) = plan_spec(write_spec(tmp_path / "g.yaml"), ["x"]).plans
    with pytest.raises(GradetrailError) as raised:
        run_model(
            plan, None, build_backend("local", concurrency=4), tmp_path / "results",
            RunOptions(history=store),
        )  # fmt: skip
    message = str(raised.value)
    (kept,) = [p for p in (tmp_path / "results").iterdir() if not p.name.startswith(".")]
    assert f"the run is complete and its directory is in place ({kept})" in message
    assert "the store: cannot add the run to the history" in message
    assert 'relation "gradetrail_history" does not exist' in message
    assert len((kept / "results.jsonl").read_text().splitlines()) == N
    assert not isinstance(raised.value, UsageError)
    close_pools()


def test_an_entry_s_origin_stays_out_of_the_history_file(tmp_path: Path) -> None:
    """`origin` is a shared store's column: the file's lines are as they always were."""
    done = run_cli(
        "run", str(write_spec(tmp_path / "g.yaml")), "--results", "results",
        "--cache", "c.duckdb", cwd=tmp_path, env={"GRADETRAIL_STORE": "local"},
    )  # fmt: skip
    run_dir(done)
    (line,) = (tmp_path / "results" / HISTORY_FILE).read_text().splitlines()
    assert "origin" not in json.loads(line)
    (entry,) = FileHistory(tmp_path / "results").read()
    assert entry.origin is None
