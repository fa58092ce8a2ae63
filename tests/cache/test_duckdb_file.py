"""Short transactions on a shared DuckDB file: the lock is held only inside the block."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from gradetrail_lib.cache.duckdb_file import DatabaseLocked, open_connection
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.errors import GradetrailError
from tests.support.threads import InThread

COUNT_ROWS = """
import sys, duckdb
connection = duckdb.connect(sys.argv[1])
print(connection.execute("SELECT count(*) FROM t").fetchone()[0])
"""


def count_from_another_process(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", COUNT_ROWS, str(path)], capture_output=True, text=True, timeout=60
    )


def test_another_process_can_open_the_file_once_the_block_ends(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    with open_connection(path) as connection:
        connection.execute("CREATE TABLE t (x INTEGER)")
        connection.execute("INSERT INTO t VALUES (1), (2)")
        held = count_from_another_process(path)
    assert held.returncode != 0
    assert "lock" in held.stderr.lower()
    after = count_from_another_process(path)
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == "2"


def test_unqualified_names_refer_to_the_file(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    with open_connection(path) as connection:
        connection.execute("CREATE TABLE t (x INTEGER)")
        connection.execute("INSERT INTO t VALUES (7)")
    with open_connection(path) as connection:
        assert connection.execute("SELECT x FROM t").fetchall() == [(7,)]
    with duckdb.connect(str(path)) as direct:
        assert direct.execute("SELECT x FROM t").fetchall() == [(7,)]


def test_threads_share_the_file_without_conflict(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    with open_connection(path) as connection:
        connection.execute("CREATE TABLE t (thread INTEGER, i INTEGER)")
    errors: list[BaseException] = []
    inside = threading.Barrier(4)

    def work(n: int) -> None:
        try:
            for i in range(20):
                with open_connection(path) as connection:
                    if i == 0:
                        inside.wait(timeout=10)  # all four hold the file at once
                    connection.execute("INSERT INTO t VALUES (?, ?)", [n, i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with open_connection(path) as connection:
        assert connection.execute("SELECT count(*) FROM t").fetchone() == (80,)
    assert count_from_another_process(path).stdout.strip() == "80"


def open_cache_and_batches(path: Path, together: threading.Barrier) -> None:
    """The cache file's tables, then its batches' tables, each at the same moment as the
    other threads at `together`."""
    together.wait(timeout=10)
    cache = ResponseCache(path)
    together.wait(timeout=10)
    cache.batch_store()


def test_threads_opening_a_new_cache_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Threads share the file's attachment, so their transactions run at once: the ones
    creating its tables take turns (two that created a table at once conflicted)."""
    for attempt in range(10):
        path = tmp_path / f"c{attempt}.duckdb"
        together = threading.Barrier(8)
        opening = [InThread(open_cache_and_batches, path, together) for _ in range(8)]
        for each in opening:
            each.join(60)
    with open_connection(path) as connection:
        tables = connection.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1")
        assert [row[0] for row in tables.fetchall()] == ["batch_keys", "batches", "responses"]


def test_waits_for_a_plain_connection_of_this_process_then_proceeds(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    direct = duckdb.connect(str(path))
    direct.execute("CREATE TABLE t (x INTEGER)")
    timer = threading.Timer(0.3, direct.close)
    timer.start()
    with open_connection(path, wait_s=10) as connection:
        connection.execute("INSERT INTO t VALUES (1)")
    timer.join()
    with open_connection(path) as connection:
        assert connection.execute("SELECT count(*) FROM t").fetchone() == (1,)


def test_gives_up_with_a_clear_error_when_the_lock_stays(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, duckdb; c = duckdb.connect(sys.argv[1]); print('held', flush=True);"
            " time.sleep(30)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with (
            pytest.raises(DatabaseLocked, match=r"db\.duckdb: still locked after 0\.3s"),
            open_connection(path, wait_s=0.3),
        ):
            pass
    finally:
        holder.kill()
        holder.wait()
    with open_connection(path) as connection:  # and works once the holder is gone
        assert connection.execute("SELECT 1").fetchone() == (1,)


def test_a_file_that_is_not_a_database_is_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.duckdb"
    path.write_text("not a database, just text that is long enough to have a header\n" * 10)
    with (
        pytest.raises(GradetrailError, match=r"notes\.duckdb: cannot open the database"),
        open_connection(path),
    ):
        pass
    # A failed open leaves nothing attached: a good file still opens.
    with open_connection(tmp_path / "good.duckdb") as connection:
        assert connection.execute("SELECT 42").fetchone() == (42,)


def test_an_io_error_other_than_the_lock_fails_at_once(tmp_path: Path) -> None:
    # A "lock" in the path is no lock: the error comes without waiting out wait_s.
    folder = tmp_path / "blocks"
    folder.mkdir()
    path = folder / "lockfile.duckdb"
    path.write_text("not a database, just text that is long enough to have a header\n" * 10)
    started = time.monotonic()
    with (
        pytest.raises(GradetrailError, match=r"lockfile\.duckdb: cannot open the database"),
        open_connection(path, wait_s=30),
    ):
        pass
    with (
        pytest.raises(GradetrailError, match=r"a\.duckdb: cannot open the database"),
        open_connection(tmp_path / "no-such-folder" / "a.duckdb", wait_s=30),
    ):
        pass
    assert time.monotonic() - started < 5


READ_WHILE_HELD = """
import sys, time
from pathlib import Path
from gradetrail_lib.cache.duckdb_file import open_connection
with open_connection(Path(sys.argv[1]), read_only=True) as connection:
    print(connection.execute("SELECT count(*) FROM t").fetchone()[0], flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_processes_that_only_read_the_file_read_it_at_once(tmp_path: Path) -> None:
    path = tmp_path / "db.duckdb"
    with open_connection(path) as connection:
        connection.execute("CREATE TABLE t (x INTEGER)")
        connection.execute("INSERT INTO t VALUES (1), (2), (3)")
    reader = subprocess.Popen(
        [sys.executable, "-c", READ_WHILE_HELD, str(path), "5"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "3"  # it reads, and holds the file
        with open_connection(path, read_only=True, wait_s=1.0) as connection:
            assert connection.execute("SELECT count(*) FROM t").fetchone() == (3,)
        with pytest.raises(DatabaseLocked), open_connection(path, wait_s=0.3):
            pass  # a writer waits for the other process's reader
    finally:
        reader.kill()
        reader.wait()


def test_a_writer_waits_for_this_processes_readers_and_a_reader_uses_a_writers_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db.duckdb"
    with open_connection(path) as connection:
        connection.execute("CREATE TABLE t (x INTEGER)")
    with (
        open_connection(path, read_only=True),
        pytest.raises(DatabaseLocked),
        open_connection(path, wait_s=0.2),
    ):
        pass
    with open_connection(path) as writer:
        writer.execute("INSERT INTO t VALUES (5)")
        with open_connection(path, read_only=True) as reader:
            assert reader.execute("SELECT x FROM t").fetchall() == [(5,)]
        writer.execute("INSERT INTO t VALUES (6)")  # still attached for writing
    with open_connection(path) as connection:
        assert connection.execute("SELECT count(*) FROM t").fetchone() == (2,)


CTRL_C_IN_A_QUERY = """
import os, signal, sys, threading
from pathlib import Path
from gradetrail_lib.cache.duckdb_file import open_connection
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:
    with open_connection(Path(sys.argv[1])) as connection:
        connection.execute("SELECT sum(range) FROM range(100000000000)").fetchall()
except KeyboardInterrupt:
    print("KeyboardInterrupt")
"""


def test_a_ctrl_c_during_a_query_is_a_keyboard_interrupt(tmp_path: Path) -> None:
    """DuckDB takes the SIGINT to stop its query and raises RuntimeError("Query
    interrupted") instead; the CLI's Ctrl-C handling (exit 130) needs the interrupt."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_A_QUERY, str(tmp_path / "db.duckdb")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.strip() == "KeyboardInterrupt", done.stderr


def test_a_ctrl_c_during_the_detach_after_a_piece_of_work_is_a_keyboard_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Releasing the file ends in a DETACH, a query that a Ctrl-C stops like any other:
    its RuntimeError("Query interrupted") is the interrupt too (it ended a run's Ctrl-C
    in a traceback and exit 1, test_batch_kill's Ctrl-C test, on a loaded machine)."""
    from gradetrail_lib.cache import duckdb_file

    release = duckdb_file._ATTACHMENTS.release

    def interrupted(path: str, alias: str) -> None:
        release(path, alias)
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(duckdb_file._ATTACHMENTS, "release", interrupted)
    with pytest.raises(KeyboardInterrupt), open_connection(tmp_path / "db.duckdb") as connection:
        connection.execute("CREATE TABLE t (x INTEGER)")
    monkeypatch.undo()
    with open_connection(tmp_path / "db.duckdb", read_only=True) as connection:
        assert connection.execute("SELECT count(*) FROM t").fetchone() == (0,)
