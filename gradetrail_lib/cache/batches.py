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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail_lib.cache.duckdb_file import open_connection
from gradetrail_lib.cache.duckdb_rows import insert_rows

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
        return not _alive(int(pid))


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


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


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
    """The batches of the cache file at `path` (the tables are made on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with open_connection(path) as connection:
            connection.execute(SCHEMA)

    def claim(self, keys: Sequence[str], plan: Callable[[list[str]], list[NewBatch]]) -> Claim:
        """In one transaction: the recorded batches that carry some of `keys` unanswered
        (not failed, not abandoned, the key neither an error nor unrun there), and new
        claims, `plan(free keys)`, on the keys none carries."""
        with open_connection(self.path) as connection:
            connection.execute("BEGIN TRANSACTION")
            try:
                connection.execute("CREATE TEMP TABLE IF NOT EXISTS wanted_keys (key VARCHAR)")
                connection.execute("DELETE FROM wanted_keys")
                insert_rows(connection, "wanted_keys", [("key", "VARCHAR")], [[k] for k in keys])
                rows = connection.execute(
                    f"SELECT DISTINCT b.{_COLUMNS.replace(', ', ', b.')} FROM batches b"
                    " JOIN batch_keys k ON k.submission = b.submission"
                    " JOIN wanted_keys w ON w.key = k.key"
                    " WHERE k.outcome IS NULL AND b.state NOT IN ($1, $2)",
                    list(_DONE_FOR_GOOD),
                ).fetchall()
                adopted = [_record(r) for r in rows]
                carried = {
                    r[0]
                    for r in connection.execute(
                        "SELECT DISTINCT k.key FROM batch_keys k"
                        " JOIN batches b ON k.submission = b.submission"
                        " JOIN wanted_keys w ON w.key = k.key"
                        " WHERE k.outcome IS NULL AND b.state NOT IN ($1, $2)",
                        list(_DONE_FOR_GOOD),
                    ).fetchall()
                }
                free = [k for k in dict.fromkeys(keys) if k not in carried]
                claimed = self._insert(connection, plan(free) if free else [])
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        return Claim(adopted=adopted, claimed=claimed)

    @staticmethod
    def _insert(connection: Any, batches: list[NewBatch]) -> list[tuple[BatchRecord, list[str]]]:
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
            connection.execute(
                f"INSERT INTO batches ({_COLUMNS}) VALUES"
                " (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, 0, 0, ?, ?, ?, NULL)",
                [
                    record.submission, record.provider, record.endpoint, record.base_url,
                    record.model, record.api_key_env, json.dumps(list(record.settings)),
                    CLAIMED, record.total, owner, now, now,
                ],
            )  # fmt: skip
            insert_rows(
                connection,
                "batch_keys",
                [("submission", "VARCHAR"), ("key", "VARCHAR")],
                [[record.submission, key] for key in batch.keys],
            )
            out.append((record, list(batch.keys)))
        return out

    def submitted(self, submission: str, batch_id: str) -> None:
        """The provider took the claim's batch: its id, recorded before any poll."""
        with open_connection(self.path) as connection:
            connection.execute(
                "UPDATE batches SET batch_id = ?, state = 'running', updated_at = ?"
                " WHERE submission = ?",
                [batch_id, time.time(), submission],
            )

    def update(self, submission: str, *, state: str, total: int, done: int, failed: int) -> None:
        with open_connection(self.path) as connection:
            connection.execute(
                "UPDATE batches SET state = ?, total = ?, done = ?, failed = ?, updated_at = ?"
                " WHERE submission = ?",
                [state, total, done, failed, time.time(), submission],
            )

    def abandon(self, submission: str) -> None:
        """The claim never reached the provider: its keys are free for another."""
        with open_connection(self.path) as connection:
            connection.execute(
                "UPDATE batches SET state = ?, updated_at = ? WHERE submission = ?",
                [ABANDONED, time.time(), submission],
            )

    def read(self, submission: str, outcomes: dict[str, str]) -> None:
        """The batch's results were read: `outcomes` are its keys that got no answer
        (ERROR, NOT_RUN), which a later run sends again."""
        with open_connection(self.path) as connection:
            connection.execute("BEGIN TRANSACTION")
            for outcome in (ERROR, NOT_RUN):
                keys = [k for k, v in outcomes.items() if v == outcome]
                if keys:
                    connection.execute(
                        "UPDATE batch_keys SET outcome = $1 WHERE submission = $2"
                        " AND key IN (SELECT unnest($3::VARCHAR[]))",
                        [outcome, submission, keys],
                    )
            connection.execute(
                "UPDATE batches SET read_at = ? WHERE submission = ?", [time.time(), submission]
            )
            connection.execute("COMMIT")

    def get(self, submission: str) -> BatchRecord | None:
        with open_connection(self.path, read_only=True) as connection:
            row = connection.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE submission = ?", [submission]
            ).fetchone()
        return _record(row) if row else None

    def find(self, batch_id: str) -> BatchRecord | None:
        """The batch of that provider id (or submission id)."""
        with open_connection(self.path, read_only=True) as connection:
            row = connection.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE batch_id = $1 OR submission = $1",
                [batch_id],
            ).fetchone()
        return _record(row) if row else None

    def all(self) -> list[BatchRecord]:
        with open_connection(self.path, read_only=True) as connection:
            rows = connection.execute(
                f"SELECT {_COLUMNS} FROM batches ORDER BY claimed_at, submission"
            ).fetchall()
        return [_record(r) for r in rows]

    def keys(self, submission: str) -> list[str]:
        with open_connection(self.path, read_only=True) as connection:
            rows = connection.execute(
                "SELECT key FROM batch_keys WHERE submission = ?", [submission]
            ).fetchall()
        return [r[0] for r in rows]

    def batch_ids(self) -> frozenset[str]:
        with open_connection(self.path, read_only=True) as connection:
            rows = connection.execute(
                "SELECT batch_id FROM batches WHERE batch_id IS NOT NULL"
            ).fetchall()
        return frozenset(r[0] for r in rows)
