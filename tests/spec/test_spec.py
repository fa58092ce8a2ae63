"""load_spec: a valid spec loads; every error names the file, the line and the field."""

from pathlib import Path

import pytest

from gradetrail_lib.errors import InputError, InputErrors, UnknownModel
from gradetrail_lib.scorers.json_schema import Config as JsonSchemaScorer
from gradetrail_lib.scorers.numeric import Config as NumericScorer
from gradetrail_lib.scorers.regex import Config as RegexScorer
from gradetrail_lib.spec.spec import LoadedSpec, load_spec

# Line numbers below refer to this layout; tests edit one line and check the line named.
BASE = """\
name: arith
dataset: {path: data/x.jsonl}
prompt: |
  Solve: {{ question }}
models:
  - {provider: anthropic, name: claude-sonnet-4-6}
  - {provider: openai_compatible, name: qwen2.5-7b, base_url: http://127.0.0.1:8000/v1}
params:
  temperature: 0
  max_tokens: 64
scorer:
  type: regex
  pattern: 'Answer:\\s*{{ answer }}'
  flags: [IGNORECASE]
"""

MODEL_0 = "  - {provider: anthropic, name: claude-sonnet-4-6}\n"
MODEL_1 = (
    "  - {provider: openai_compatible, name: qwen2.5-7b, base_url: http://127.0.0.1:8000/v1}\n"
)
REGEX_SCORER = "  type: regex\n  pattern: 'Answer:\\s*{{ answer }}'\n  flags: [IGNORECASE]\n"


def write(tmp_path: Path, text: str, name: str = "x.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"test bug: {old!r} is not in the base spec exactly once"
    return text.replace(old, new)


def load_error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_spec(path)
    return info.value


def assert_error(err: InputError, path: Path, line: int | None, field: str | None, text: str):
    assert err.path == str(path)
    assert err.line == line
    assert err.field == field
    assert text in err.message
    where = f"{path}:{line}" if line is not None else str(path)
    prefix = f"{where}: {field}: " if field else f"{where}: "
    assert str(err).startswith(prefix), str(err)


def test_base_layout_is_what_the_tests_assume():
    lines = BASE.splitlines()
    assert lines[6].startswith("  - {provider: openai_compatible")  # line 7
    assert lines[9] == "  max_tokens: 64"  # line 10
    assert lines[12].startswith("  pattern:")  # line 13
    assert len(lines) == 14


def test_valid_spec_loads(tmp_path):
    path = write(tmp_path, BASE)
    loaded = load_spec(path)
    assert isinstance(loaded, LoadedSpec)
    spec = loaded.spec
    assert spec.name == "arith"
    assert spec.dataset.path == "data/x.jsonl"
    assert spec.prompt == "Solve: {{ question }}\n"
    assert [(m.provider, m.name) for m in spec.models] == [
        ("anthropic", "claude-sonnet-4-6"),
        ("openai_compatible", "qwen2.5-7b"),
    ]
    assert spec.models[1].base_url == "http://127.0.0.1:8000/v1"
    assert spec.params.temperature == 0.0 and isinstance(spec.params.temperature, float)
    assert spec.params.max_tokens == 64
    assert isinstance(spec.scorer, RegexScorer)
    assert spec.scorer.pattern == "Answer:\\s*{{ answer }}"
    assert spec.scorer.flags == ["IGNORECASE"]
    assert spec.scorer.field == "answer"
    assert loaded.base_dir == tmp_path
    assert loaded.resolve("data/x.jsonl") == (tmp_path / "data" / "x.jsonl").resolve()
    assert spec.model_named("qwen2.5-7b") is spec.models[1]
    with pytest.raises(UnknownModel, match="no model 'nope'"):
        spec.model_named("nope")


def test_load_spec_accepts_a_string_path(tmp_path):
    path = write(tmp_path, BASE)
    assert load_spec(str(path)).path == path


def test_unknown_top_level_key(tmp_path):
    path = write(tmp_path, BASE + "bogus: 1\n")
    assert_error(load_error(path), path, 15, "bogus", "unknown key")
    assert str(load_error(path)) == f"{path}:15: bogus: unknown key"


def test_unknown_nested_key_on_its_own_line(tmp_path):
    path = write(tmp_path, edit("  max_tokens: 64\n", "  max_tokens: 64\n  bogus: 1\n"))
    err = load_error(path)
    assert str(err) == f"{path}:11: params.bogus: unknown key"


def test_unknown_key_inside_scorer_names_the_scorer_not_the_union_tag(tmp_path):
    path = write(tmp_path, edit(REGEX_SCORER, "  type: exact\n  strip: true\n  bogus: 1\n"))
    assert str(load_error(path)) == f"{path}:14: scorer.bogus: unknown key"


def test_bad_enum_names_the_list_item_and_its_line(tmp_path):
    text = edit("  flags: [IGNORECASE]\n", "  flags:\n    - IGNORECASE\n    - SHOUTING\n")
    path = write(tmp_path, text)
    err = load_error(path)
    assert_error(err, path, 16, "scorer.flags[1]", "IGNORECASE")
    assert "SHOUTING" not in str(err.field)


def test_bad_enum_in_a_flow_list(tmp_path):
    path = write(tmp_path, edit("  flags: [IGNORECASE]\n", "  flags: [IGNORECASE, WRONG]\n"))
    assert_error(load_error(path), path, 14, "scorer.flags[1]", "Input should be")


def test_bad_provider_enum(tmp_path):
    path = write(tmp_path, edit(MODEL_0, "  - {provider: anthropik, name: claude-sonnet-4-6}\n"))
    assert_error(load_error(path), path, 6, "models[0].provider", "anthropic")


def test_missing_required_key_is_named_under_its_parent(tmp_path):
    path = write(tmp_path, edit("prompt: |\n  Solve: {{ question }}\n", ""))
    err = load_error(path)
    assert str(err) == f"{path}:1: give prompt (one user message) or messages (a chat), one of them"


def test_missing_key_inside_a_mapping_is_on_the_mapping_line(tmp_path):
    path = write(tmp_path, edit("dataset: {path: data/x.jsonl}", "dataset: {}"))
    assert str(load_error(path)) == (
        f"{path}:2: dataset: give path (a file), hf (a Hugging Face dataset) or asset (a "
        "Dagster asset), one of them"
    )


def test_scorer_without_type(tmp_path):
    path = write(tmp_path, edit("  type: regex\n", ""))
    assert_error(load_error(path), path, 11, "scorer", "discriminator 'type'")


def test_json_schema_scorer_without_a_schema_source(tmp_path):
    path = write(tmp_path, edit(REGEX_SCORER, "  type: json_schema\n"))
    assert_error(load_error(path), path, 11, "scorer", "exactly one of schema, schema_path, field")


def test_json_schema_scorer_with_two_schema_sources(tmp_path):
    scorer = "  type: json_schema\n  schema: {type: object}\n  field: schema\n"
    path = write(tmp_path, edit(REGEX_SCORER, scorer))
    assert_error(load_error(path), path, 11, "scorer", "exactly one of")


def test_regex_pattern_with_bad_template_syntax(tmp_path):
    path = write(tmp_path, edit("{{ answer }}'", "{{ answer }'"))
    err = load_error(path)
    assert_error(err, path, 13, "scorer.pattern", "template syntax error")
    assert str(err).startswith(f"{path}:13: scorer.pattern: template syntax error")


def test_openai_compatible_without_base_url(tmp_path):
    path = write(tmp_path, edit(MODEL_1, "  - {provider: openai_compatible, name: qwen2.5-7b}\n"))
    err = load_error(path)
    assert str(err) == f"{path}:7: models[1]: openai_compatible needs base_url"


def test_a_model_from_an_asset_needs_no_base_url_and_an_empty_asset_is_named(tmp_path):
    entry = "  - {provider: openai_compatible, name: candidate, asset: served_model}\n"
    loaded = load_spec(write(tmp_path, edit(MODEL_1, entry)))
    assert loaded.spec.models[1].asset == "served_model"
    assert loaded.spec.models[1].base_url is None
    path = write(tmp_path, edit(MODEL_1, entry.replace("served_model", "''")))
    assert_error(load_error(path), path, 7, "models[1].asset", "at least 1 character")


def test_local_model_must_be_known(tmp_path):
    path = write(tmp_path, edit(MODEL_1, "  - {provider: local, name: no-such-model}\n"))
    assert_error(load_error(path), path, 7, "models[1]", "unknown local model 'no-such-model'")


def test_duplicate_model_names(tmp_path):
    path = write(tmp_path, edit(MODEL_1, "  - {provider: openai, name: claude-sonnet-4-6}\n"))
    err = load_error(path)
    assert_error(err, path, 5, "models", "model names must be unique")
    assert "claude-sonnet-4-6" in err.message


def test_empty_model_list(tmp_path):
    path = write(tmp_path, edit("models:\n" + MODEL_0 + MODEL_1, "models: []\n"))
    assert_error(load_error(path), path, 5, "models", "at least 1 item")


def test_duplicate_yaml_keys(tmp_path):
    path = write(tmp_path, BASE + "name: other\n")
    err = load_error(path)
    assert_error(err, path, 15, None, "duplicate key 'name'")


def test_duplicate_nested_yaml_keys(tmp_path):
    path = write(tmp_path, edit("  max_tokens: 64\n", "  max_tokens: 64\n  temperature: 1\n"))
    assert_error(load_error(path), path, 11, None, "duplicate key 'temperature'")


def test_invalid_yaml_syntax_names_its_line(tmp_path):
    path = write(tmp_path, edit("dataset: {path: data/x.jsonl}", "dataset: {path: data/x.jsonl]"))
    err = load_error(path)
    assert_error(err, path, 2, None, "invalid YAML")


def test_invalid_yaml_indentation(tmp_path):
    path = write(tmp_path, edit("  max_tokens: 64\n", "  max_tokens: 64\n   top_p: 1\n"))
    assert_error(load_error(path), path, 11, None, "invalid YAML")


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", "", "# only a comment\n"])
def test_non_mapping_document(tmp_path, text):
    path = write(tmp_path, text)
    assert_error(load_error(path), path, 1, None, "a spec must be a YAML mapping")


def test_unreadable_file(tmp_path):
    path = tmp_path / "missing.yaml"
    assert_error(load_error(path), path, None, None, "cannot read file")


def test_numeric_pattern_without_the_named_group(tmp_path):
    scorer = "  type: numeric\n  pattern: 'Answer: (\\d+)'\n"
    path = write(tmp_path, edit(REGEX_SCORER, scorer))
    err = load_error(path)
    assert_error(err, path, 13, "scorer.pattern", "no named group 'value'")


def test_numeric_pattern_with_a_custom_group(tmp_path):
    scorer = "  type: numeric\n  pattern: 'Answer: (?P<n>\\d+)'\n  group: n\n"
    loaded = load_spec(write(tmp_path, edit(REGEX_SCORER, scorer)))
    assert isinstance(loaded.spec.scorer, NumericScorer)
    assert loaded.spec.scorer.group == "n"
    scorer = "  type: numeric\n  pattern: 'Answer: (?P<value>\\d+)'\n  group: n\n"
    path = write(tmp_path, edit(REGEX_SCORER, scorer), "y.yaml")
    assert_error(load_error(path), path, 13, "scorer.pattern", "no named group 'n'")


def test_numeric_pattern_that_does_not_compile(tmp_path):
    scorer = "  type: numeric\n  pattern: '(?P<value>\\d+'\n"
    path = write(tmp_path, edit(REGEX_SCORER, scorer))
    assert_error(load_error(path), path, 13, "scorer.pattern", "does not compile")


def test_numeric_negative_tolerance(tmp_path):
    path = write(tmp_path, edit(REGEX_SCORER, "  type: numeric\n  abs_tol: -1\n"))
    assert_error(load_error(path), path, 13, "scorer.abs_tol", "greater than or equal to 0")


def test_json_schema_scorer_with_an_invalid_schema(tmp_path):
    scorer = "  type: json_schema\n  schema:\n    type: 12\n"
    path = write(tmp_path, edit(REGEX_SCORER, scorer))
    err = load_error(path)
    assert_error(err, path, 13, "scorer.schema", "not a valid Draft 2020-12 schema")


def test_json_schema_scorer_with_a_valid_schema(tmp_path):
    scorer = "  type: json_schema\n  schema: {type: object, required: [a]}\n"
    loaded = load_spec(write(tmp_path, edit(REGEX_SCORER, scorer)))
    assert isinstance(loaded.spec.scorer, JsonSchemaScorer)
    assert loaded.spec.scorer.json_schema == {"type": "object", "required": ["a"]}


def test_jinja_syntax_error_in_prompt(tmp_path):
    path = write(tmp_path, edit("Solve: {{ question }}", "Solve: {{ question }"))
    err = load_error(path)
    assert_error(err, path, 3, "prompt", "template syntax error")


def test_jinja_syntax_error_in_system(tmp_path):
    path = write(tmp_path, edit("prompt: |\n", "system: '{% if %}'\nprompt: |\n"))
    assert_error(load_error(path), path, 3, "system", "template syntax error")


def test_bad_spec_name(tmp_path):
    path = write(tmp_path, edit("name: arith", "name: 'two words'"))
    assert_error(load_error(path), path, 1, "name", "should match pattern")


def test_multiple_errors_are_reported_together_sorted_by_line(tmp_path):
    # Written so that pydantic's order (name, prompt, models, params, scorer) is not the
    # file's order: the sort by line is what puts them right.
    text = """\
scorer:
  type: regex
  pattern: '{{ answer }'
params:
  bogus: 1
models:
  - {provider: anthropic, name: a}
  - {provider: openai_compatible, name: b}
prompt: 'Solve {{ question }'
dataset: {path: d.jsonl}
name: 'bad name'
"""
    path = write(tmp_path, text)
    with pytest.raises(InputErrors) as info:
        load_spec(path)
    errors = info.value.errors
    got = [(e.line, e.field) for e in errors]
    assert got == [
        (3, "scorer.pattern"),
        (5, "params.bogus"),
        (8, "models[1]"),
        (9, "prompt"),
        (11, "name"),
    ]
    assert all(e.path == str(path) for e in errors)
    assert str(info.value) == "\n".join(str(e) for e in errors)
    assert str(info.value).splitlines()[0].startswith(f"{path}:3: scorer.pattern: ")


def test_seed_with_an_anthropic_model_is_rejected_at_load(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ndataset: {path: d.jsonl}\nprompt: hi\n"
        "models:\n  - {provider: anthropic, name: claude-sonnet-4-6}\n"
        "params: {max_tokens: 8, seed: 1}\nscorer: {type: exact}\n"
    )
    with pytest.raises(InputError, match=r"s\.yaml:6: params: seed is not a parameter"):
        load_spec(path)


# --- several scorers, the model shorthand, the scripted provider --------------------------

MULTI = """\
name: multi
dataset: {path: data/x.jsonl}
prompt: "{{ question }}"
model: {provider: scripted, name: echo, answer_field: answer}
scorers:
  - {name: a, type: exact}
  - {name: b, type: regex, flags: [NOPE]}
  - {name: a, type: json_valid}
"""


def test_several_scorers_and_a_single_model(tmp_path: Path) -> None:
    path = write(tmp_path, MULTI.replace("flags: [NOPE]", "flags: [IGNORECASE]").replace(
        "{name: a, type: json_valid}", "{name: c, type: json_valid}"))  # fmt: skip
    spec = load_spec(path).spec
    assert [s.name for s in spec.scorers] == ["a", "b", "c"] and spec.primary_scorer == "a"
    assert [m.name for m in spec.models] == ["echo"] and spec.models[0].provider == "scripted"
    # The shorthand hashes as the list it stands for.
    from gradetrail_lib.spec.spec import spec_document_fields

    fields = spec_document_fields(spec)
    assert "model" not in fields and fields["models"][0]["name"] == "echo"


VALID_MULTI = MULTI.replace("flags: [NOPE]", "flags: [IGNORECASE]")


def test_scorer_errors_name_the_entry(tmp_path: Path) -> None:
    err = load_error(write(tmp_path, MULTI))
    assert_error(err, tmp_path / "x.yaml", 7, "scorers[1].flags[0]", "Input should be")
    err = load_error(write(tmp_path, VALID_MULTI))
    assert_error(err, tmp_path / "x.yaml", 5, "scorers", "scorer names must be unique: a")


def test_a_scorers_entry_needs_a_name(tmp_path: Path) -> None:
    err = load_error(write(tmp_path, VALID_MULTI.replace("name: b, ", "")))
    assert "every entry of scorers needs a name (entry 1 has none)" in str(err)


def test_the_shorthand_scorer_is_named_score(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, BASE)).spec
    assert [s.name for s in spec.scorers] == ["score"]


def test_scripted_models_need_exactly_one_answer(tmp_path: Path) -> None:
    both = VALID_MULTI.replace("name: a, type: json_valid", "name: c, type: json_valid")
    err = load_error(
        write(tmp_path, both.replace("answer_field: answer", "text: x, answer_field: a"))
    )
    assert "scripted needs exactly one of answer_field, text" in str(err)
    err = load_error(write(tmp_path, BASE.replace(
        "name: claude-sonnet-4-6}", "name: claude-sonnet-4-6, text: hi}")))  # fmt: skip
    assert "answer_field and text are settings of provider scripted only" in str(err)


def test_one_mapping_from_pydantic_errors() -> None:
    """`input_errors` is how every loader (spec file, spec in memory, model, results and
    history records) words pydantic's errors: a spec's unknown key, a record's unknown or
    missing field, a validator's message without pydantic's "Value error, "."""
    from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

    from gradetrail_lib.errors import (
        FIELD_WORDS,
        first_of,
        indexed,
        input_errors,
        on_line,
        one_or_all,
    )

    class Item(BaseModel):
        model_config = ConfigDict(extra="forbid")
        n: int

        @field_validator("n")
        @classmethod
        def _small(cls, n: int) -> int:
            if n > 9:
                raise ValueError("must be below 10")
            return n

    class Doc(BaseModel):
        model_config = ConfigDict(extra="forbid")
        items: list[Item]

    with pytest.raises(ValidationError) as info:
        Doc.model_validate({"items": [{"n": 12}, {"m": 1}]})
    exc = info.value
    assert [str(e) for e in input_errors(exc, "s.yaml")] == [
        "s.yaml: items.0.n: must be below 10",
        "s.yaml: items.1.n: Field required",
        "s.yaml: items.1.m: unknown key",
    ]
    record = input_errors(exc, "r.jsonl", on_line(3, indexed), words=FIELD_WORDS)
    assert [str(e) for e in record[1:]] == [
        "r.jsonl:3: items[1].n: missing",
        "r.jsonl:3: items[1].m: unknown field",
    ]
    located = input_errors(exc, "s.yaml", lambda loc: (indexed(loc[:2]), len(loc)))
    assert (located[0].field, located[0].line) == ("items[0]", 3)
    assert str(first_of(located)) == "s.yaml:3: items[0]: must be below 10 (and 2 more)"
    assert first_of(located[:1]) is located[0]
    assert isinstance(one_or_all(located), InputErrors)
    assert one_or_all(located[:1]) is located[0]
