"""Program executions by key (see `execution_key`), so a re-score runs no program again.

A SQLite file beside the response cache (`<cache>.exec.sqlite`): the code scorer's
workers are threads, and SQLite with one connection behind a lock serves them simply.
"""

import json
import sqlite3
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from gradetrail_lib.hashing import hash_json
from gradetrail_lib.sandbox import Execution, Language, Limits


def execution_key(program: str, harness: str, language: Language, limits: Limits, mode: str) -> str:
    """What decides an execution's outcome: the program (its harness built in), the
    interpreter, the limits and the sandbox."""
    return hash_json(
        {
            "program": program,
            "harness": harness,
            "language": [language.name, list(language.interpreter), language.file_name],
            "limits": asdict(limits),
            "sandbox": mode,
        }
    )


class Executions(Protocol):
    """What the code scorer asks of an execution cache: this SQLite file, or the Postgres
    cache's table (`postgres.PostgresExecCache`)."""

    def get(self, key: str) -> Execution | None: ...

    def put(self, key: str, execution: Execution) -> None: ...


def exec_cache_path(response_cache: Path) -> Path:
    return response_cache.with_name(response_cache.name + ".exec.sqlite")


class ExecCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    def _open(self) -> sqlite3.Connection:
        # Opened at the first use, so a run that executes nothing creates no file.
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(self.path, check_same_thread=False)
            connection.execute(
                "CREATE TABLE IF NOT EXISTS executions (key TEXT PRIMARY KEY, value TEXT)"
            )
            self._connection = connection
        return self._connection

    def get(self, key: str) -> Execution | None:
        with self._lock:
            row = (
                self._open()
                .execute("SELECT value FROM executions WHERE key = ?", (key,))
                .fetchone()
            )
        if row is None:
            return None
        fields: dict[str, Any] = json.loads(row[0])
        return Execution(**fields)

    def put(self, key: str, execution: Execution) -> None:
        with self._lock:
            connection = self._open()
            connection.execute(
                "INSERT OR REPLACE INTO executions (key, value) VALUES (?, ?)",
                (key, json.dumps(asdict(execution))),
            )
            connection.commit()
