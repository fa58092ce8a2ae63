"""Run identity and the spec, scorer and requests hashes."""

import json
from pathlib import Path

import pytest

from gradetrail_lib.datasets import load_dataset
from gradetrail_lib.spec.identity import (
    file_hashes,
    records_fingerprint,
    requests_hash,
    run_identity,
    scorer_files,
    scorer_hash,
    spec_hash,
)
from gradetrail_lib.spec.spec import LoadedSpec, load_spec
from tests.support.traces import record

SPEC = """\
name: ident
dataset: {path: data/x.jsonl}
prompt: 'Solve: {{ question }}'
models:
  - {provider: anthropic, name: claude-haiku-4-5}
  - {provider: openai, name: gpt-5-mini}
params: {temperature: 0, max_tokens: 64}
scorer: {type: exact}
"""

# The same spec: comments, other key order, other flow/block style, explicit default.
SPEC_REWRITTEN = """\
# A comment that must not change anything.
scorer:
  type: exact   # trailing comment
params:
  max_tokens: 64
  temperature: 0.0
models:
  - name: claude-haiku-4-5
    provider: anthropic
  - {name: gpt-5-mini, provider: openai}
prompt: "Solve: {{ question }}"
dataset:
  path: data/x.jsonl
name: ident
"""


def write_spec(tmp_path: Path, text: str, name: str = "spec.yaml") -> LoadedSpec:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_spec(path)


@pytest.fixture
def base(tmp_path: Path) -> LoadedSpec:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text('{"id": "a", "question": "1+1", "answer": "2"}\n')
    return write_spec(tmp_path, SPEC)


def dataset_hash(loaded: LoadedSpec) -> str:
    return load_dataset(loaded.resolve(loaded.spec.dataset.path)).content_hash


def test_hashes_are_deterministic_hex(base, tmp_path):
    again = write_spec(tmp_path, SPEC, "again.yaml")
    d = dataset_hash(base)
    assert run_identity(base, d) == run_identity(again, d)
    for value in (run_identity(base, d), spec_hash(base), scorer_hash(base)):
        assert len(value) == 64 and int(value, 16) >= 0


def test_comments_and_key_order_do_not_change_the_spec_hash(base, tmp_path):
    rewritten = write_spec(tmp_path, SPEC_REWRITTEN, "rewritten.yaml")
    assert spec_hash(rewritten) == spec_hash(base)
    d = dataset_hash(base)
    assert run_identity(rewritten, d) == run_identity(base, d)


def test_explicit_defaults_do_not_change_the_spec_hash(base, tmp_path):
    explicit = SPEC.replace(
        "scorer: {type: exact}",
        "scorer: {type: exact, field: answer, strip: true, lower: true}",
    )
    assert spec_hash(write_spec(tmp_path, explicit, "explicit.yaml")) == spec_hash(base)


def test_identity_changes_with_the_dataset_bytes(base):
    path = base.resolve(base.spec.dataset.path)
    before = run_identity(base, load_dataset(path).content_hash)
    path.write_text('{"id": "a", "question": "1+1", "answer": "3"}\n')
    after = run_identity(base, load_dataset(path).content_hash)
    assert before != after
    path.write_text('{"id": "a", "question": "1+1", "answer": "2"}\n')
    assert run_identity(base, load_dataset(path).content_hash) == before


def test_identity_changes_with_the_scorer(base, tmp_path):
    other = write_spec(tmp_path, SPEC.replace("{type: exact}", "{type: numeric}"), "n.yaml")
    d = dataset_hash(base)
    assert run_identity(other, d) != run_identity(base, d)
    assert spec_hash(other) != spec_hash(base)
    lower_off = SPEC.replace("{type: exact}", "{type: exact, lower: false}")
    assert run_identity(write_spec(tmp_path, lower_off, "l.yaml"), d) != run_identity(base, d)


def test_identity_changes_with_the_prompt_and_the_models(base, tmp_path):
    d = dataset_hash(base)
    prompt = write_spec(tmp_path, SPEC.replace("'Solve: ", "'Solve now: "), "p.yaml")
    assert run_identity(prompt, d) != run_identity(base, d)
    one_model = SPEC.replace("  - {provider: openai, name: gpt-5-mini}\n", "")
    assert run_identity(write_spec(tmp_path, one_model, "m.yaml"), d) != run_identity(base, d)


def test_identity_changes_with_the_schema_files_content(base, tmp_path):
    text = SPEC.replace("{type: exact}", "{type: json_schema, schema_path: schemas/s.json}")
    (tmp_path / "schemas").mkdir()
    schema_file = tmp_path / "schemas" / "s.json"
    schema_file.write_text(json.dumps({"type": "object"}))
    loaded = write_spec(tmp_path, text, "js.yaml")
    assert scorer_files(loaded) == {"schemas/s.json": schema_file.resolve()}
    d = dataset_hash(base)
    identity, scorer_before = run_identity(loaded, d), scorer_hash(loaded)
    spec_before = spec_hash(loaded)
    files_before = file_hashes(scorer_files(loaded))

    schema_file.write_text(json.dumps({"type": "object", "required": ["a"]}))
    assert run_identity(loaded, d) != identity
    assert scorer_hash(loaded) != scorer_before
    assert file_hashes(scorer_files(loaded)) != files_before
    assert spec_hash(loaded) == spec_before  # the spec text did not change; the file did
    assert requests_hash(loaded, loaded.spec.models[0]) == requests_hash(base, base.spec.models[0])


def test_requests_hash_ignores_the_scorer(base, tmp_path):
    other = write_spec(
        tmp_path,
        SPEC.replace("{type: exact}", "{type: regex, pattern: 'Answer: {{ answer }}'}"),
        "r.yaml",
    )
    for a, b in zip(base.spec.models, other.spec.models, strict=True):
        assert requests_hash(other, b) == requests_hash(base, a)
    assert scorer_hash(other) != scorer_hash(base)


def test_scorer_hash_ignores_the_prompt_params_and_models(base, tmp_path):
    text = (
        SPEC.replace("'Solve: ", "'Please solve: ")
        .replace("temperature: 0,", "temperature: 0.5,")
        .replace("gpt-5-mini", "gpt-5")
    )
    other = write_spec(tmp_path, text, "o.yaml")
    assert scorer_hash(other) == scorer_hash(base)
    assert requests_hash(other, other.spec.models[0]) != requests_hash(base, base.spec.models[0])


def test_requests_hash_differs_per_model(base):
    first, second = base.spec.models
    assert requests_hash(base, first) != requests_hash(base, second)


def test_requests_hash_ignores_the_url_trailing_slash_and_temperature_type(tmp_path, base):
    compat = SPEC.replace(
        "  - {provider: openai, name: gpt-5-mini}\n",
        "  - {provider: openai_compatible, name: q, base_url: 'http://h:1/v1'}\n",
    )
    a = write_spec(tmp_path, compat, "a.yaml")
    b = write_spec(
        tmp_path,
        compat.replace("http://h:1/v1'", "http://h:1/v1/'").replace(
            "temperature: 0,", "temperature: 0.0,"
        ),
        "b.yaml",
    )
    assert requests_hash(a, a.spec.models[1]) == requests_hash(b, b.spec.models[1])


JUDGED = SPEC.replace(
    "scorer: {type: exact}",
    """scorers:
  - {name: answer, type: exact}
  - {name: short, type: python, ref: "metrics.py:short"}
  - name: correct
    type: judge
    prompt_file: judges/correct.j2
    model: {provider: anthropic, name: claude-sonnet-4-6}""",
)


def test_judge_files_and_python_sources_enter_the_scorer_hash_and_identity(
    base: LoadedSpec, tmp_path: Path
) -> None:
    (tmp_path / "judges").mkdir()
    judge = tmp_path / "judges" / "correct.j2"
    judge.write_text("Reference {{ answer }}\nResponse {{ response }}\nGRADE: C or I\n")
    source = tmp_path / "metrics.py"
    source.write_text("def short(response):\n    return len(response) < 10\n")
    dataset = load_dataset(tmp_path / "data" / "x.jsonl").content_hash

    def hashes() -> tuple[str, str, str, dict[str, str]]:
        loaded = write_spec(tmp_path, JUDGED, "judged.yaml")
        model = loaded.spec.models[0]
        files = file_hashes(scorer_files(loaded))
        return (
            scorer_hash(loaded),
            run_identity(loaded, dataset),
            requests_hash(loaded, model),
            files,
        )

    first = hashes()
    assert set(first[3]) == {"judges/correct.j2", "metrics.py"}
    judge.write_text(judge.read_text() + "Be strict.\n")
    second = hashes()
    source.write_text("def short(response):\n    return len(response) < 20\n")
    third = hashes()
    assert len({first[0], second[0], third[0]}) == 3, "scorer hash"
    assert len({first[1], second[1], third[1]}) == 3, "identity"
    assert first[2] == second[2] == third[2], "the requests of the model under test stay"


def test_records_fingerprint_covers_every_score_and_reason() -> None:
    """The scores asset's data version: a scorer edit that changes a score or a reason
    must change it, the same records give the same one."""

    def fingerprint(score: float, reason: str) -> str:
        return records_fingerprint(
            [record("a", 1.0, reasons={"s": "ok"}), record("b", score, reasons={"s": reason})]
        )

    base = fingerprint(1.0, "ok")
    assert fingerprint(1.0, "ok") == base
    assert fingerprint(0.0, "ok") != base
    assert fingerprint(1.0, "matched") != base
