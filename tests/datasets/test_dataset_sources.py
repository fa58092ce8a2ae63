"""Dataset sources besides JSONL: CSV and Parquet files (DuckDB) and a Hugging Face dataset
(the optional `datasets` extra) read from the local cache, offline. Every file is built here."""

import hashlib
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.datasets import DatasetRef, load_dataset, load_dataset_ref
from gradetrail_lib.errors import InputError
from gradetrail_lib.hashing import hash_json
from gradetrail_lib.spec.spec import load_spec
from tests.support.hf_hub import hub_cache

ROWS = [{"id": "a", "q": "France", "answer": "Paris"}, {"id": "b", "q": "Italy", "answer": "Rome"}]
REV = "0123456789abcdef0123456789abcdef01234567"


def write_csv(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    source = path.with_suffix(".src.json")
    source.write_text(json.dumps(rows), encoding="utf-8")
    con = duckdb.connect(":memory:")
    try:
        con.execute(f"COPY (SELECT * FROM read_json_auto('{source}')) TO '{path}' (FORMAT parquet)")
    finally:
        con.close()
    return path


def spec_file(tmp_path: Path, dataset: str) -> Path:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"name: s\ndataset: {dataset}\nprompt: 'Capital of {{{{ q }}}}?'\n"
        "model: {provider: scripted, name: x, answer_field: answer}\n"
        "scorer: {type: exact, field: answer}\n",
        encoding="utf-8",
    )
    return spec


def run(tmp_path: Path, spec: Path) -> Any:
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    return done


def error_of(path: Path, shown_as: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_dataset(path, shown_as)
    return info.value


def test_csv_runs_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    write_csv(tmp_path / "data" / "x.csv", ["id,q,answer", "a,France,Paris", "b,Italy,Rome"])
    done = run(tmp_path, spec_file(tmp_path, "{path: data/x.csv}"))
    assert [r.id for r in done.records] == ["a", "b"]
    assert [r.response for r in done.records] == ["Paris", "Rome"]
    assert [r.score_of("score") for r in done.records] == [1.0, 1.0]
    assert done.manifest.dataset.path == "data/x.csv"
    raw = (tmp_path / "data" / "x.csv").read_bytes()
    assert done.manifest.dataset.hash == hashlib.sha256(raw).hexdigest()


def test_parquet_runs_end_to_end(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    write_parquet(tmp_path / "data" / "x.parquet", ROWS)
    done = run(tmp_path, spec_file(tmp_path, "{path: data/x.parquet}"))
    assert [r.response for r in done.records] == ["Paris", "Rome"]
    assert [r.score_of("score") for r in done.records] == [1.0, 1.0]


def test_explicit_format_overrides_the_suffix(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    write_csv(tmp_path / "data" / "x.txt", ["id,q,answer", "a,France,Paris"])
    done = run(tmp_path, spec_file(tmp_path, "{path: data/x.txt, format: csv}"))
    assert [r.response for r in done.records] == ["Paris"]


def test_csv_rows_and_lines(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "x.csv", ["id,n,when", "007,1,2024-01-02", "8,2.5,2024-02-03"])
    dataset = load_dataset(path, "data/x.csv")
    assert [s.line for s in dataset.samples] == [2, 3]
    assert [s.id for s in dataset.samples] == ["007", "8"]
    # Values JSON can hold (a date becomes its ISO text), as a JSONL row would.
    assert dataset.samples[0].fields["when"] == "2024-01-02"
    json.dumps([s.fields for s in dataset.samples])


def test_table_reads_share_one_instance_and_a_fork_reads_its_own(tmp_path: Path) -> None:
    """Table files are read through one in-memory DuckDB per process (a cursor a read),
    closed before a fork: a forked child reads a CSV through an instance of its own, and
    the parent reads on after."""
    import os

    from gradetrail_lib.datasets import tables

    path = write_csv(tmp_path / "x.csv", ["id,q", "a,1", "b,2"])
    assert [s.id for s in load_dataset(path).samples] == ["a", "b"]
    instance = tables._READER._instance
    assert instance is not None
    assert [s.id for s in load_dataset(path).samples] == ["a", "b"]
    assert tables._READER._instance is instance  # the second read opened none
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: read, report, leave without running pytest's teardown
        try:
            ids = ",".join(s.id for s in load_dataset(path).samples)
            os.write(write, ids.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        # A hang here fails the suite's timeout rather than passing.
        assert pipe.read() == "a,b"
    os.waitpid(child, 0)
    assert tables._READER._instance is None  # closed before the fork
    assert [s.id for s in load_dataset(path).samples] == ["a", "b"]


def test_forks_while_another_thread_reads_cut_no_read_short(tmp_path: Path) -> None:
    """A fork closes the shared instance; a thread reading tables at the time finishes
    each read first (the read holds the lock across it), and every child reads through an
    instance and a lock of its own, whatever the parent's threads held at the fork."""
    import os
    import threading

    path = write_csv(tmp_path / "x.csv", ["id,q", *(f"s{i},{i}" for i in range(200))])
    ids = [f"s{i}" for i in range(200)]
    errors: list[BaseException] = []
    done = threading.Event()

    def read_on() -> None:
        try:
            while not done.is_set():
                assert [s.id for s in load_dataset(path).samples] == ids
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    reader = threading.Thread(target=read_on)
    reader.start()
    try:
        for _ in range(5):
            read, write = os.pipe()
            child = os.fork()
            if child == 0:  # the child: read, report, leave without pytest's teardown
                try:
                    os.write(write, str(len(load_dataset(path).samples)).encode())
                finally:
                    os._exit(0)
            os.close(write)
            with os.fdopen(read) as pipe:
                assert pipe.read() == "200"  # a hang fails the suite's timeout instead
            os.waitpid(child, 0)
    finally:
        done.set()
        reader.join()
    assert not errors, errors[0]


def test_csv_errors_name_file_and_line(tmp_path: Path) -> None:
    no_id = write_csv(tmp_path / "a.csv", ["key,q", "a,x"])
    err = error_of(no_id, "data/a.csv")
    assert (err.path, err.line, err.field, err.message) == ("data/a.csv", 2, "id", "missing")
    empty = write_csv(tmp_path / "b.csv", ["id,q", "a,x", ",y"])
    assert str(error_of(empty, "data/b.csv")) == "data/b.csv:3: id: missing"
    dupe = write_csv(tmp_path / "c.csv", ["id,q", "a,x", "b,y", "a,z"])
    assert str(error_of(dupe, "data/c.csv")) == (
        "data/c.csv:4: id: duplicate id 'a' (first on line 2)"
    )
    header_only = write_csv(tmp_path / "d.csv", ["id,q"])
    assert str(error_of(header_only, "data/d.csv")) == "data/d.csv: dataset has no samples"
    missing = error_of(tmp_path / "nope.csv", "data/nope.csv")
    assert str(missing).startswith("data/nope.csv: cannot read dataset:")


def test_parquet_errors_name_file_and_row(tmp_path: Path) -> None:
    dupe = write_parquet(tmp_path / "a.parquet", [{"id": "a"}, {"id": "b"}, {"id": "a"}])
    assert str(error_of(dupe, "data/a.parquet")) == (
        "data/a.parquet:3: id: duplicate id 'a' (first on row 1)"
    )
    no_id = write_parquet(tmp_path / "b.parquet", [{"key": "a"}])
    assert str(error_of(no_id, "data/b.parquet")) == "data/b.parquet:1: id: missing"
    floats = write_parquet(tmp_path / "c.parquet", [{"id": 1.5}])
    assert str(error_of(floats, "data/c.parquet")) == (
        "data/c.parquet:1: id: must be a string or an integer"
    )
    bad = tmp_path / "d.parquet"
    bad.write_bytes(b"not a parquet file at all")
    err = error_of(bad, "data/d.parquet")
    assert err.path == "data/d.parquet" and err.line is None
    assert err.message.startswith("cannot read PARQUET:")


def test_hashes_follow_the_file_bytes(tmp_path: Path) -> None:
    one = load_dataset(write_csv(tmp_path / "x.csv", ["id,q", "a,x"]))
    two = load_dataset(write_csv(tmp_path / "x.csv", ["id,q", "a,y"]))
    assert one.content_hash != two.content_hash
    p1 = load_dataset(write_parquet(tmp_path / "x.parquet", [{"id": "a", "q": "x"}]))
    p2 = load_dataset(write_parquet(tmp_path / "x.parquet", [{"id": "a", "q": "y"}]))
    assert p1.content_hash != p2.content_hash


def test_the_registry_names_the_formats_and_their_suffixes(tmp_path: Path) -> None:
    from gradetrail_lib.datasets import dataset_format
    from gradetrail_lib.datasets.registry import format_names

    assert format_names() == ("jsonl", "csv", "parquet", "arrow")
    choices = DatasetRef.model_json_schema()["properties"]["format"]["anyOf"][0]["enum"]
    assert choices == list(format_names())
    assert dataset_format(Path("x.CSV")) == "csv"
    assert dataset_format(Path("x.parquet")) == "parquet"
    assert dataset_format(Path("x.arrow")) == "arrow"
    assert dataset_format(Path("x.txt")) == "jsonl"
    assert dataset_format(Path("x.csv"), "jsonl") == "jsonl"
    with pytest.raises(InputError) as info:
        load_spec(spec_file(tmp_path, "{path: x.tsv, format: tsv}"))
    assert str(info.value).endswith(
        "dataset.format: Input should be 'jsonl', 'csv', 'parquet' or 'arrow'"
    )


def test_dataset_ref_rules(tmp_path: Path) -> None:
    def error(dataset: str) -> str:
        with pytest.raises(InputError) as info:
            load_spec(spec_file(tmp_path, dataset))
        return str(info.value)

    assert "one of them" in error("{}")
    assert "one of them" in error(f"{{path: x.csv, hf: o/n, split: train, revision: {REV}}}")
    assert "hf needs revision" in error("{hf: o/n, split: train}")
    assert "hf needs split" in error(f"{{hf: o/n, revision: {REV}}}")
    assert "revision" in error("{hf: o/n, split: train, revision: main}")
    assert "only with hf" in error("{path: x.csv, split: train}")
    assert "only with path" in error(f"{{hf: o/n, split: train, revision: {REV}, format: csv}}")


def test_a_jsonl_spec_keeps_its_hash_fields(tmp_path: Path) -> None:
    from gradetrail_lib.spec.spec import spec_document_fields

    loaded = load_spec(spec_file(tmp_path, "{path: data/x.jsonl}"))
    assert spec_document_fields(loaded.spec)["dataset"] == {"path": "data/x.jsonl"}


# --- Hugging Face: the `datasets` extra, offline, from its local cache -----------------


def hf_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: list[dict[str, Any]], revision: str = REV
) -> Path:
    """A dataset `gradetrail/tiny` at `revision` in a fresh datasets cache, laid out as a
    download from the Hub leaves it, with the Hub switched off."""
    return hub_cache(tmp_path, monkeypatch, "gradetrail/tiny", revision, {"train": rows})


HF_SPEC = f"{{hf: gradetrail/tiny, split: train, revision: {REV}}}"


def test_hf_dataset_offline_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = hf_cache(tmp_path, monkeypatch, ROWS)
    done = run(tmp_path, spec_file(tmp_path, HF_SPEC))
    assert [r.response for r in done.records] == ["Paris", "Rome"]
    assert [r.score_of("score") for r in done.records] == [1.0, 1.0]
    assert done.manifest.dataset.path == f"hf:gradetrail/tiny:default:train@{REV}"
    # The hash of a Hugging Face dataset: sha256 of the canonical JSON of its rows.
    assert done.manifest.dataset.hash == hash_json(ROWS)
    ref = DatasetRef(hf="gradetrail/tiny", split="train", revision=REV)
    dataset = load_dataset_ref(ref, tmp_path)
    assert dataset.path == folder
    assert [s.line for s in dataset.samples] == [1, 2]


def test_hf_rows_hash_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf_cache(tmp_path, monkeypatch, [*ROWS, {"id": "a", "q": "x", "answer": "y"}])
    ref = DatasetRef(hf="gradetrail/tiny", split="train", revision=REV)
    with pytest.raises(InputError) as info:
        load_dataset_ref(ref, tmp_path)
    assert str(info.value) == f"{ref.label}:3: id: duplicate id 'a' (first on row 1)"


def test_hf_other_revision_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf_cache(tmp_path, monkeypatch, ROWS, revision="f" * 40)
    ref = DatasetRef(hf="gradetrail/tiny", split="train", revision=REV)
    with pytest.raises(InputError) as info:
        load_dataset_ref(ref, tmp_path)
    assert info.value.field == "dataset.revision"
    assert "f" * 40 in info.value.message


def test_hf_hash_changes_with_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf_cache(tmp_path / "one", monkeypatch, ROWS)
    ref = DatasetRef(hf="gradetrail/tiny", split="train", revision=REV)
    first = load_dataset_ref(ref, tmp_path).content_hash
    hf_cache(tmp_path / "two", monkeypatch, [{**ROWS[0], "answer": "Lyon"}, ROWS[1]])
    assert load_dataset_ref(ref, tmp_path).content_hash != first


def test_an_arrow_file_reads_as_datasets_writes_it(tmp_path: Path) -> None:
    """A Hugging Face Arrow file (an IPC stream) and the file format; `#index` ids."""
    pa = pytest.importorskip("pyarrow", reason="needs pyarrow: pip install -e '.[hf]'")
    from gradetrail_lib.datasets.registry import load_dataset

    table = pa.table({"goal": ["a", "b", "c"], "label": [0, 1, 0], "nested": [[1], [2], []]})
    stream = tmp_path / "data-00000-of-00001.arrow"
    with pa.OSFile(str(stream), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    dataset = load_dataset(stream, "s.arrow", id_field="#index")
    assert [(s.id, s.fields["goal"], s.line) for s in dataset.samples] == [
        ("0", "a", 1), ("1", "b", 2), ("2", "c", 3)
    ]  # fmt: skip
    assert dataset.samples[0].fields["nested"] == [1]
    as_file = tmp_path / "f.arrow"
    with pa.OSFile(str(as_file), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    assert [s.fields["label"] for s in load_dataset(as_file, "f", id_field="#index").samples] == [
        0, 1, 0
    ]  # fmt: skip
    with pytest.raises(InputError, match="id: missing"):
        load_dataset(stream, "s.arrow")
    (tmp_path / "bad.arrow").write_bytes(b"not arrow")
    with pytest.raises(InputError, match="cannot read Arrow"):
        load_dataset(tmp_path / "bad.arrow", "bad.arrow", id_field="#index")
