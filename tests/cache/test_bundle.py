"""Bundles (gradetrail_lib.cache.bundle): which answers records reference, a bundle's
checks one by one (bundles whose checksums are right but whose manifests lie), every
flipped byte and every truncation refused, and imports into either cache that add only
the keys it lacks and write nothing when refused."""

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import duckdb
import pytest

import gradetrail_lib.cache.bundle as bundle_module
from gradetrail_lib.cache.bundle import (
    BundleRun,
    build_manifest,
    content_sha256,
    export_bundle,
    import_bundle,
    manifest_text,
    read_bundle,
    referenced_keys,
    write_bundle,
    write_parquet,
)
from gradetrail_lib.cache.location import open_cache, parse_location
from gradetrail_lib.cache.responses import COLUMNS
from gradetrail_lib.errors import InputError, UsageError
from gradetrail_lib.results.runs import Run
from gradetrail_lib.results.trace import AgentStep
from tests.cache.conftest import direct
from tests.support.traces import call, manifest, record

NAMES = [name for name, _ in COLUMNS]


def key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def row(n: int, **changes: Any) -> list[Any]:
    """A cache row of key `n`, in `COLUMNS` order."""
    values = {
        "key": key(n), "provider": "openai_compatible", "model": "m", "served_model": "m-1",
        "text": f"Answer: {n} — ünïcode", "stop_reason": "stop", "input_tokens": 10,
        "output_tokens": 2, "latency_s": 0.25, "attempts": 1,
        "raw": json.dumps({"choices": [{"message": {"content": str(n)}}]}),
        "tool_calls": None, "usage": None, **changes,
    }  # fmt: skip
    return [values[name] for name in NAMES]


def rows_of(*numbers: int) -> list[list[Any]]:
    return sorted((row(n) for n in numbers), key=lambda r: r[0])


RUN = BundleRun(
    identity="i" * 64, spec="add", model="m", run_dir="add-m-iiii", records=2,
    responses={"target": 2, "judge": 0, "agent_step": 0},
)  # fmt: skip


def made(rows: list[list[Any]]) -> str:
    """The manifest an export would write for `rows` (all target answers), as text."""
    return manifest_text(build_manifest(rows, {r[0]: "target" for r in rows}, [RUN]))


def step(index: int, request_key: str) -> AgentStep:
    return AgentStep(
        index=index, request_key=request_key, content="", tool_calls=[], tool_results=[],
        input_tokens=1, output_tokens=1, latency_s=0.1, cache_hit=False, stop_reason="stop",
    )  # fmt: skip


def test_referenced_keys_are_every_answer_a_record_holds_each_with_its_kind() -> None:
    judged = record("s1", 1.0)
    judged.calls = [
        replace(call(), request_key="t1"),
        replace(call(error="HTTP 500"), request_key="t-failed"),
        replace(call(role="judge", scorer="j"), request_key="j1"),
        replace(call(role="judge", scorer="j", error="no response"), request_key="j-failed"),
    ]
    agent = record("s2", 1.0)
    agent.calls = [replace(call(), request_key="a1"), replace(call(), request_key="a2")]
    agent.trajectory = [step(0, "a1"), step(1, "a2")]
    again = record("s3", 1.0)
    again.calls = [replace(call(), request_key="t1")]  # a shared request: one answer
    assert referenced_keys([judged, agent, again]) == {
        "t1": "target", "j1": "judge", "a1": "agent_step", "a2": "agent_step",
    }  # fmt: skip
    assert list(referenced_keys([judged, agent, again])) == ["t1", "j1", "a1", "a2"]


def test_the_content_digest_covers_every_value_and_the_order() -> None:
    rows = rows_of(1, 2)
    digest = content_sha256(rows)
    assert digest == content_sha256([list(r) for r in rows])
    assert digest != content_sha256(rows[::-1])
    for index in range(len(NAMES)):
        changed = [list(r) for r in rows]
        changed[1][index] = "x" if changed[1][index] != "x" else "y"
        assert content_sha256(changed) != digest, NAMES[index]


def test_a_bundle_reads_back_as_written_and_the_same_rows_make_the_same_bytes(
    tmp_path: Path,
) -> None:
    rows = rows_of(1, 2, 3)
    rows[0][NAMES.index("tool_calls")] = json.dumps([{"id": "c1", "name": "f", "arguments": {}}])
    rows[1][NAMES.index("usage")] = json.dumps({"batch": True})
    rows[2][NAMES.index("input_tokens")] = None
    manifest_ = build_manifest(rows, {r[0]: "judge" for r in rows}, [RUN])
    write_bundle(tmp_path / "one.parquet", rows, manifest_)
    write_bundle(tmp_path / "two.parquet", rows, manifest_)
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    read = read_bundle(tmp_path / "one.parquet")
    assert read.manifest == manifest_ and read.manifest.kinds["judge"] == 3
    assert [[r[name] for name in NAMES] for r in read.rows] == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.parquet", "two.parquet"]


def test_every_flipped_byte_and_every_truncation_is_refused(tmp_path: Path) -> None:
    """The whole file is covered by its sha256: no change goes unnoticed, and none reaches
    the Parquet reader."""
    rows = rows_of(1, 2)
    good = tmp_path / "good.parquet"
    write_bundle(good, rows, build_manifest(rows, {r[0]: "target" for r in rows}, [RUN]))
    data = good.read_bytes()
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(data)
    accepted = []
    # Each byte flipped in place and put back: writing the whole file anew for each
    # cost 3.5 ms here (ext4 flushes a file truncated and written again when it is
    # closed), 8-14 s in all, where the reads take under a second.
    with open(damaged, "r+b") as file:
        for at in range(len(data)):
            file.seek(at)
            file.write(bytes([data[at] ^ (0x01 if at % 2 else 0x80)]))
            file.flush()
            try:
                read_bundle(damaged)
                accepted.append(at)
            except InputError as exc:
                assert exc.path == str(damaged)
            file.seek(at)
            file.write(data[at : at + 1])
        file.flush()
    assert accepted == []
    assert damaged.read_bytes() == data  # every byte put back: the cuts are of the bundle
    # Cut anywhere (every 13th length, and each of the last 64: the footer's end), the
    # longest first, each cut shortening the last.
    lengths = {*range(0, len(data), 13), *range(len(data) - 64, len(data))}
    for length in sorted(lengths, reverse=True):
        os.truncate(damaged, length)
        assert damaged.stat().st_size == length
        with pytest.raises(InputError, match="truncated"):
            read_bundle(damaged)


def _edited(text: str, **changes: Any) -> str:
    data = json.loads(text)
    data.update(changes)
    return json.dumps(data)


def _lying(name: str) -> tuple[list[list[Any]], str, list[tuple[str, str]], str]:
    """Rows, manifest text and columns of a bundle that lies one way, and the reason its
    import gives."""
    rows, columns = rows_of(1, 2), list(COLUMNS)
    text = made(rows)
    if name == "a row more than it says":
        text, rows = made(rows[:1]), rows
        return rows, text, columns, "2 rows, the manifest says 1"
    if name == "kinds that do not add up":
        kinds = {"target": 1, "judge": 0, "agent_step": 0}
        return rows, _edited(text, kinds=kinds), columns, "do not add up to 2"
    if name == "other keys":
        keys = [key(7), key(8)]
        return rows, _edited(text, keys=keys), columns, "row 1: key: "
    if name == "changed content":
        changed = [list(r) for r in rows]
        changed[1][NAMES.index("text")] = "Answer: 41"
        return changed, text, columns, "content does not match the manifest's sha256"
    if name == "keys out of order":
        rows = rows[::-1]
        return rows, made(rows), columns, "keys are not in ascending order"
    if name == "a key twice":
        rows = [rows[0], rows[0]]
        return rows, made(rows), columns, "each once"
    if name == "a key that is no request key":
        rows = [row(1, key="K" * 64)]
        return rows, made(rows), columns, "is not a request key"
    if name == "an empty text":
        rows = [row(1, text=None)]
        return rows, made(rows), columns, "row 1: text: is empty"
    if name == "a raw body that is no JSON":
        rows = [row(1, raw="{nope")]
        return rows, made(rows), columns, "row 1: raw: not JSON"
    if name == "tool calls that are no list":
        rows = [row(1, tool_calls='{"name": "f"}')]
        return rows, made(rows), columns, "row 1: tool_calls: not a JSON list"
    if name == "other column types":
        columns = [(n, "VARCHAR" if n == "input_tokens" else kind) for n, kind in COLUMNS]
        return rows, text, columns, "input_tokens VARCHAR"
    if name == "a newer format":
        return rows, _edited(text, version=2), columns, "format 2 is newer"
    if name == "another format":
        return rows, _edited(text, format="zip"), columns, "manifest.format: "
    if name == "an unknown field":
        return rows, _edited(text, signed_by="x"), columns, "manifest.signed_by: unknown field"
    if name == "a manifest that is no JSON":
        return rows, "{", columns, "manifest: not valid JSON"
    raise AssertionError(name)


LIES = [
    "a row more than it says", "kinds that do not add up", "other keys", "changed content",
    "keys out of order", "a key twice", "a key that is no request key", "an empty text",
    "a raw body that is no JSON", "tool calls that are no list", "other column types",
    "a newer format", "another format", "an unknown field", "a manifest that is no JSON",
]  # fmt: skip


@pytest.mark.parametrize("lie", LIES)
def test_a_bundle_whose_checksum_holds_but_whose_content_lies_is_refused(
    tmp_path: Path, lie: str
) -> None:
    """What a bundle made by other means (its sha256 recomputed) must pass too."""
    rows, text, columns, reason = _lying(lie)
    path = tmp_path / "lies.parquet"
    write_parquet(path, rows, text, columns)
    with pytest.raises(InputError) as refused:
        read_bundle(path)
    assert reason in str(refused.value) and str(path) in str(refused.value)


def test_an_export_verifies_what_it_wrote_and_leaves_nothing_when_it_fails(
    tmp_path: Path,
) -> None:
    rows = rows_of(1, 2)
    lying = build_manifest(rows_of(1, 3), {r[0]: "target" for r in rows_of(1, 3)}, [RUN])
    with pytest.raises(InputError, match="is not the manifest's key"):
        write_bundle(tmp_path / "out.parquet", rows, lying)
    assert list(tmp_path.iterdir()) == []


def test_a_parquet_file_that_is_no_bundle_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain.parquet"
    with duckdb.connect() as connection:
        connection.execute(f"COPY (SELECT 1 AS key) TO '{plain}' (FORMAT parquet)")
    with pytest.raises(InputError, match="not a gradetrail bundle"):
        read_bundle(plain)
    with pytest.raises(InputError, match="no such bundle file"):
        read_bundle(tmp_path / "missing.parquet")


def test_an_import_adds_only_the_keys_the_cache_lacks_and_a_refused_one_nothing(
    cache_location: str, tmp_path: Path
) -> None:
    rows = rows_of(1, 2, 3)
    path = tmp_path / "b.parquet"
    write_bundle(path, rows, build_manifest(rows, {r[0]: "target" for r in rows}, [RUN]))
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(path.read_bytes()[:-1])

    with pytest.raises(InputError, match="truncated"):
        import_bundle(damaged, cache_location)
    parsed = parse_location(cache_location)
    if parsed.path is not None:
        assert not parsed.path.exists()  # no cache file made for a refused bundle
    else:
        assert direct(cache_location, "SELECT to_regclass('responses')") == [(None,)]

    held = dict(zip(NAMES, row(2, text="kept"), strict=True))
    open_cache(cache_location).write_rows([held])
    done = import_bundle(path, cache_location)
    assert (done.added, done.held, done.manifest.responses) == (2, 1, 3)
    cache = open_cache(cache_location)
    assert cache.count() == 3
    stored = {r["key"]: r for r in cache.read_rows([key(1), key(2), key(3)])}
    assert stored[key(2)]["text"] == "kept"  # what the cache had stays
    assert stored[key(1)] == dict(zip(NAMES, row(1), strict=True))  # whole rows, raw too
    again = import_bundle(path, cache_location)
    assert (again.added, again.held) == (0, 3)
    with pytest.raises(InputError):
        import_bundle(damaged, cache_location)
    assert open_cache(cache_location).count() == 3


class _Rows:
    """A cache's rows by key (what an export reads), without a database."""

    def __init__(self, rows: list[list[Any]]) -> None:
        self.rows = {r[0]: dict(zip(NAMES, r, strict=True)) for r in rows}

    def read_rows(self, keys: list[str]) -> list[dict[str, Any]]:
        return [self.rows[k] for k in keys if k in self.rows]


def _runs() -> list[Run]:
    first = record("s1", 1.0)
    first.calls = [replace(call(), request_key=key(1)), replace(call(), request_key=key(2))]
    second = record("s2", 1.0)
    second.calls = [replace(call(), request_key=key(3))]
    return [Run.of(manifest(identity="a" * 64), [first, second], Path("runs/add-m-aaaa"))]


def test_an_export_writes_every_referenced_answer_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b.parquet"
    exported = export_bundle(_runs(), _Rows(rows_of(1, 2, 3, 4)), out, "cache")
    assert exported.keys == sorted([key(1), key(2), key(3)])  # not 4: no record asks it
    assert exported.runs[0].identity == "a" * 64 and exported.runs[0].records == 2
    assert read_bundle(out).manifest == exported

    with pytest.raises(UsageError, match=r"1 of the 3 answers .* not in this cache"):
        export_bundle(_runs(), _Rows(rows_of(1, 3)), tmp_path / "missing.parquet", "cache")

    def broken(path: Path) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(bundle_module, "read_bundle", broken)
    with pytest.raises(OSError, match="disk gone"):
        export_bundle(_runs(), _Rows(rows_of(1, 2, 3)), tmp_path / "failed.parquet", "cache")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.parquet"]  # no temporary left
