"""Portable response bundles: the answers some runs' records reference, out of one cache
into a Parquet file, and out of that file into any other cache (docs/bundles.md).

A bundle is one Parquet file: a row per response, the cache's whole row (`COLUMNS`, the
provider's raw body too) in key order, and in the file's key/value metadata a manifest
(`BundleManifest`: the request keys, how many answers of each kind, the runs they came
from with their identities, and the sha256 of the rows in canonical form) and the sha256
of the whole file (taken with that value's own 64 characters as zeros). Every byte of
the file is covered: any change is refused, before the file is parsed at all (so
DuckDB's Parquet reader never sees a damaged footer).

Nothing is written on bad input. An export is written to a temporary file beside its
destination, read back through the import's verification and renamed into place, so a
failed one leaves no partial bundle. An import verifies the whole file first (the file's
sha256; then the manifest, the columns and their types, the counts, every key's form,
order and uniqueness, the required fields, the JSON columns, the rows against the
content's sha256: what a bundle made by other means, its checksum recomputed, must pass
too) and only then opens the cache (a refused import creates no cache file) and adds the
rows whose keys the cache lacks, in one transaction (DuckDB) or one statement (Postgres).

The cache keeps a request's key, not the request, so a key cannot be checked against a
hash of its request here; it is checked for a request key's form (a sha256 in hex). The
checksums find damage, not tampering: whoever edits a bundle can recompute them.
"""

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal, Protocol

import duckdb
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gradetrail_lib._version import __version__
from gradetrail_lib.cache.duckdb_rows import insert_rows
from gradetrail_lib.cache.location import CacheLocation, open_cache, parse_location
from gradetrail_lib.cache.responses import COLUMNS
from gradetrail_lib.errors import (
    FIELD_WORDS,
    InputError,
    UsageError,
    first_of,
    indexed,
    input_errors,
)
from gradetrail_lib.hashing import canonical_json
from gradetrail_lib.results.runs import Run
from gradetrail_lib.results.trace import TraceRecord

FORMAT: Literal["gradetrail-bundle"] = "gradetrail-bundle"
VERSION = 1
# The Parquet key/value metadata's keys: the manifest (JSON), and the file's sha256.
MANIFEST_KEY = "gradetrail_bundle"
FILE_SHA_KEY = "gradetrail_bundle_sha256"
# The file's sha256 is taken with its own value as these 64 bytes.
_UNSEALED = b"0" * 64
_PARQUET_MAGIC = b"PAR1"
_HEX_DIGEST = re.compile(rb"[0-9a-f]{64}")

# What a referenced answer was asked for: a target's answer, a judge's grading, or a step
# of an agent's trajectory (an agent's target calls are its steps: counted as steps).
Kind = Literal["target", "judge", "agent_step"]
KINDS: tuple[Kind, ...] = ("target", "judge", "agent_step")

NAMES = [name for name, _ in COLUMNS]
# The columns a cache row never leaves empty (`responses.SCHEMA`'s NOT NULL).
REQUIRED = ("key", "provider", "model", "text", "stop_reason", "latency_s", "attempts", "raw")
_KEY = re.compile(r"^[0-9a-f]{64}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BundleRun(_Model):
    """A run whose records the bundle answers: its identity, what it ran, its directory's
    name, and how many distinct answers of each kind its records reference."""

    identity: str
    spec: str
    model: str
    run_dir: str
    records: int = Field(ge=0)
    responses: dict[Kind, int]


class BundleManifest(_Model):
    format: Literal["gradetrail-bundle"]
    version: int
    gradetrail_version: str
    # The rows' columns and their (DuckDB) types, in order.
    columns: list[tuple[str, str]]
    responses: int = Field(ge=0)
    kinds: dict[Kind, int]
    # The sha256 of the rows in canonical form, in key order (`content_sha256`).
    content_sha256: str
    keys: list[str]
    runs: list[BundleRun]


@dataclass(frozen=True)
class Bundle:
    """A verified bundle: its manifest and its rows (by column name, in key order)."""

    manifest: BundleManifest
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class Imported:
    """What an import did: the bundle's manifest, where it went, how many rows it added
    (the rest the cache had already)."""

    manifest: BundleManifest
    where: str
    added: int

    @property
    def held(self) -> int:
        return self.manifest.responses - self.added


class RowSource(Protocol):
    def read_rows(self, keys: Sequence[str]) -> list[dict[str, Any]]: ...


# -- what runs reference (pure)


def referenced_keys(records: Iterable[TraceRecord]) -> dict[str, Kind]:
    """The request keys of every answer `records` hold (a failed call has none), each
    with its kind, in the order first met."""
    keys: dict[str, Kind] = {}
    for record in records:
        for step in record.trajectory:
            if step.error is None:
                keys.setdefault(step.request_key, "agent_step")
        for call in record.calls:
            if call.error is None:
                keys.setdefault(call.request_key, call.role)
    return keys


def _counts(kinds: Iterable[Kind]) -> dict[Kind, int]:
    counts = dict.fromkeys(KINDS, 0)
    for kind in kinds:
        counts[kind] += 1
    return counts


def collect(runs: Sequence[Run]) -> tuple[dict[str, Kind], list[BundleRun]]:
    """Every key the runs' records reference (the first kind met wins), and each run as
    the manifest names it. The records are read as a stream, a run at a time."""
    keys: dict[str, Kind] = {}
    described = []
    for run in runs:
        tally = _Tally(run)
        own = referenced_keys(tally)
        for key, kind in own.items():
            keys.setdefault(key, kind)
        described.append(
            BundleRun(
                identity=run.manifest.identity,
                spec=run.manifest.spec.name,
                model=run.manifest.model.requested,
                run_dir=run.path.name if run.path is not None else "",
                records=tally.count,
                responses=_counts(own.values()),
            )
        )
    return keys, described


class _Tally:
    """Records as they are read, counted (a run's are streamed, never held)."""

    def __init__(self, records: Iterable[TraceRecord]) -> None:
        self._records = records
        self.count = 0

    def __iter__(self) -> Iterator[TraceRecord]:
        for record in self._records:
            self.count += 1
            yield record


def content_sha256(rows: Iterable[Sequence[Any]]) -> str:
    """The sha256 of rows (`COLUMNS` order, in key order), each as a line of canonical
    JSON: what the manifest promises, whatever Parquet's encoding of the values."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(canonical_json(list(row)).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def build_manifest(
    rows: Sequence[Sequence[Any]], kinds: Mapping[str, Kind], runs: Sequence[BundleRun]
) -> BundleManifest:
    """The manifest of `rows` (in key order) that answer `kinds`' keys, from `runs`."""
    keys = [str(row[0]) for row in rows]
    return BundleManifest(
        format=FORMAT,
        version=VERSION,
        gradetrail_version=__version__,
        columns=list(COLUMNS),
        responses=len(rows),
        kinds=_counts(kinds[key] for key in keys),
        content_sha256=content_sha256(rows),
        keys=keys,
        runs=list(runs),
    )


# -- export


def check_destination(out: Path) -> None:
    """A bundle can be written at `out`: its folder exists and it is no folder itself."""
    if out.is_dir():
        raise UsageError(f"{out}: is a folder; -o takes the bundle file's path")
    if not out.parent.is_dir():
        raise UsageError(f"{out}: no such folder {out.parent} (it is not created)")


def export_bundle(runs: Sequence[Run], cache: RowSource, out: Path, where: str) -> BundleManifest:
    """Writes every answer the runs' records reference, read from `cache` (named `where`
    in messages), to a bundle at `out`. Refuses, writing nothing, when the cache lacks
    one of them (the bundle would not replay the runs)."""
    check_destination(out)
    kinds, described = collect(runs)
    found = cache.read_rows(list(kinds))
    if len(found) < len(kinds):
        held = {row["key"] for row in found}
        missing = [key for key in kinds if key not in held]
        owner = next(
            (r.path for r in runs if r.path is not None and _references(r, missing[0])), None
        )
        raise UsageError(
            f"{where}: {len(missing)} of the {len(kinds)} answers the runs reference are not "
            f"in this cache (the first, {kinds[missing[0]]} answer {missing[0][:16]}…, of "
            f"{owner}); export from the cache the runs were made with (--cache)"
        )
    rows = sorted(([row.get(name) for name in NAMES] for row in found), key=lambda r: str(r[0]))
    manifest = build_manifest(rows, kinds, described)
    write_bundle(out, rows, manifest)
    return manifest


def _references(run: Run, key: str) -> bool:
    return key in referenced_keys(run)


def manifest_text(manifest: BundleManifest) -> str:
    return canonical_json(manifest.model_dump(mode="json"))


def write_bundle(out: Path, rows: Sequence[Sequence[Any]], manifest: BundleManifest) -> None:
    """`rows` (in key order) and `manifest` as a sealed Parquet file at `out`, written
    beside it under a temporary name, verified as an import verifies it, and renamed into
    place (a reader never sees half a bundle, nor one that would be refused)."""
    with _staged(out) as staging:
        write_parquet(staging, rows, manifest_text(manifest))
        read_bundle(staging)


def write_parquet(
    path: Path,
    rows: Sequence[Sequence[Any]],
    manifest: str,
    columns: Sequence[tuple[str, str]] = COLUMNS,
) -> None:
    """`rows` as a Parquet file at `path` with the `manifest` text in its metadata, and
    sealed (the file's sha256 written in), whatever they hold: `write_bundle` verifies
    the file after; the tests make bundles whose manifests lie with it."""
    metadata = {MANIFEST_KEY: manifest, FILE_SHA_KEY: _UNSEALED.decode()}
    kv = ", ".join(f"{name}: {_literal(value)}" for name, value in metadata.items())
    with _memory() as connection:
        connection.execute(f"CREATE TABLE bundle ({_columns(columns)})")
        insert_rows(connection, "bundle", columns, rows)
        connection.execute(
            f"COPY bundle TO {_literal(str(path))}"
            f" (FORMAT parquet, COMPRESSION zstd, KV_METADATA {{{kv}}})"
        )
    _seal(path)


def _seal(path: Path) -> None:
    """Writes the file's sha256 (taken as it is, with zeros for the value) in place."""
    with open(path, "r+b") as handle:
        at, value = _checksum_at(handle, str(path))
        if value != _UNSEALED:
            raise AssertionError(f"{path}: the checksum's place holds {value!r}")
        digest = _file_sha256(handle, at)
        handle.seek(at)
        handle.write(digest.encode("ascii"))


def _checksum_at(handle: BinaryIO, where: str) -> tuple[int, bytes]:
    """Where the file's sha256 is written (its offset) and what is there. Parquet ends
    with the footer (its metadata), the footer's length and `PAR1`; the key/value
    metadata come after the row groups' statistics (which may quote the data), so the
    last mention of the key in the footer is the metadata's, its value right after it."""
    size = handle.seek(0, os.SEEK_END)
    if size < 12:
        raise InputError(where, None, None, f"not a Parquet file ({size} bytes: truncated?)")
    handle.seek(size - 8)
    trailer = handle.read(8)
    if trailer[4:] != _PARQUET_MAGIC:
        raise InputError(
            where, None, None, "not a Parquet file (it does not end with PAR1: truncated?)"
        )
    length = int.from_bytes(trailer[:4], "little")
    if length > size - 12:
        raise InputError(where, None, None, "damaged or truncated (its footer is cut off)")
    start = size - 8 - length
    handle.seek(start)
    footer = handle.read(length)
    name = FILE_SHA_KEY.encode()
    found = footer.rfind(name)
    value = _HEX_DIGEST.search(footer, found + len(name), found + len(name) + 70)
    if found < 0 or value is None or value.start() - found - len(name) > 4:
        raise InputError(where, None, None, "not a gradetrail bundle (no sha256 in its metadata)")
    return start + value.start(), value.group()


def _file_sha256(handle: BinaryIO, at: int) -> str:
    """The sha256 of the whole file with the 64 bytes at `at` as `_UNSEALED`."""
    digest = hashlib.sha256()
    handle.seek(0)
    left = at
    while left > 0:
        chunk = handle.read(min(left, 1 << 20))
        if not chunk:
            break
        digest.update(chunk)
        left -= len(chunk)
    digest.update(_UNSEALED)
    handle.seek(at + len(_UNSEALED))
    while chunk := handle.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def _check_sealed(path: Path) -> None:
    """The file's bytes are those its export sealed; else an InputError saying so."""
    where = str(path)
    with open(path, "rb") as handle:
        at, value = _checksum_at(handle, where)
        if _file_sha256(handle, at) != value.decode("ascii"):
            raise InputError(
                where, None, None,
                "its bytes do not match its sha256 (the bundle was damaged or edited)",
            )  # fmt: skip


@contextmanager
def _staged(out: Path) -> Iterator[Path]:
    """A temporary path beside `out`, renamed to `out` when the block succeeds and
    removed when it fails."""
    handle, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(handle)
    staging = Path(name)
    try:
        yield staging
        os.replace(staging, out)
    finally:
        staging.unlink(missing_ok=True)


@contextmanager
def _memory() -> Iterator[duckdb.DuckDBPyConnection]:
    # One thread: the file is written the same way every time (same rows, same bytes).
    connection = duckdb.connect(":memory:", config={"threads": 1})
    try:
        yield connection
    finally:
        connection.close()


def _literal(text: str) -> str:
    """A SQL string literal (COPY's options take no parameters)."""
    return "'" + text.replace("'", "''") + "'"


# -- import


def read_bundle(path: Path) -> Bundle:
    """The bundle at `path`, wholly verified; an InputError naming the file and the
    reason when it is damaged, truncated, edited or not a bundle."""
    where = str(path)
    if not path.is_file():
        raise InputError(where, None, None, "no such bundle file")
    _check_sealed(path)
    metadata, described, rows = _read_parquet(path)
    manifest = _manifest_of(where, metadata)
    _check(where, manifest, described, rows)
    return Bundle(manifest=manifest, rows=[dict(zip(NAMES, row, strict=True)) for row in rows])


def _read_parquet(
    path: Path,
) -> tuple[dict[str, bytes], list[tuple[str, str]], list[tuple[Any, ...]]]:
    """The file's key/value metadata, its columns (name, DuckDB type) and its rows."""
    source = str(path)
    try:
        with _memory() as connection:
            metadata = {
                bytes(key).decode("utf-8", "replace"): bytes(value)
                for key, value in connection.execute(
                    "SELECT key, value FROM parquet_kv_metadata($path)", {"path": source}
                ).fetchall()
            }
            described = [
                (str(row[0]), str(row[1]))
                for row in connection.execute(
                    "DESCRIBE SELECT * FROM read_parquet($path)", {"path": source}
                ).fetchall()
            ]
            rows = connection.execute(
                "SELECT * FROM read_parquet($path)", {"path": source}
            ).fetchall()
    except (duckdb.Error, UnicodeError, ValueError, OverflowError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(
            source, None, None, f"not a readable Parquet file (damaged or truncated?): {reason}"
        ) from None
    return metadata, described, rows


def _manifest_of(where: str, metadata: Mapping[str, bytes]) -> BundleManifest:
    if MANIFEST_KEY not in metadata:
        raise InputError(where, None, None, "not a gradetrail bundle (no manifest in its metadata)")
    raw = metadata[MANIFEST_KEY]
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(where, None, "manifest", f"not valid JSON: {exc}") from None
    version = data.get("version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > VERSION:
        raise InputError(
            where, None, "manifest.version",
            f"format {version} is newer than this gradetrail's ({VERSION}): upgrade gradetrail",
        )  # fmt: skip
    try:
        manifest = BundleManifest.model_validate(data)
    except ValidationError as exc:
        errors = input_errors(exc, where, lambda loc: (_field(loc), None), words=FIELD_WORDS)
        raise first_of(errors) from None
    if manifest.version != VERSION:
        raise InputError(
            where, None, "manifest.version", f"format {manifest.version} is not {VERSION}"
        )
    return manifest


def _field(loc: tuple[int | str, ...]) -> str:
    return f"manifest.{indexed(loc)}"


def _check(
    where: str,
    manifest: BundleManifest,
    described: Sequence[tuple[str, str]],
    rows: Sequence[Sequence[Any]],
) -> None:
    """Every promise of the manifest against the rows; raises at the first broken one."""

    def refuse(field: str | None, message: str) -> None:
        raise InputError(where, None, field, message)

    expected = [tuple(column) for column in COLUMNS]
    if [tuple(column) for column in manifest.columns] != expected:
        refuse("manifest.columns", f"not this gradetrail's columns ({_columns(expected)})")
    if list(described) != expected:
        refuse("columns", f"{_columns(described)} are not a bundle's ({_columns(expected)})")
    if len(rows) != manifest.responses:
        refuse("rows", f"{len(rows)} rows, the manifest says {manifest.responses}")
    if sum(manifest.kinds.values()) != manifest.responses or set(manifest.kinds) != set(KINDS):
        refuse("manifest.kinds", f"{manifest.kinds} do not add up to {manifest.responses}")
    if len(manifest.keys) != manifest.responses:
        refuse("manifest.keys", f"{len(manifest.keys)} keys, for {manifest.responses} rows")
    previous = ""
    for number, row in enumerate(rows, start=1):
        key = row[0]
        if not isinstance(key, str) or not _KEY.match(key):
            refuse(f"row {number}: key", f"{key!r} is not a request key (a sha256 in hex)")
        if key <= previous:
            refuse(f"row {number}: key", "keys are not in ascending order, each once")
        previous = key
        if key != manifest.keys[number - 1]:
            refuse(f"row {number}: key", f"{key[:16]}… is not the manifest's key {number}")
        _check_row(where, number, row)
    if content_sha256(rows) != manifest.content_sha256:
        refuse("rows", "the content does not match the manifest's sha256 (damaged or edited)")


def _check_row(where: str, number: int, row: Sequence[Any]) -> None:
    values = dict(zip(NAMES, row, strict=True))
    for name in REQUIRED:
        if values[name] is None:
            raise InputError(where, None, f"row {number}: {name}", "is empty")
    for name, kind in (("raw", None), ("tool_calls", list), ("usage", dict)):
        value = values[name]
        if value is None:
            continue
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InputError(where, None, f"row {number}: {name}", f"not JSON: {exc}") from None
        if kind is not None and not isinstance(parsed, kind):
            raise InputError(where, None, f"row {number}: {name}", f"not a JSON {kind.__name__}")


def _columns(columns: Iterable[Sequence[str]]) -> str:
    return ", ".join(f"{name} {kind}" for name, kind in columns)


def import_bundle(path: Path, location: str | Path | CacheLocation) -> Imported:
    """Verifies the bundle at `path`, then adds its answers to the cache at `location`
    (those whose keys it lacks). A refused location or bundle writes nothing: the
    location is parsed and the bundle verified before the cache is opened."""
    parsed = location if isinstance(location, CacheLocation) else parse_location(location)
    bundle = read_bundle(path)
    cache = open_cache(parsed)
    # Only the rows of keys the cache lacks are sent: a bundle imported again costs one
    # lookup rather than every row through Postgres's ON CONFLICT (write_rows still
    # skips a key another writer stored meanwhile).
    held = cache.cached_keys([row["key"] for row in bundle.rows])
    added = cache.write_rows([row for row in bundle.rows if row["key"] not in held])
    return Imported(manifest=bundle.manifest, where=parsed.where, added=added)
