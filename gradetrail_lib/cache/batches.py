"""The provider batches a cache's runs submitted, kept in the cache's database so that no
request sent by batch is ever paid for twice.

Two tables beside `responses`: `batches` (one row per submission: provider, endpoint,
where its model is, the provider's batch id once known, its state and the provider's
counts, who claimed it and when) and `batch_keys` (the request keys a submission
carries, and for each what its batch answered when that was not an answer: an error, or
not run because the batch expired or was cancelled).

A run claims its requests before it uploads them: one transaction finds which of its
keys a recorded batch already carries (those it adopts: polls and reads that batch
instead) and records a claim on the rest, under a fresh submission id. The id goes to
the provider with the batch where the API keeps metadata, so a run killed between the
upload and recording the batch id finds the batch again rather than sending its
requests a second time. Answers themselves go to `responses` as they are read; a batch's
results can be read again (free) when a run was killed before they were all stored.
"""

import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail_lib.cache.claims import process_alive
from gradetrail_lib.cache.duckdb_file import open_connection, schema_changes
from gradetrail_lib.cache.rollback import roll_back

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    submission VARCHAR NOT NULL,
    provider VARCHAR NOT NULL,
    endpoint VARCHAR NOT NULL,
    base_url VARCHAR NOT NULL,
    model VARCHAR NOT NULL,
    api_key_env VARCHAR,
    settings VARCHAR NOT NULL,
    batch_id VARCHAR,
    state VARCHAR NOT NULL,
    total INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    owner VARCHAR NOT NULL,
    claimed_at DOUBLE NOT NULL,
    updated_at DOUBLE NOT NULL,
    read_at DOUBLE
);
CREATE TABLE IF NOT EXISTS batch_keys (
    submission VARCHAR NOT NULL,
    key VARCHAR NOT NULL,
    outcome VARCHAR
);
"""

# A claim whose batch id is not recorded: its owner is uploading it, or died doing so.
CLAIMED = "claimed"
# A claim the provider never received (its owner died before the upload): its keys are
# free again.
ABANDONED = "abandoned"
# States in which a batch answers nothing more: `failed` answered nothing at all.
_DONE_FOR_GOOD = (ABANDONED, "failed")

# What `batch_keys.outcome` says of a key its batch did not answer.
ERROR, NOT_RUN = "error", "not_run"

# A claim without a batch id whose owner cannot be asked (another host) is taken over
# after this long: an upload takes seconds, not this.
STALE_CLAIM_S = 600.0

_COLUMNS = (
    "submission, provider, endpoint, base_url, model, api_key_env, settings, batch_id,"
    " state, total, done, failed, owner, claimed_at, updated_at, read_at"
)


@dataclass(frozen=True, kw_only=True)
class BatchRecord:
    """A row of `batches`."""

    submission: str
    provider: str
    endpoint: str
    base_url: str
    model: str
    api_key_env: str | None
    settings: tuple[tuple[str, str], ...]
    batch_id: str | None
    state: str
    total: int
    done: int
    failed: int
    owner: str
    claimed_at: float
    updated_at: float
    read_at: float | None

    @property
    def owner_gone(self) -> bool:
        """Whether the process that claimed it is no longer running (so nobody is about
        to record its batch id)."""
        host, _, pid = self.owner.rpartition(":")
        if host != socket.gethostname():
            return time.time() - self.claimed_at > STALE_CLAIM_S
        return not process_alive(int(pid))


@dataclass(frozen=True, kw_only=True)
class NewBatch:
    """A claim to record: where its requests go and their keys."""

    provider: str
    endpoint: str
    base_url: str
    model: str
    api_key_env: str | None
    settings: tuple[tuple[str, str], ...]
    keys: Sequence[str]


@dataclass(frozen=True)
class Claim:
    """What a claim found: recorded batches carrying some of the keys (to adopt), and the
    new claims on the rest (to submit)."""

    adopted: list[BatchRecord]
    claimed: list[tuple[BatchRecord, list[str]]]


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _record(row: tuple[Any, ...]) -> BatchRecord:
    (submission, provider, endpoint, base_url, model, key_env, settings, batch_id, state,
     total, done, failed, owner, claimed_at, updated_at, read_at) = row  # fmt: skip
    return BatchRecord(
        submission=submission,
        provider=provider,
        endpoint=endpoint,
        base_url=base_url,
        model=model,
        api_key_env=key_env,
        settings=tuple((str(k), str(v)) for k, v in json.loads(settings)),
        batch_id=batch_id,
        state=state,
        total=total,
        done=done,
        failed=failed,
        owner=owner,
        claimed_at=claimed_at,
        updated_at=updated_at,
        read_at=read_at,
    )


class BatchStore:
    """The batches of the cache file at `path` (the tables are made on first use).

    Its SQL is written once, with `?` parameters, for DuckDB and Postgres alike
    (`postgres.PostgresBatchStore` says how it connects and how its schema differs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Where it is, as messages name it.
        self.where = str(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with schema_changes(), self._transaction() as connection:
            connection.execute(SCHEMA)

    @contextmanager
    def _connection(self, read_only: bool = False) -> Iterator[Any]:
        """A connection for one statement (or several that need no transaction)."""
        with open_connection(self.path, read_only=read_only) as connection:
            yield connection

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        with open_connection(self.path) as connection:
            connection.execute("BEGIN TRANSACTION")
            try:
                yield connection
                connection.execute("COMMIT")
            except BaseException:
                roll_back(connection)
                raise

    def _sql(self, text: str) -> str:
        """`text` in the engine's parameter style (DuckDB takes `?` as written)."""
        return text

    def _serialize_claims(self, connection: Any) -> None:
        """Makes concurrent claims take turns (a DuckDB file has one writer at a time)."""

    def _run(self, connection: Any, text: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of one statement (none for a statement that returns none)."""
        cursor = connection.execute(self._sql(text), list(params))
        return list(cursor.fetchall()) if cursor.description is not None else []

    def claim(self, keys: Sequence[str], plan: Callable[[list[str]], list[NewBatch]]) -> Claim:
        """In one transaction: the recorded batches that carry some of `keys` unanswered
        (not failed, not abandoned, the key neither an error nor unrun there), and new
        claims, `plan(free keys)`, on the keys none carries."""
        wanted = list(dict.fromkeys(keys))
        live = (
            " JOIN (SELECT DISTINCT unnest(?::VARCHAR[]) AS key) w ON w.key = k.key"
            " WHERE k.outcome IS NULL AND b.state NOT IN (?, ?)"
        )
        with self._transaction() as connection:
            self._serialize_claims(connection)
            rows = self._run(
                connection,
                f"SELECT DISTINCT b.{_COLUMNS.replace(', ', ', b.')} FROM batches b"
                " JOIN batch_keys k ON k.submission = b.submission" + live,
                [wanted, *_DONE_FOR_GOOD],
            )
            adopted = sorted((_record(r) for r in rows), key=lambda r: r.submission)
            carried = {
                r[0]
                for r in self._run(
                    connection,
                    "SELECT DISTINCT k.key FROM batch_keys k"
                    " JOIN batches b ON k.submission = b.submission" + live,
                    [wanted, *_DONE_FOR_GOOD],
                )
            }
            free = [k for k in wanted if k not in carried]
            claimed = self._insert(connection, plan(free) if free else [])
        return Claim(adopted=adopted, claimed=claimed)

    def _insert(
        self, connection: Any, batches: list[NewBatch]
    ) -> list[tuple[BatchRecord, list[str]]]:
        out = []
        now, owner = time.time(), owner_id()
        for batch in batches:
            record = BatchRecord(
                submission=f"gt-{uuid.uuid4().hex}",
                provider=batch.provider,
                endpoint=batch.endpoint,
                base_url=batch.base_url,
                model=batch.model,
                api_key_env=batch.api_key_env,
                settings=batch.settings,
                batch_id=None,
                state=CLAIMED,
                total=len(batch.keys),
                done=0,
                failed=0,
                owner=owner,
                claimed_at=now,
                updated_at=now,
                read_at=None,
            )
            self._run(
                connection,
                f"INSERT INTO batches ({_COLUMNS}) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, 0, 0, ?, ?, ?, NULL)",
                [
                    record.submission, record.provider, record.endpoint, record.base_url,
                    record.model, record.api_key_env, json.dumps(list(record.settings)),
                    CLAIMED, record.total, owner, now, now,
                ],
            )  # fmt: skip
            self._run(
                connection,
                "INSERT INTO batch_keys (submission, key) SELECT ?, unnest(?::VARCHAR[])",
                [record.submission, list(batch.keys)],
            )
            out.append((record, list(batch.keys)))
        return out

    def _write(self, text: str, params: Sequence[Any]) -> None:
        with self._connection() as connection:
            self._run(connection, text, params)

    def submitted(self, submission: str, batch_id: str) -> None:
        """The provider took the claim's batch: its id, recorded before any poll."""
        self._write(
            "UPDATE batches SET batch_id = ?, state = 'running', updated_at = ?"
            " WHERE submission = ?",
            [batch_id, time.time(), submission],
        )

    def update(self, submission: str, *, state: str, total: int, done: int, failed: int) -> None:
        self._write(
            "UPDATE batches SET state = ?, total = ?, done = ?, failed = ?, updated_at = ?"
            " WHERE submission = ?",
            [state, total, done, failed, time.time(), submission],
        )

    def abandon(self, submission: str) -> None:
        """The claim never reached the provider: its keys are free for another."""
        self._write(
            "UPDATE batches SET state = ?, updated_at = ? WHERE submission = ?",
            [ABANDONED, time.time(), submission],
        )

    def read(self, submission: str, outcomes: dict[str, str]) -> None:
        """The batch's results were read: `outcomes` are its keys that got no answer
        (ERROR, NOT_RUN), which a later run sends again."""
        with self._transaction() as connection:
            for outcome in (ERROR, NOT_RUN):
                keys = [k for k, v in outcomes.items() if v == outcome]
                if keys:
                    self._run(
                        connection,
                        "UPDATE batch_keys SET outcome = ? WHERE submission = ?"
                        " AND key IN (SELECT unnest(?::VARCHAR[]))",
                        [outcome, submission, keys],
                    )
            self._run(
                connection,
                "UPDATE batches SET read_at = ? WHERE submission = ?",
                [time.time(), submission],
            )

    def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._connection(read_only=True) as connection:
            return self._run(connection, text, params)

    def get(self, submission: str) -> BatchRecord | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM batches WHERE submission = ?", [submission])
        return _record(rows[0]) if rows else None

    def find(self, batch_id: str) -> BatchRecord | None:
        """The batch of that provider id (or submission id)."""
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM batches WHERE batch_id = ? OR submission = ?",
            [batch_id, batch_id],
        )
        return _record(rows[0]) if rows else None

    def all(self) -> list[BatchRecord]:
        rows = self._rows(f"SELECT {_COLUMNS} FROM batches ORDER BY claimed_at, submission")
        return [_record(r) for r in rows]

    def keys(self, submission: str) -> list[str]:
        rows = self._rows("SELECT key FROM batch_keys WHERE submission = ?", [submission])
        return [r[0] for r in rows]

    def batch_ids(self) -> frozenset[str]:
        rows = self._rows("SELECT batch_id FROM batches WHERE batch_id IS NOT NULL")
        return frozenset(r[0] for r in rows)
