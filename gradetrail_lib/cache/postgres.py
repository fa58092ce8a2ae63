"""The response cache in Postgres (`--cache postgresql://...`): what a team shares.

The same interface as the DuckDB file (`responses.ResponseCache`), on a server that many
processes and machines write at once. The differences, and why:

- `responses` is keyed (PRIMARY KEY on the request key) and written with `INSERT ... ON
  CONFLICT DO NOTHING`: two runs that both paid for one request store it once, the first
  stored wins (as the DuckDB log's earliest row does), and a lookup reads one row per key
  through the index. (DuckDB's log dropped its key for write cost in an embedded file;
  Postgres keeps a B-tree for this cheaply.)
- A burst's rows are written sorted by key: two writers inserting overlapping keys in
  different orders would each wait on the other's uncommitted row (a deadlock).
- Lookups go by chunks of keys (`key = ANY(%s)`), each one round trip through the index.
- Connections come from one pool per server URL and process (`psycopg_pool`): the burst
  writer, lookups, the batch records and the code scorer's threads share it.
- An answer is journaled the moment it arrives (`journal`), in a folder of this machine's
  for the database (`journal_folder`): a killed run's answers waiting for their burst
  reach the database when this machine next opens it.
- Creating the tables takes an advisory lock: N processes starting at once against an
  empty database would otherwise race in `CREATE TABLE IF NOT EXISTS` (which is not
  atomic in Postgres) and all but one fail.

psycopg is an optional extra (`pip install 'gradetrail[postgres]'`), imported only here
and only when a Postgres cache is opened.
"""

import atexit
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradetrail_lib.cache.batches import BatchStore
from gradetrail_lib.cache.bursts import CacheWriter
from gradetrail_lib.cache.claims import DEFAULT_TTL_S
from gradetrail_lib.cache.journal import Journal, replay
from gradetrail_lib.cache.responses import (
    COLUMN_NAMES,
    COLUMNS,
    LOOKUP_COLUMNS,
    new_rows,
    response_of,
    response_row,
    rows_by_key,
)
from gradetrail_lib.cache.urls import password_of, without_password
from gradetrail_lib.errors import GradetrailError, UsageError
from gradetrail_lib.providers.base import ModelRequest, ModelResponse
from gradetrail_lib.sandbox import Execution

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

INSTALL_HINT = "pip install 'gradetrail[postgres]'"

RESPONSES_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    served_model TEXT,
    text TEXT NOT NULL,
    stop_reason TEXT NOT NULL,
    input_tokens BIGINT,
    output_tokens BIGINT,
    latency_s DOUBLE PRECISION NOT NULL,
    attempts INTEGER NOT NULL,
    raw TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    tool_calls TEXT,
    usage TEXT
)
"""

# Step 11's batch records (`batches.SCHEMA`), with Postgres's types and keys.
BATCH_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS batches (
    submission TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    base_url TEXT NOT NULL,
    model TEXT NOT NULL,
    api_key_env TEXT,
    settings TEXT NOT NULL,
    batch_id TEXT,
    state TEXT NOT NULL,
    total INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    owner TEXT NOT NULL,
    claimed_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    read_at DOUBLE PRECISION
)""",
    """
CREATE TABLE IF NOT EXISTS batch_keys (
    submission TEXT NOT NULL REFERENCES batches (submission),
    key TEXT NOT NULL,
    outcome TEXT,
    PRIMARY KEY (submission, key)
)""",
    "CREATE INDEX IF NOT EXISTS batch_keys_key ON batch_keys (key)",
)

EXECUTIONS_SCHEMA = "CREATE TABLE IF NOT EXISTS executions (key TEXT PRIMARY KEY, value TEXT)"
# Who is sending a request now, until when (gradetrail_lib.cache.claims).
CLAIMS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, owner TEXT NOT NULL, "
    "expires_at TIMESTAMPTZ NOT NULL)"
)

# Arbitrary constants naming gradetrail's advisory locks (one namespace per database).
_SCHEMA_LOCK = 0x67740001
_CLAIM_LOCK = 0x67740002

# Keys per lookup statement: one round trip each, bounded so that a 100,000-sample run
# neither builds one huge array parameter nor one huge result in the server's memory.
LOOKUP_CHUNK = 10_000

# The columns a write fills (`responses.COLUMNS`, `response_row`'s order) in Postgres's
# types.
_PG_TYPES = {"VARCHAR": "text", "BIGINT": "bigint", "DOUBLE": "double precision"}
_WRITE_COLUMNS = [(name, _PG_TYPES.get(kind, kind.lower())) for name, kind in COLUMNS]

_INSERT = (
    f"INSERT INTO responses ({', '.join(name for name, _ in _WRITE_COLUMNS)})"
    f" SELECT * FROM unnest({', '.join(f'%s::{kind}[]' for _, kind in _WRITE_COLUMNS)})"
    " ON CONFLICT (key) DO NOTHING"
)

# Postgres's text type cannot hold NUL, which a model's answer may still contain (and a
# burst holding one would fail whole). Such a text, and any text that starts with the
# marker so that the mapping stays one to one, is stored as the marker and its JSON
# string, and read back as it was. Only the columns a provider's text reaches are
# marked: the others hold JSON (which escapes NUL) or names from the spec.
_MARKER = "\x01gradetrail-json:"
_NAMES = [name for name, _ in COLUMNS]
_MARKED = [_NAMES.index(name) for name in ("served_model", "text", "stop_reason")]
_MARKED_IN_LOOKUP = [1, 2, 3]  # text, served_model, stop_reason in LOOKUP_COLUMNS


def _stored(row: list[Any]) -> list[Any]:
    for at in _MARKED:
        value = row[at]
        if isinstance(value, str) and ("\x00" in value or value.startswith(_MARKER)):
            row[at] = _MARKER + json.dumps(value)
    return row


def _read(row: Sequence[Any], marked: Sequence[int]) -> Sequence[Any]:
    if not any(isinstance(row[at], str) and row[at].startswith(_MARKER) for at in marked):
        return row
    out = list(row)
    for at in marked:
        if isinstance(out[at], str) and out[at].startswith(_MARKER):
            out[at] = json.loads(out[at][len(_MARKER) :])
    return out


# Connections each process keeps to one server at most: the writer, a lookup, the batch
# records and a few code-scorer threads at once.
POOL_MAX = 8


class _Pools:
    """One connection pool per (process, URL): every cache object of a URL shares it, so
    a Dagster resource opening the cache per step does not open connections per step.
    Keyed by process too, since a forked child cannot use its parent's connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[tuple[int, str], ConnectionPool] = {}

    def get(self, url: str) -> "ConnectionPool":
        from psycopg_pool import ConnectionPool

        with self._lock:
            key = (os.getpid(), url)
            pool = self._pools.get(key)
            if pool is None:
                # Idle connections close after a minute: a long Dagster process keeps none.
                pool = ConnectionPool(
                    url,
                    min_size=0,
                    max_size=POOL_MAX,
                    max_idle=60.0,
                    kwargs={"autocommit": True},
                    open=True,
                    name="gradetrail-cache",
                )
                self._pools[key] = pool
            return pool

    def close_all(self) -> None:
        with self._lock:
            pools = [p for (pid, _), p in self._pools.items() if pid == os.getpid()]
            self._pools.clear()
        for pool in pools:
            pool.close()


_POOLS = _Pools()
atexit.register(_POOLS.close_all)


def close_pools() -> None:
    """Closes this process's connections to every server (tests; the process's exit)."""
    _POOLS.close_all()


def _import_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"a postgresql:// cache needs psycopg, which is not installed: {INSTALL_HINT}"
        ) from exc


class PostgresDatabase:
    """A Postgres database at `url`, its tables (`schema`, statements run once per
    object) made on first use, its connections from this process's pool for the URL.
    `where` names it in messages, its password left out (`location.redact`); `what` says
    what it holds ("the cache", "the history"). The cache, the run history and Dagster's
    tables share this, so they share one pool per server too."""

    def __init__(self, url: str, *, where: str, schema: Sequence[str], what: str) -> None:
        _import_psycopg()
        self._url = url
        self.where = where
        self._what = what
        self._make_tables(schema)
        self._pool = _POOLS.get(url)

    def _make_tables(self, schema: Sequence[str]) -> None:
        """On a connection of its own rather than the pool's: a wrong URL, host or
        password fails here at once, with libpq's reason (the pool would retry in the
        background until its timeout)."""
        import psycopg

        try:
            connect = psycopg.connect(self._url, autocommit=True, connect_timeout=10)
            with connect as connection, connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s)", [_SCHEMA_LOCK])
                for statement in schema:
                    connection.execute(statement)
        except psycopg.Error as exc:
            raise GradetrailError(
                f"{self.where}: cannot open {self._what}: {self.scrub(exc)}"
            ) from None

    def scrub(self, exc: BaseException) -> str:
        """The error's text, the URL's password left out."""
        return _scrub(exc, self._url)

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection (autocommit; `connection.transaction()` for several
        statements at once); errors name the server without its password."""
        import psycopg
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as connection:
                yield connection
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise GradetrailError(
                f"{self.where}: cannot use the database: {self.scrub(exc)}"
            ) from None


def journal_folder(where: str) -> Path:
    """This machine's journal folder for the database named `where` (its URL without a
    password): under `$XDG_CACHE_HOME` (default `~/.cache`), named by a hash of `where`."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(where.encode()).hexdigest()[:16]
    return Path(base) / "gradetrail" / "journals" / digest


class PostgresCache(PostgresDatabase):
    """Responses in the Postgres database at `url` (tables made on first use). `where`
    names it in messages, its password left out (`location.redact`)."""

    def __init__(self, url: str, *, where: str) -> None:
        schema = [RESPONSES_SCHEMA, *BATCH_SCHEMA, EXECUTIONS_SCHEMA, CLAIMS_SCHEMA]
        super().__init__(url, where=where, schema=schema, what="the cache")
        # As a run's manifest records it: the URL without its password, which libpq
        # then reads from PGPASSWORD or ~/.pgpass as it did for the run.
        self.location = without_password(url)
        self.journals = journal_folder(where)
        # What a killed writer had not stored. A home folder this process cannot write
        # (a locked-down container) leaves the journal out rather than the cache.
        with suppress(OSError):
            replay(self.journals, self, COLUMN_NAMES)

    def cached_keys(self, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        with self.connection() as connection:
            for chunk in _chunks(keys):
                rows = connection.execute(
                    "SELECT key FROM responses WHERE key = ANY(%s)", [chunk]
                ).fetchall()
                found.update(row[0] for row in rows)
        return found

    def lookup(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        """Stored responses by key, without the raw provider body (as the DuckDB file's)."""
        found: dict[str, ModelResponse] = {}
        with self.connection() as connection:
            for chunk in _chunks(keys):
                rows = connection.execute(
                    f"SELECT {LOOKUP_COLUMNS} FROM responses WHERE key = ANY(%s)", [chunk]
                ).fetchall()
                for row in rows:
                    found[row[0]] = response_of(_read(row, _MARKED_IN_LOOKUP))
        return found

    def put_many(self, items: Sequence[tuple[ModelRequest, ModelResponse]]) -> None:
        """Stores `items` in one statement; a key already stored keeps its first answer."""
        if not items:
            return
        rows: dict[str, tuple[ModelRequest, ModelResponse]] = {}
        for request, response in items:  # the first of a key in the burst, as stored
            rows.setdefault(request.key, (request, response))
        ordered = [_stored(response_row(*rows[key])) for key in sorted(rows)]
        arrays = [list(column) for column in zip(*ordered, strict=True)]
        with self.connection() as connection:
            connection.execute(_INSERT, arrays)

    def read_rows(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        """The whole stored rows of `keys` (`ResponseCache.read_rows`)."""
        names = ", ".join(name for name, _ in COLUMNS)
        rows: list[Any] = []
        with self.connection() as connection:
            for chunk in _chunks(keys):
                rows += connection.execute(
                    f"SELECT {names} FROM responses WHERE key = ANY(%s)", [chunk]
                ).fetchall()
        return rows_by_key(keys, [_read(row, _MARKED) for row in rows])

    def write_rows(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Stores whole rows whose keys are not stored yet; returns how many it added."""
        new = sorted(map(_stored, new_rows(rows, ())), key=lambda row: row[0])  # no deadlock
        if not new:
            return 0
        arrays = [list(column) for column in zip(*new, strict=True)]
        with self.connection() as connection:
            added = connection.execute(_INSERT + " RETURNING key", arrays).fetchall()
        return len(added)

    def count(self) -> int:
        with self.connection() as connection:
            row = connection.execute("SELECT count(*) FROM responses").fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def writer(self) -> Iterator[CacheWriter]:
        try:
            journal: Journal | None = Journal(self.journals, response_row)
        except OSError:  # no writable home folder: the bursts' bounded delay only
            journal = None
        writer = CacheWriter(self, journal=journal)
        try:
            yield writer
        finally:
            writer.close()

    def batch_store(self) -> "PostgresBatchStore":
        return PostgresBatchStore(self)

    def exec_cache(self) -> "PostgresExecCache":
        return PostgresExecCache(self)

    def claims(self) -> "PostgresClaims":
        return PostgresClaims(self)


class PostgresClaims:
    """Claims in the cache's `claims` table (`gradetrail_lib.cache.claims`): a row per
    claimed key with its owner and expiry, taken with `INSERT ... ON CONFLICT DO UPDATE
    ... WHERE` the old claim expired (or is this owner's), so of runs claiming a key at
    once exactly one gets it. Times are the server's (`now()`), not the machines'."""

    def __init__(self, cache: PostgresCache, ttl_s: float = DEFAULT_TTL_S) -> None:
        self._cache = cache
        self._ttl_s = ttl_s
        self.owner = uuid.uuid4().hex

    @property
    def ttl_s(self) -> float:
        return self._ttl_s

    def claim(self, keys: Sequence[str]) -> set[str]:
        held: set[str] = set()
        with self._cache.connection() as connection:
            for chunk in _chunks(sorted(keys)):
                rows = connection.execute(
                    "INSERT INTO claims (key, owner, expires_at) "
                    "SELECT k, %s, now() + make_interval(secs => %s) FROM unnest(%s::text[]) k "
                    "ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, "
                    "expires_at = EXCLUDED.expires_at "
                    "WHERE claims.expires_at < now() OR claims.owner = EXCLUDED.owner "
                    "RETURNING key",
                    [self.owner, self._ttl_s, chunk],
                ).fetchall()
                held.update(row[0] for row in rows)
        return held

    def renew(self) -> None:
        with self._cache.connection() as connection:
            connection.execute(
                "UPDATE claims SET expires_at = now() + make_interval(secs => %s) WHERE owner = %s",
                [self._ttl_s, self.owner],
            )

    def release(self, keys: Sequence[str] | None = None) -> None:
        with self._cache.connection() as connection:
            if keys is None:
                connection.execute("DELETE FROM claims WHERE owner = %s", [self.owner])
                return
            for chunk in _chunks(sorted(keys)):
                connection.execute(
                    "DELETE FROM claims WHERE owner = %s AND key = ANY(%s::text[])",
                    [self.owner, chunk],
                )


def _chunks(keys: Sequence[str]) -> Iterator[list[str]]:
    distinct = list(dict.fromkeys(keys))
    for start in range(0, len(distinct), LOOKUP_CHUNK):
        yield distinct[start : start + LOOKUP_CHUNK]


def _scrub(exc: BaseException, url: str) -> str:
    """The error's text without the URL's password (libpq's messages do not repeat it,
    but a message is no place to find out)."""
    text = str(exc).strip()
    secret = password_of(url)
    return text.replace(secret, "***") if secret else text


class PostgresBatchStore(BatchStore):
    """Step 11's batch records in the cache's Postgres database (`batches.BatchStore`'s
    SQL, with psycopg's `%s` parameters). Claims take turns through an advisory lock held
    to the end of the claim's transaction, as a DuckDB file's single writer made them."""

    def __init__(self, cache: PostgresCache) -> None:  # the tables: PostgresCache's
        self._cache = cache
        self.where = cache.where

    @contextmanager
    def _connection(self, read_only: bool = False) -> Iterator[Any]:
        with self._cache.connection() as connection:
            yield connection

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with self._cache.connection() as connection, connection.transaction():
            yield connection

    def _sql(self, text: str) -> str:
        return text.replace("?", "%s")

    def _serialize_claims(self, connection: Any) -> None:
        connection.execute("SELECT pg_advisory_xact_lock(%s)", [_CLAIM_LOCK])


class PostgresExecCache:
    """The code scorer's executions by key in the cache's Postgres database, so every
    machine sharing the cache skips a program any of them ran (`executions.ExecCache`'s
    interface; the SQLite file has no place beside a server)."""

    def __init__(self, cache: PostgresCache) -> None:
        self._cache = cache

    def get(self, key: str) -> Execution | None:
        with self._cache.connection() as connection:
            row = connection.execute(
                "SELECT value FROM executions WHERE key = %s", [key]
            ).fetchone()
        if row is None:
            return None
        fields: dict[str, Any] = json.loads(row[0])
        return Execution(**fields)

    def put(self, key: str, execution: Execution) -> None:
        with self._cache.connection() as connection:
            connection.execute(
                "INSERT INTO executions (key, value) VALUES (%s, %s)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, json.dumps(asdict(execution))],
            )
