"""The response cache: one DuckDB file, keyed by request key, successful responses only.

DuckDB lets one process at a time open a file, and a second process cannot even read it
meanwhile. So no connection outlives one short transaction (`duckdb_file`): lookups and
writes open, work and close, retrying while another process holds the lock.

The table is an append-only log without a key constraint: a lookup takes the earliest
row of each key. A PRIMARY KEY index made the file several times larger and every write
transaction cost more CPU, growing with the file (docs/performance.md); two rows of one key
only arise when two processes pay for the same request at once (both are kept), which
claims (`claims.FileClaims`) leave to a claim that lapsed while its answer was on its way.

Responses are written by a background thread, one transaction per burst of arrivals
(`bursts.CacheWriter`, which the Postgres cache uses too), each journaled the moment it
arrives in `<file>.journal/` (`journal`), which opening the cache replays.
"""

import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gradetrail_lib.cache.batches import BatchStore
from gradetrail_lib.cache.bursts import CacheWriter
from gradetrail_lib.cache.claims import FileClaims, claims_path
from gradetrail_lib.cache.duckdb_file import open_connection, schema_changes
from gradetrail_lib.cache.duckdb_rows import Column, insert_rows
from gradetrail_lib.cache.executions import ExecCache, exec_cache_path
from gradetrail_lib.cache.journal import Journal, folder_beside, replay
from gradetrail_lib.cache.rollback import roll_back
from gradetrail_lib.providers.base import ModelRequest, ModelResponse

__all__ = ["CacheWriter", "ResponseCache"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    key VARCHAR NOT NULL,
    provider VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    served_model VARCHAR,
    text VARCHAR NOT NULL,
    stop_reason VARCHAR NOT NULL,
    input_tokens BIGINT,
    output_tokens BIGINT,
    latency_s DOUBLE NOT NULL,
    attempts INTEGER NOT NULL,
    raw VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT current_timestamp,
    tool_calls VARCHAR,
    usage VARCHAR
)
"""

# Files from before tool use have no tool_calls column (NULL: no tool call), and files
# from before step 11 no usage column (NULL: every usage field at its default).
_ADD_TOOL_CALLS = "ALTER TABLE responses ADD COLUMN IF NOT EXISTS tool_calls VARCHAR"
_ADD_USAGE = "ALTER TABLE responses ADD COLUMN IF NOT EXISTS usage VARCHAR"

# The response's fields beyond text and plain token counts, kept as one JSON object in the
# `usage` column (only those not at their default; NULL when all are): a new usage field is
# a new name in the object, never a new column and a migration.
USAGE_FIELDS = (
    "batch",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "cache_write_1h_input_tokens",
    "reasoning_tokens",
    "thinking",
    # A log-likelihood request's answer (`ModelResponse.loglikelihood`).
    "loglikelihood",
    "continuation_tokens",
    "is_greedy",
)

COLUMNS: list[Column] = [
    ("key", "VARCHAR"), ("provider", "VARCHAR"), ("model", "VARCHAR"),
    ("served_model", "VARCHAR"), ("text", "VARCHAR"), ("stop_reason", "VARCHAR"),
    ("input_tokens", "BIGINT"), ("output_tokens", "BIGINT"), ("latency_s", "DOUBLE"),
    ("attempts", "INTEGER"), ("raw", "VARCHAR"), ("tool_calls", "VARCHAR"),
    ("usage", "VARCHAR"),
]  # fmt: skip
COLUMN_NAMES = [name for name, _ in COLUMNS]


# Files written before the log format keyed the table with a PRIMARY KEY constraint.
# (pragma_table_info answers sooner than duckdb_constraints() in a new process.)
_HAS_KEY_CONSTRAINT = "SELECT bool_or(pk) FROM pragma_table_info('responses')"

# The keys a lookup asks for, as a table: they are bound as one comma-separated string
# (request keys are hex), which DuckDB splits faster than it takes a list of Python
# strings; a join on it is a plain hash join, cheaper than `IN (subquery)`'s mark join.
_KEYS_TABLE = "SELECT DISTINCT unnest(string_split($keys, ',')) AS key"


def _key_list(keys: Sequence[str]) -> str:
    joined = ",".join(keys)
    if joined.count(",") != len(keys) - 1:  # not request keys: refused, not mis-split
        raise ValueError("a request key holds no comma")
    return joined


def response_of(row: Sequence[Any]) -> ModelResponse:
    """A lookup's row as a response. Positional: a cached run makes one per sample, and
    keywords cost a third more."""
    _key, text, served, stop, tokens_in, tokens_out, latency, attempts, tool_calls, usage = row
    calls = json.loads(tool_calls) if tool_calls is not None else []
    response = ModelResponse(
        text, served, stop, tokens_in, tokens_out, latency, attempts, {}, calls
    )
    if usage is not None:
        for name, value in json.loads(usage).items():
            if name in USAGE_FIELDS:  # a name a later version wrote is left alone
                setattr(response, name, value)
    return response


def usage_json(response: ModelResponse) -> str | None:
    """The `usage` column of a response: its usage fields not at their default, or None."""
    usage = {
        name: value
        for name in USAGE_FIELDS
        if (value := getattr(response, name)) != _USAGE_DEFAULTS[name]
    }
    return json.dumps(usage, ensure_ascii=False) if usage else None


_USAGE_DEFAULTS = {name: ModelResponse.__dataclass_fields__[name].default for name in USAGE_FIELDS}


def response_row(request: ModelRequest, response: ModelResponse) -> list[Any]:
    """The row of a response, in the order of `COLUMNS` (both caches store this)."""
    return [
        request.key,
        request.endpoint.provider,
        request.endpoint.model,
        response.served_model,
        response.text,
        response.stop_reason,
        response.input_tokens,
        response.output_tokens,
        response.latency_s,
        response.attempts,
        json.dumps(response.raw, ensure_ascii=False),
        json.dumps(response.tool_calls, ensure_ascii=False) if response.tool_calls else None,
        usage_json(response),
    ]


def rows_by_key(keys: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """`rows` (in `COLUMNS` order, latest first) as one dict each per key, the earliest
    of a key, in the order of `keys`."""
    names = [name for name, _ in COLUMNS]
    found = {row[0]: dict(zip(names, row, strict=True)) for row in rows}
    return [found[key] for key in dict.fromkeys(keys) if key in found]


def new_rows(rows: Sequence[Mapping[str, Any]], held: Collection[str]) -> list[list[Any]]:
    """Of whole rows, those whose keys are neither in `held` nor earlier in `rows`, as
    lists in `COLUMNS` order (a missing optional column is NULL)."""
    out, seen = [], set(held)
    for row in rows:
        if row["key"] not in seen:
            seen.add(row["key"])
            out.append([row.get(name) for name, _ in COLUMNS])
    return out


# What a lookup reads of a row (`response_of`'s order): not the raw body.
LOOKUP_COLUMNS = (
    "key, text, served_model, stop_reason, input_tokens, output_tokens, latency_s, attempts,"
    " tool_calls, usage"
)


class ResponseCache:
    def __init__(self, path: Path) -> None:
        self.path = path
        # Where it is, as messages name it, and as a run's manifest records it (from any
        # working directory).
        self.where = str(path)
        self.location = str(path.resolve())
        path.parent.mkdir(parents=True, exist_ok=True)
        with schema_changes(), open_connection(path) as connection:
            connection.execute(SCHEMA.format(table="responses"))
            _drop_key_constraint(connection)
            connection.execute(_ADD_TOOL_CALLS)
            connection.execute(_ADD_USAGE)
        self.journals = folder_beside(path)
        replay(self.journals, self, COLUMN_NAMES)  # what a killed writer had not stored

    def cached_keys(self, keys: Sequence[str]) -> set[str]:
        """Which of `keys` the cache answers (without reading the answers)."""
        if not keys:
            return set()
        with open_connection(self.path, read_only=True) as connection:
            rows = connection.execute(
                f"SELECT DISTINCT r.key FROM responses r JOIN ({_KEYS_TABLE}) wanted"
                " ON r.key = wanted.key",
                {"keys": _key_list(keys)},
            ).fetchall()
        return {row[0] for row in rows}

    def lookup(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        """Cached responses by key. The raw provider body stays in the file (for audit) and
        is not loaded: nothing downstream reads it, and parsing it dominates a warm run."""
        if not keys:
            return {}
        with open_connection(self.path, read_only=True) as connection:
            # Newest first, so that of two rows of one key the earliest is assigned last.
            rows = connection.execute(
                "SELECT r.key, r.text, r.served_model, r.stop_reason, r.input_tokens,"
                " r.output_tokens, r.latency_s, r.attempts, r.tool_calls, r.usage FROM responses r"
                f" JOIN ({_KEYS_TABLE}) wanted ON r.key = wanted.key"
                " ORDER BY r.created_at DESC",
                {"keys": _key_list(keys)},
            ).fetchall()
        return {row[0]: response_of(row) for row in rows}

    def put_many(self, items: Sequence[tuple[ModelRequest, ModelResponse]]) -> None:
        if not items:
            return
        rows = [response_row(request, response) for request, response in items]
        with open_connection(self.path) as connection:
            insert_rows(connection, "responses", COLUMNS, rows)

    def read_rows(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        """The whole stored rows of `keys` (the raw body too: what moves a cache's answers
        elsewhere), one per key stored, by `COLUMNS` name, in the order of `keys`."""
        if not keys:
            return []
        names = ", ".join(f"r.{name}" for name, _ in COLUMNS)
        with open_connection(self.path, read_only=True) as connection:
            rows = connection.execute(
                f"SELECT {names} FROM responses r JOIN ({_KEYS_TABLE}) wanted"
                " ON r.key = wanted.key ORDER BY r.created_at DESC",
                {"keys": _key_list(keys)},
            ).fetchall()
        return rows_by_key(keys, rows)

    def write_rows(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Stores whole rows (`read_rows`'s) whose keys are not stored yet, in one
        transaction; returns how many it added."""
        with open_connection(self.path) as connection:
            connection.execute("BEGIN TRANSACTION")
            try:
                wanted = [str(row["key"]) for row in rows]
                held = (
                    {
                        found[0]
                        for found in connection.execute(
                            f"SELECT DISTINCT r.key FROM responses r JOIN ({_KEYS_TABLE}) w"
                            " ON r.key = w.key",
                            {"keys": _key_list(wanted)},
                        ).fetchall()
                    }
                    if wanted
                    else set()
                )
                new = new_rows(rows, held)
                insert_rows(connection, "responses", COLUMNS, new)
                connection.execute("COMMIT")
            except BaseException:
                roll_back(connection)
                raise
        return len(new)

    def count(self) -> int:
        """Distinct request keys cached."""
        with open_connection(self.path, read_only=True) as connection:
            row = connection.execute("SELECT count(DISTINCT key) FROM responses").fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def writer(self) -> Iterator[CacheWriter]:
        writer = CacheWriter(self, journal=Journal(self.journals, response_row))
        try:
            yield writer
        finally:
            writer.close()

    def batch_store(self) -> BatchStore:
        """The provider batches recorded beside the responses (`run --batch`)."""
        return BatchStore(self.path)

    def exec_cache(self) -> ExecCache:
        """The code scorer's executions: a SQLite file beside the DuckDB file."""
        return ExecCache(exec_cache_path(self.path))

    def claims(self) -> FileClaims:
        """Claims of the runs sharing the file, in a SQLite file beside it
        (`<file>.claims.sqlite`: `claims.FileClaims`)."""
        return FileClaims(claims_path(self.path))


def _drop_key_constraint(connection: Any) -> None:
    """Rewrites a table of the keyed format as the log: the rows stay, the index goes.
    DuckDB cannot drop a PRIMARY KEY in place, so the table is copied, in one transaction."""
    row = connection.execute(_HAS_KEY_CONSTRAINT).fetchone()
    if not row or not row[0]:
        return
    connection.execute("BEGIN TRANSACTION")
    try:
        connection.execute(SCHEMA.format(table="responses_log"))
        # The keyed format predates tool calls and usage: its columns, by name.
        old = [name for name, _ in COLUMNS if name not in ("tool_calls", "usage")]
        columns = ", ".join([*old, "created_at"])
        connection.execute(f"INSERT INTO responses_log ({columns}) SELECT {columns} FROM responses")
        connection.execute("DROP TABLE responses")
        connection.execute("ALTER TABLE responses_log RENAME TO responses")
        connection.execute("COMMIT")
    except BaseException:
        roll_back(connection)
        raise
