"""load_dataset: JSONL validation with file:line errors, and the content hash."""

import hashlib
import json
from pathlib import Path

import pytest

from gradetrail_lib.datasets import load_dataset
from gradetrail_lib.errors import InputError

SHOWN = "data/x.jsonl"


def write_lines(tmp_path: Path, lines: list[str], name: str = "x.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def load_error(path: Path, shown_as: str | None = SHOWN) -> InputError:
    """A dataset's errors surface as it is read (a JSONL file is streamed)."""
    with pytest.raises(InputError) as info:
        load_dataset(path, shown_as).samples  # noqa: B018
    return info.value


def test_valid_dataset_loads_in_order_with_lines(tmp_path):
    path = write_lines(tmp_path, ['{"id": "a", "q": "1+1", "answer": 2}', '{"id": "b", "q": "x"}'])
    dataset = load_dataset(path, SHOWN)
    assert len(dataset.samples) == 2
    assert [s.id for s in dataset.samples] == ["a", "b"]
    assert [s.line for s in dataset.samples] == [1, 2]
    assert dataset.samples[0].fields == {"id": "a", "q": "1+1", "answer": 2}
    assert dataset.path == path


def test_bad_json_names_path_and_line(tmp_path):
    lines = [json.dumps({"id": f"s{i}"}) for i in range(1, 42)] + ['{"id": "s42", "q": ]']
    err = load_error(write_lines(tmp_path, lines))
    assert err.line == 42
    assert err.path == SHOWN
    assert str(err).startswith("data/x.jsonl:42: invalid JSON")


def test_errors_show_the_real_path_without_shown_as(tmp_path):
    path = write_lines(tmp_path, ["{nope"])
    err = load_error(path, None)
    assert str(err).startswith(f"{path}:1: invalid JSON")


def test_missing_id(tmp_path):
    err = load_error(write_lines(tmp_path, ['{"id": "a"}', '{"question": "no id"}']))
    assert str(err) == "data/x.jsonl:2: id: missing"
    assert (err.line, err.field) == (2, "id")


def test_duplicate_id_names_both_lines(tmp_path):
    err = load_error(write_lines(tmp_path, ['{"id": "a"}', '{"id": "b"}', '{"id": "a"}']))
    assert err.line == 3
    assert err.field == "id"
    assert "duplicate id 'a'" in err.message
    assert "line 1" in err.message
    assert str(err) == "data/x.jsonl:3: id: duplicate id 'a' (first on line 1)"


def test_integer_and_string_ids_that_print_alike_are_duplicates(tmp_path):
    err = load_error(write_lines(tmp_path, ['{"id": 7}', '{"id": "7"}']))
    assert (err.line, err.field) == (2, "id")
    assert "first on line 1" in err.message


@pytest.mark.parametrize("line", ["[1, 2]", '"text"', "42", "null"])
def test_non_object_line(tmp_path, line):
    err = load_error(write_lines(tmp_path, ['{"id": "a"}', line]))
    assert str(err) == "data/x.jsonl:2: each line must be a JSON object"


@pytest.mark.parametrize(("value", "message"), [("true", "string or an integer"), ('""', "empty")])
def test_bad_id_values(tmp_path, value, message):
    err = load_error(write_lines(tmp_path, ['{"id": ' + value + "}"]))
    assert (err.line, err.field) == (1, "id")
    assert message in err.message


def test_float_id_is_rejected(tmp_path):
    err = load_error(write_lines(tmp_path, ['{"id": 1.5}']))
    assert (err.line, err.field) == (1, "id")


def test_blank_lines_are_skipped_and_line_numbers_kept(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('\n{"id": "a"}\n   \n\t\n{"id": "b"}\n\n', encoding="utf-8")
    dataset = load_dataset(path, SHOWN)
    assert [(s.id, s.line) for s in dataset.samples] == [("a", 2), ("b", 5)]


def test_error_after_blank_lines_has_the_file_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"id": "a"}\n\n\n{"id": \n', encoding="utf-8")
    assert load_error(path).line == 4


def test_crlf_line_endings(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"id": "a"}\r\n\r\n{"id": "b"}\r\n')
    assert [(s.id, s.line) for s in load_dataset(path).samples] == [("a", 1), ("b", 3)]


def test_unicode_line_separators_inside_strings_do_not_split_a_sample(tmp_path):
    # JSON strings may hold U+2028, U+0085 and \x1c raw; only "\n" ends a JSONL line.
    path = tmp_path / "x.jsonl"
    first = json.dumps({"id": "a", "q": "one\u2028two\u0085three\x1cfour"}, ensure_ascii=False)
    path.write_text(first + '\n{"id": "b"}\n{"id": \n', encoding="utf-8")
    err = load_error(path)
    assert err.line == 3
    path.write_text(first + '\n{"id": "b"}\n', encoding="utf-8")
    dataset = load_dataset(path)
    assert [(s.id, s.line) for s in dataset.samples] == [("a", 1), ("b", 2)]
    assert dataset.samples[0].fields["q"] == "one\u2028two\u0085three\x1cfour"


@pytest.mark.parametrize("content", ["", "\n\n", "  \n\t\n"])
def test_empty_dataset(tmp_path, content):
    path = tmp_path / "x.jsonl"
    path.write_text(content, encoding="utf-8")
    err = load_error(path)
    assert err.line is None
    assert str(err) == "data/x.jsonl: dataset has no samples"


def test_missing_file(tmp_path):
    err = load_error(tmp_path / "nope.jsonl")
    assert err.path == SHOWN
    assert "cannot read dataset" in err.message


def test_invalid_utf8_names_its_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}\n{"id": "\xff"}\n')
    err = load_error(path)
    assert err.line == 3
    assert "UTF-8" in err.message


def test_content_hash_is_sha256_of_the_bytes(tmp_path):
    path = write_lines(tmp_path, ['{"id": "a", "q": "é"}', '{"id": "b"}'])
    dataset = load_dataset(path)
    assert dataset.content_hash == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(dataset.content_hash) == 64


def test_content_hash_changes_when_one_byte_changes(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"id": "a", "answer": 1}\n')
    before = load_dataset(path).content_hash
    path.write_bytes(b'{"id": "a", "answer": 2}\n')
    after = load_dataset(path).content_hash
    assert before != after
    # Even a byte that does not change the parsed samples changes the hash.
    path.write_bytes(b'{"id": "a",  "answer": 2}\n')
    assert load_dataset(path).content_hash not in (before, after)
    path.write_bytes(b'{"id": "a", "answer": 2}\n')
    assert load_dataset(path).content_hash == after


def test_integer_ids_become_strings(tmp_path):
    dataset = load_dataset(write_lines(tmp_path, ['{"id": 1}', '{"id": 20}', '{"id": "x"}']))
    assert [s.id for s in dataset.samples] == ["1", "20", "x"]
    assert all(isinstance(s.id, str) for s in dataset.samples)
    # The fields keep the value as written.
    assert dataset.samples[0].fields["id"] == 1


def test_a_duplicate_id_among_many_is_found_and_named(tmp_path):
    """Among many ids (their hashes sorted, not held in a set), a repeated id
    is still found, with the line of its first use. 20,050 ids: about 80 in each of
    `IdHashes`' 256 buckets. (200,050 crossed the size past which the check once
    switched to numpy; one method serves every size now.)"""
    path = tmp_path / "big.jsonl"
    lines = [f'{{"id": "s{i}"}}\n' for i in range(20_050)]
    lines.append('{"id": "s12345"}\n')
    path.write_text("".join(lines))
    err = load_error(path, "data/big.jsonl")
    assert (err.line, err.field) == (20_051, "id")
    assert err.message == "duplicate id 's12345' (first on line 12346)"
    lines[-1] = '{"id": "fresh"}\n'
    path.write_text("".join(lines))
    assert len(load_dataset(path).samples) == 20_051


def test_ids_whose_hashes_collide_are_told_apart(tmp_path, monkeypatch):
    """Ids are checked through short hashes: where two distinct ids share one (forced
    here: every id hashes to one of three values), the ids themselves decide."""
    from gradetrail_lib.datasets import dataset

    monkeypatch.setattr(dataset.IdHashes, "of", classmethod(lambda cls, i: (0, len(i) % 3)))
    unique = [json.dumps({"id": f"s{i}"}) for i in range(50)]
    assert [s.id for s in load_dataset(write_lines(tmp_path, unique)).validated()] == [
        f"s{i}" for i in range(50)
    ]
    err = load_error(write_lines(tmp_path, [*unique, json.dumps({"id": "s7"})]), SHOWN)
    assert (err.line, err.message) == (51, "duplicate id 's7' (first on line 8)")
