"""Fuzzed spec and dataset files (hypothesis): whatever a file holds, loading it either
works or raises an input error that names the file; never another exception (which the
CLI would show as a traceback rather than exit 2 with the file named)."""

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradetrail_lib.datasets import load_dataset
from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import run_cli

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SPEC_KEYS = (
    "name", "dataset", "prompt", "system", "models", "params", "scorer", "scorers",
    "messages", "tools", "tool_choice", "step_budget", "repeats", "bogus",
)  # fmt: skip
MODEL_KEYS = ("provider", "name", "base_url", "api_key_env", "answer_field", "bogus")
SCORER_KEYS = ("name", "type", "pattern", "prompt_file", "ref", "model", "threshold", "bogus")

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(
        ["openai_compatible", "anthropic", "scripted", "local", "numeric", "exact", "regex",
         "judge", "python", "data/add.jsonl", "x.py:f", "{{ a }}", "{% if %}", "-1", "1e999"]
    ),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def keyed(keys: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(keys), values, max_size=len(keys))


spec_docs = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.text(max_size=12), values),
        "dataset": st.one_of(
            st.fixed_dictionaries({"path": st.sampled_from(["data.jsonl", "none.jsonl", ""])}),
            values,
        ),
        "prompt": st.one_of(st.text(max_size=30), values),
        "models": st.one_of(st.lists(keyed(MODEL_KEYS), max_size=3), values),
        "params": st.one_of(
            st.dictionaries(
                st.sampled_from(["temperature", "max_tokens", "top_p", "seed", "bogus"]), scalars
            ),
            values,
        ),
        "scorer": st.one_of(keyed(SCORER_KEYS), values),
        "scorers": st.one_of(st.lists(keyed(SCORER_KEYS), max_size=3), values),
    },
).flatmap(lambda d: st.builds(lambda extra: {**d, **extra}, keyed(SPEC_KEYS[8:])))


def spec_text(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


spec_files = st.one_of(
    spec_docs.map(spec_text).map(str.encode),
    # A structured spec cut or spliced at random: broken YAML, tabs, odd lines.
    st.tuples(spec_docs.map(spec_text), st.integers(0, 400), st.text(max_size=10)).map(
        lambda t: (t[0][: t[1]] + t[2] + t[0][t[1] :]).encode()
    ),
    st.text(max_size=200).map(str.encode),
    st.binary(max_size=200),
)


@contextmanager
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        root = Path(name)
        (root / "data.jsonl").write_text('{"id": "a", "q": "1"}\n')
        yield root


def assert_names(exc: InputError | InputErrors, where: str) -> None:
    errors = exc.errors if isinstance(exc, InputErrors) else [exc]
    assert errors, exc
    for err in errors:
        assert err.path.endswith(where), (err.path, where, str(exc))
    assert where in str(exc)


@FUZZ
@given(content=spec_files)
def test_a_fuzzed_spec_loads_or_is_an_input_error_naming_the_file(content: bytes) -> None:
    with folder() as root:
        path = root / "fuzz.yaml"
        path.write_bytes(content)
        try:
            load_spec(path)
        except (InputError, InputErrors) as exc:
            assert_names(exc, "fuzz.yaml")


json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner)
)
rows = st.one_of(
    st.dictionaries(st.sampled_from(["id", "q", "answer", "", "ID"]), json_values, max_size=4).map(
        lambda r: json.dumps(r, allow_nan=True)
    ),
    st.builds(json.dumps, json_values),
    st.text(max_size=40).filter(lambda t: "\n" not in t),
)
jsonl_files = st.one_of(
    st.lists(rows, max_size=6).map(lambda lines: "\n".join(lines).encode()),
    st.binary(max_size=120),
)
csv_files = st.one_of(
    st.lists(
        st.lists(
            st.one_of(st.sampled_from(["id", "q", '"', "", "1", ",", "a b"]), st.text(max_size=6)),
            max_size=4,
        ).map(",".join),
        max_size=6,
    ).map(lambda lines: "\n".join(lines).encode()),
    st.binary(max_size=120),
)


@FUZZ
@given(content=jsonl_files)
def test_a_fuzzed_jsonl_dataset_loads_or_is_an_input_error_naming_the_file(
    content: bytes,
) -> None:
    with folder() as root:
        path = root / "fuzz.jsonl"
        path.write_bytes(content)
        try:
            load_dataset(path).samples  # noqa: B018 (read: a JSONL file is streamed)
        except (InputError, InputErrors) as exc:
            assert_names(exc, "fuzz.jsonl")


@FUZZ
@given(content=csv_files)
def test_a_fuzzed_csv_dataset_loads_or_is_an_input_error_naming_the_file(content: bytes) -> None:
    with folder() as root:
        path = root / "fuzz.csv"
        path.write_bytes(content)
        try:
            load_dataset(path).samples  # noqa: B018 (read: a JSONL file is streamed)
        except (InputError, InputErrors) as exc:
            assert_names(exc, "fuzz.csv")


def test_a_spec_that_is_not_utf8_exits_2_naming_the_file_without_a_traceback(
    tmp_path: Path,
) -> None:
    # The fuzz's first find: a UnicodeDecodeError escaped load_spec as a traceback.
    spec = tmp_path / "latin1.yaml"
    spec.write_bytes("name: add\nprompt: caf\xe9\n".encode("latin-1"))
    done = run_cli("run", str(spec), "--cache", str(tmp_path / "c.duckdb"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"{spec}:2: not valid UTF-8" in done.stderr
    assert "Traceback" not in done.stderr
