"""Scorers: exact, regex, numeric, json_schema; scores in [0, 1] with a reason."""

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.cache.memory import MemoryCache
from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.records import RecordBuilder
from gradetrail_lib.engine.responses import Responses
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.base import ModelResponse
from gradetrail_lib.providers.pricing import load_prices
from gradetrail_lib.results.trace import SCHEMA_VERSION, TraceRecord
from gradetrail_lib.scorers import Score, ScoreInput, Scorer, build_scorer
from gradetrail_lib.scorers.regex import compile_pattern, literal_text
from gradetrail_lib.spec.spec import AnyScorer, LoadedSpec, Spec
from tests.conftest import write_spec
from tests.support.plans import pushed, whole

DATASET = "data/x.jsonl"
_CONFIG = TypeAdapter(AnyScorer)


def scorer(config: dict[str, Any], base_dir: Path | None = None) -> Scorer:
    return build_scorer(_CONFIG.validate_python(config), base_dir or Path("."))


def sample(sample_id: str = "s1", line: int = 1, **fields: Any) -> Sample:
    return Sample(id=sample_id, fields={"id": sample_id, **fields}, line=line)


def apply(s: Scorer, response: str, smp: Sample) -> Score:
    """One scorer on one response, as the pipeline calls it (no model calls)."""
    record = TraceRecord(
        schema_version=SCHEMA_VERSION,
        id=smp.id,
        repeat=0,
        messages=[],
        calls=[],
        response=response,
        stop_reason="stop",
        scores={},
        outcome="scored",
        failure_mode=None,
    )
    result = s.score(ScoreInput(smp, response, record), [])
    assert isinstance(result, Score)
    return result


def score(config: dict[str, Any], response: str, base_dir: Path | None = None, **fields) -> Score:
    s = scorer(config, base_dir)
    smp = sample(**fields)
    s.check(smp, [], DATASET)
    result = apply(s, response, smp)
    assert 0.0 <= result.value <= 1.0
    assert result.reason.strip()
    return result


# --- exact -----------------------------------------------------------------------------


def test_exact_default_normalises_everything():
    assert score({"type": "exact"}, "  Paris \n", answer="paris").value == 1.0
    assert score({"type": "exact"}, "New   York\tCity", answer="new york city").value == 1.0
    assert score({"type": "exact"}, "Lyon", answer="Paris").value == 0.0


def test_exact_strip_on_off():
    on = {"type": "exact", "lower": False, "collapse_whitespace": False}
    assert score(on, "  Paris\n", answer="Paris").value == 1.0
    off = {**on, "strip": False}
    assert score(off, "  Paris\n", answer="Paris").value == 0.0
    assert score(off, "Paris", answer="Paris").value == 1.0


def test_exact_strip_off_is_respected_with_collapse_on():
    config = {"type": "exact", "strip": False}
    assert score(config, " Paris", answer="Paris").value == 0.0
    assert score(config, " Paris  ", answer=" paris ").value == 1.0


def test_exact_lower_on_off():
    assert score({"type": "exact"}, "PARIS", answer="paris").value == 1.0
    assert score({"type": "exact", "lower": False}, "PARIS", answer="paris").value == 0.0


def test_exact_collapse_whitespace_on_off():
    assert score({"type": "exact"}, "a  b\n c", answer="a b c").value == 1.0
    off = {"type": "exact", "collapse_whitespace": False}
    assert score(off, "a  b\n c", answer="a b c").value == 0.0
    assert score(off, " a b c ", answer="a b c").value == 1.0  # strip still on


def test_exact_all_off_is_byte_equality():
    config = {"type": "exact", "strip": False, "lower": False, "collapse_whitespace": False}
    assert score(config, "Paris", answer="Paris").value == 1.0
    assert score(config, "paris", answer="Paris").value == 0.0


def test_exact_other_field_and_non_string_expected():
    assert score({"type": "exact", "field": "label"}, "42", label=42).value == 1.0
    result = score({"type": "exact"}, "no", answer="yes")
    assert "yes" in result.reason and "no" in result.reason


# --- regex -----------------------------------------------------------------------------

ANSWER = {"type": "regex", "pattern": r"Answer:\s*{{ answer }}\s*\.?$"}


def test_regex_template_is_rendered_per_sample():
    s = scorer(ANSWER)
    assert apply(s, "... Answer: 42", sample("a", answer=42)).value == 1.0
    assert apply(s, "... Answer: 42", sample("b", answer=7)).value == 0.0
    assert apply(s, "... Answer: 7.", sample("b", answer=7)).value == 1.0


def test_regex_inserted_values_are_escaped():
    s = scorer(ANSWER)
    assert apply(s, "Answer: 385", sample("a", answer="3.5")).value == 0.0
    assert apply(s, "Answer: 3.5", sample("a", answer="3.5")).value == 1.0
    assert apply(s, "Answer: 3.5", sample("b", answer=3.5)).value == 1.0
    assert apply(s, "Answer: (a)", sample("c", answer="(a)")).value == 1.0
    assert apply(s, "Answer: a", sample("c", answer="(a)")).value == 0.0
    assert apply(s, "Answer: aaa", sample("d", answer="a+")).value == 0.0
    assert apply(s, "Answer: a+", sample("d", answer="a+")).value == 1.0


def test_regex_flags():
    plain = {"type": "regex", "pattern": "answer: {{ answer }}"}
    assert score(plain, "ANSWER: 4", answer=4).value == 0.0
    assert score({**plain, "flags": ["IGNORECASE"]}, "ANSWER: 4", answer=4).value == 1.0
    anchored = {"type": "regex", "pattern": "^{{ answer }}$"}
    assert score(anchored, "work\n4\nmore", answer=4).value == 0.0
    assert score({**anchored, "flags": ["MULTILINE"]}, "work\n4\nmore", answer=4).value == 1.0
    dotted = {"type": "regex", "pattern": "start.*{{ answer }}"}
    assert score(dotted, "start\n4", answer=4).value == 0.0
    assert score({**dotted, "flags": ["DOTALL"]}, "start\n4", answer=4).value == 1.0


def test_regex_fullmatch_vs_search():
    search = {"type": "regex", "pattern": "{{ answer }}"}
    full = {**search, "match": "fullmatch"}
    assert score(search, "The answer is 42", answer=42).value == 1.0
    assert score(full, "The answer is 42", answer=42).value == 0.0
    assert score(full, "42", answer=42).value == 1.0
    assert "fullmatch" in score(full, "x42", answer=42).reason


def test_regex_default_pattern_is_the_escaped_field():
    config = {"type": "regex", "field": "label"}
    assert score(config, "so it is a+b here", label="a+b").value == 1.0
    assert score(config, "so it is aab here", label="a+b").value == 0.0
    assert score({"type": "regex"}, "it is 12", answer=12).value == 1.0


def test_regex_check_names_the_sample_when_the_template_field_is_missing():
    s = scorer(ANSWER)
    with pytest.raises(InputError) as info:
        s.check(sample("s5", line=9, label="x"), [], DATASET)
    err = info.value
    assert (err.path, err.line, err.field) == (DATASET, 9, "scorer.pattern")
    assert "'s5'" in err.message and "answer" in err.message


def test_regex_check_names_the_sample_when_the_default_field_is_missing():
    with pytest.raises(InputError) as info:
        scorer({"type": "regex", "field": "label"}).check(sample("s6", line=2), [], DATASET)
    assert (info.value.line, info.value.field) == (2, "label")
    assert "'s6'" in info.value.message


def test_regex_check_reports_a_pattern_that_does_not_compile():
    with pytest.raises(InputError, match="does not compile") as info:
        scorer({"type": "regex", "pattern": "({{ answer }}"}).check(sample(answer=1), [], DATASET)
    assert info.value.field == "scorer.pattern"


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("Answer: 42", "Answer: 42"),
        ("", ""),
        (r"3\.5 \(a\) \$x\^2 a\+b \\ \-\&\~\#\ ", r"3.5 (a) $x^2 a+b \ -&~# "),
        ("a-b & c~d # e", "a-b & c~d # e"),
        ("Grüße, 東京", "Grüße, 東京"),
    ],
)
def test_literal_text_undoes_escapes_of_plain_text(source: str, text: str) -> None:
    assert literal_text(source) == text
    assert re.fullmatch(source, text)  # what re makes of it, to be sure of the table


@pytest.mark.parametrize(
    "source",
    [r"a.b", r"^a", r"a$", r"a*", r"a+", r"a?", r"a{2}", r"[ab]", r"a|b", r"(a)", r"\d",
     r"\b4\b", r"\1", r"\n", "a\\", r"\é"],
)  # fmt: skip
def test_patterns_with_a_meaning_of_their_own_are_not_literal(source: str) -> None:
    assert literal_text(source) is None


def test_literal_and_regex_paths_agree_on_random_patterns_and_texts() -> None:
    rng = random.Random(20261202)
    alphabet = "ab.+*?()[]{}|^$\\- #&~\nÅå東"
    for _ in range(3000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4)))
        source = rng.choice(["", "x", "Answer: "]) + re.escape(value)
        texts = [
            "".join(rng.choice(alphabet + "x") for _ in range(rng.randint(0, 8))),
            "Answer: " + value,
            value,
            "say " + value + " twice " + value,
        ]
        for flags in (re.NOFLAG, re.MULTILINE | re.DOTALL, re.IGNORECASE):
            ours = compile_pattern(source, flags)
            theirs = re.compile(source, flags)
            assert (ours.literal is not None) == (not flags & re.IGNORECASE)
            for text in texts:
                for full in (False, True):
                    found = theirs.fullmatch(text) if full else theirs.search(text)
                    assert ours.find(text, full=full) == (found.group(0) if found else None)


def test_ignorecase_keeps_re_unicode_case_folding() -> None:
    # The Kelvin sign folds to "k" in re: a plain lower() comparison would miss it.
    config = {"type": "regex", "pattern": "ok {{ answer }}", "flags": ["IGNORECASE"]}
    assert score(config, "O\u212a 4", answer=4).value == 1.0


# --- numeric ---------------------------------------------------------------------------

NUM = {"type": "numeric"}


def test_numeric_takes_the_last_number():
    assert score(NUM, "3 apples and 5 pears make 8", answer=8).value == 1.0
    assert score(NUM, "8 is wrong, it is 9", answer=8).value == 0.0


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ("Total: 1,234", 1234),
        ("Total: $1,234,567.50", 1234567.5),
        ("It is -7.", -7),
        ("pi is about 3.14", 3.14),
        ("half: .5", 0.5),
        ("12345", 12345),
        ("1e3", 1000),
    ],
)
def test_numeric_number_formats(response, expected):
    assert score(NUM, response, answer=expected).value == 1.0


def test_numeric_expected_field_as_string():
    assert score(NUM, "1234", answer="1,234").value == 1.0
    assert score(NUM, "-2.5", answer=" -2.5 ").value == 1.0


@pytest.mark.parametrize(
    "answer", ["42", "0042", "\u0663", "\u00b2", "1,234", " 7 ", "$5", "", "4 2"]
)
def test_numeric_expected_from_digits_is_what_parse_number_says(answer):
    """The expected value of a digits-only string is read without the number pattern;
    it must agree with it (Unicode digits, superscripts and all)."""
    from gradetrail_lib.scorers.numeric import NumericMatch, parse_number

    numeric = scorer(NUM, None)
    assert isinstance(numeric, NumericMatch)
    expected = parse_number(answer)
    sample = Sample("s", {"answer": answer}, 1)
    if expected is None:
        with pytest.raises(ValueError):
            numeric.expected(sample)
    else:
        assert numeric.expected(sample) == expected


# The number pattern as first written, without the lookahead that speeds it up.
_SIGN = r"(?:(?<![\w.])[-+])?"
_PLAIN_NUMBER = re.compile(
    rf"{_SIGN}(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|{_SIGN}\.\d+"
)


@given(st.text(alphabet="0123456789.,eE+-$ a_x\u0663\u00b2\n", max_size=24))
def test_the_number_pattern_finds_what_it_found_without_its_lookahead(text: str) -> None:
    from gradetrail_lib.scorers.numeric import NUMBER

    assert NUMBER.findall(text) == _PLAIN_NUMBER.findall(text)


def test_numeric_negative_is_not_positive():
    assert score(NUM, "It is -7", answer=7).value == 0.0


def test_numeric_exact_by_default():
    assert score(NUM, "42.0001", answer=42).value == 0.0
    assert score(NUM, "42.0", answer=42).value == 1.0


def test_numeric_abs_tol():
    config = {"type": "numeric", "abs_tol": 0.5}
    assert score(config, "42.4", answer=42).value == 1.0
    assert score(config, "41.5", answer=42).value == 1.0
    assert score(config, "42.6", answer=42).value == 0.0


def test_numeric_rel_tol():
    config = {"type": "numeric", "rel_tol": 0.01}
    assert score(config, "1005", answer=1000).value == 1.0
    assert score(config, "1020", answer=1000).value == 0.0
    assert score({"type": "numeric", "rel_tol": 0.001}, "1005", answer=1000).value == 0.0


def test_numeric_named_group_pattern():
    config = {"type": "numeric", "pattern": r"Answer:\s*(?P<value>-?[\d,]+(?:\.\d+)?)"}
    assert score(config, "Answer: 12. Check: 99", answer=12).value == 1.0
    assert score(config, "Answer: 1,200 (not 5)", answer=1200).value == 1.0
    custom = {"type": "numeric", "pattern": r"=\s*(?P<n>\d+)", "group": "n"}
    assert score(custom, "2+2 = 4, so 10", answer=4).value == 1.0


def test_numeric_no_number_found_scores_zero_with_a_reason():
    result = score(NUM, "I do not know", answer=4)
    assert result.value == 0.0
    assert "no number found" in result.reason
    config = {"type": "numeric", "pattern": r"Answer:\s*(?P<value>\d+)"}
    result = score(config, "It is 4", answer=4)
    assert result.value == 0.0 and "no number found" in result.reason


def test_numeric_check_rejects_a_non_numeric_expected_value():
    with pytest.raises(InputError) as info:
        scorer(NUM).check(sample("s3", line=8, answer="four"), [], DATASET)
    assert (info.value.path, info.value.line, info.value.field) == (DATASET, 8, "answer")
    assert "'s3'" in info.value.message
    with pytest.raises(InputError, match="boolean"):
        scorer(NUM).check(sample(answer=True), [], DATASET)


def test_numeric_check_names_the_sample_when_the_field_is_missing():
    with pytest.raises(InputError) as info:
        scorer({"type": "numeric", "field": "total"}).check(sample("s4", line=6), [], DATASET)
    assert (info.value.line, info.value.field) == (6, "total")
    assert "'s4'" in info.value.message and "'total'" in info.value.message


# --- json_schema -----------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
    "required": ["items"],
}
INLINE = {"type": "json_schema", "schema": SCHEMA}


def test_json_schema_inline_valid():
    assert score(INLINE, '{"items": [1, 2]}').value == 1.0


def test_json_schema_inline_invalid_names_the_path():
    result = score(INLINE, '{"items": [1, "two"]}')
    assert result.value == 0.0
    assert "items/1" in result.reason
    missing = score(INLINE, '{"other": 1}')
    assert missing.value == 0.0 and "(root)" in missing.reason and "items" in missing.reason


def test_json_schema_fenced_json():
    assert score(INLINE, '```json\n{"items": [3]}\n```').value == 1.0
    assert score(INLINE, '  ```\n{"items": [3]}\n```\n').value == 1.0


def test_json_schema_not_json():
    result = score(INLINE, "Sure! Here it is: {items: [1]}")
    assert result.value == 0.0
    assert "not JSON" in result.reason


def test_json_schema_from_a_sample_field():
    config = {"type": "json_schema", "field": "schema"}
    assert score(config, '"hello"', schema={"type": "string"}).value == 1.0
    assert score(config, "12", schema={"type": "string"}).value == 0.0


def test_json_schema_field_check_names_the_sample():
    s = scorer({"type": "json_schema", "field": "schema"})
    with pytest.raises(InputError) as info:
        s.check(sample("s2", line=4), [], DATASET)
    assert (info.value.line, info.value.field) == (4, "schema")
    assert "'s2'" in info.value.message
    with pytest.raises(InputError, match="Draft 2020-12") as info:
        s.check(sample("s3", line=5, schema={"type": 12}), [], DATASET)
    assert (info.value.path, info.value.line) == (DATASET, 5)


def test_json_schema_from_a_file(tmp_path):
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "s.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    config = {"type": "json_schema", "schema_path": "schemas/s.json"}
    assert score(config, '{"items": []}', base_dir=tmp_path).value == 1.0
    result = score(config, '{"items": [true]}', base_dir=tmp_path)
    assert result.value == 0.0 and "items/0" in result.reason


def test_json_schema_file_errors_name_the_file(tmp_path):
    config = {"type": "json_schema", "schema_path": "s.json"}
    with pytest.raises(InputError, match="cannot read schema"):
        scorer(config, tmp_path)
    (tmp_path / "s.json").write_text('{\n  "type": "object",\n  oops\n}', encoding="utf-8")
    with pytest.raises(InputError) as info:
        scorer(config, tmp_path)
    assert info.value.path == str((tmp_path / "s.json").resolve())
    assert info.value.line == 3
    (tmp_path / "s.json").write_text('{"type": 12}', encoding="utf-8")
    with pytest.raises(InputError, match="Draft 2020-12"):
        scorer(config, tmp_path)


# --- every scorer ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "response", "fields"),
    [
        ({"type": "exact"}, "x", {"answer": "x"}),
        ({"type": "exact"}, "", {"answer": "x"}),
        (ANSWER, "Answer: 1", {"answer": 1}),
        (ANSWER, "", {"answer": 1}),
        (NUM, "1", {"answer": 1}),
        (NUM, "", {"answer": 1}),
        ({"type": "numeric", "rel_tol": 0.5}, "-1e308", {"answer": 1e308}),
        (INLINE, '{"items": []}', {}),
        (INLINE, "", {}),
        (INLINE, "x" * 500, {}),
    ],
)
def test_every_score_is_in_range_with_a_reason(config, response, fields):
    result = score(config, response, **fields)
    assert result.value in (0.0, 1.0)


def test_score_outside_range_is_refused():
    with pytest.raises(ValueError):
        Score(1.5, "too good")
    with pytest.raises(ValueError):
        Score(-0.1, "too bad")


# --- score_all: a scorer that raises marks only its sample -------------------------------


def response(text: str, stop: str = "stop") -> ModelResponse:
    return ModelResponse(
        text=text,
        served_model="claude-haiku-4-5-20251001",
        stop_reason=stop,  # type: ignore[arg-type]
        input_tokens=100,
        output_tokens=20,
        latency_s=0.5,
    )


def test_score_all_marks_only_the_sample_whose_scorer_raised(tmp_path):
    (tmp_path / "data").mkdir()
    ok = {"type": "object", "required": ["a"]}
    # A valid schema whose $ref cannot be resolved: check() accepts it, validation raises.
    broken = {"$ref": "urn:gradetrail:nowhere"}
    lines = [
        {"id": "good", "schema": ok},
        {"id": "bad", "schema": broken},
        {"id": "wrong", "schema": ok},
        {"id": "cut", "schema": ok},
        {"id": "lost", "schema": ok},
    ]
    (tmp_path / "data" / "x.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8"
    )
    spec = Spec.model_validate(
        {
            "name": "s",
            "dataset": {"path": "data/x.jsonl"},
            "prompt": "Give JSON for {{ id }}",
            "models": [{"provider": "anthropic", "name": "claude-haiku-4-5"}],
            "scorer": {"type": "json_schema", "field": "schema"},
        }
    )
    the_plan = whole(plan(LoadedSpec(spec=spec, path=tmp_path / "s.yaml"), spec.models[0]))
    key = {item.sample.id: item.request.key for item in the_plan.items}
    responses = Responses()
    responses.responses[key["good"]] = response('{"a": 1}')
    responses.responses[key["bad"]] = response('{"a": 1}')
    responses.responses[key["wrong"]] = response('{"b": 1}')
    responses.responses[key["cut"]] = response('{"a":', stop="max_tokens")
    responses.cache_hits.add(key["good"])

    builder = RecordBuilder(the_plan, MemoryCache(), LocalBackend(), prices=load_prices())
    rows = {r.id: r for part in pushed(builder, responses).parts(responses) for r in part}
    assert list(rows) == ["good", "bad", "wrong", "cut", "lost"]

    assert rows["bad"].outcome == "scorer_error"
    assert rows["bad"].failure_mode == "scorer_error"
    assert rows["bad"].score_of("score") is None
    assert rows["bad"].scores["score"].error == "scorer_error"
    assert rows["bad"].scores["score"].reason.startswith("scorer raised ")
    assert rows["bad"].response == '{"a": 1}'

    good = rows["good"]
    assert (good.outcome, good.score_of("score"), good.failure_mode) == ("scored", 1.0, None)
    assert good.target is not None and good.target.cache_hit is True
    assert rows["wrong"].target is not None and rows["wrong"].target.cache_hit is False
    assert (rows["wrong"].outcome, rows["wrong"].score_of("score")) == ("scored", 0.0)
    assert rows["wrong"].failure_mode == "wrong_answer"
    assert (rows["cut"].score_of("score"), rows["cut"].failure_mode) == (0.0, "truncated")
    lost = rows["lost"]
    assert (lost.outcome, lost.failure_mode) == ("provider_error", "provider_error")
    assert lost.score_of("score") is None and lost.target is not None
    assert lost.target.cost_usd is None and lost.target.error

    # 100 input and 20 output tokens at claude-haiku-4-5's $1 / $5 per million.
    assert good.target.cost_usd == pytest.approx((100 * 1.0 + 20 * 5.0) / 1_000_000)
    assert all(r.scores["score"].reason for r in rows.values())


BUILD_AND_REPORT_JSONSCHEMA = """
import sys
from pathlib import Path
from gradetrail_lib.scorers import build_scorer
from gradetrail_lib.spec.spec import load_spec
for path in sys.argv[1:]:
    loaded = load_spec(Path(path))
    build_scorer(loaded.spec.scorers[0], loaded.base_dir)
    print("jsonschema" in sys.modules)
"""


def test_jsonschema_is_imported_only_for_a_json_schema_scorer(tmp_path: Path) -> None:
    # It is a quarter of the CLI's start-up; every other spec does without it. One fresh
    # process builds a numeric scorer (no jsonschema yet), then a json_schema one (now it).
    specs = [
        write_spec(tmp_path / f"{name}.yaml", base_url="http://127.0.0.1:1/v1", scorer=scorer)
        for name, scorer in [
            ("numeric", "{type: numeric}"),
            ("schema", "{type: json_schema, schema: {type: object}}"),
        ]
    ]
    done = subprocess.run(
        [sys.executable, "-c", BUILD_AND_REPORT_JSONSCHEMA, *map(str, specs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


# --- rouge_l, json_valid ---------------------------------------------------------------


def test_rouge_l_matches_the_values_rouge_score_publishes():
    from gradetrail_lib.scorers.rouge_l import rouge_l

    # rouge-score's README: target "The quick brown fox jumps over the lazy dog",
    # prediction "The quick brown dog jumps on the log." gives rougeL
    # precision 0.625, recall 0.5556, fmeasure 0.5882.
    p, r, f = rouge_l("The quick brown fox jumps over the lazy dog",
                      "The quick brown dog jumps on the log.")  # fmt: skip
    assert (p, r) == (0.625, 5 / 9)
    assert f == pytest.approx(0.5882352941176471)
    assert rouge_l("a b c", "x y") == (0.0, 0.0, 0.0)
    assert rouge_l("", "anything") == (0.0, 0.0, 0.0)
    result = score({"type": "rouge_l"}, "The cat, sat!", answer="the cat sat")
    assert result.value == 1.0 and "ROUGE-L F 1.0000" in result.reason


def test_rouge_l_lcs_against_a_brute_force_on_random_token_lists():
    from itertools import combinations

    from gradetrail_lib.scorers.rouge_l import lcs_length

    rng = random.Random(7)
    for _ in range(200):
        a = [rng.choice("abc") for _ in range(rng.randint(0, 7))]
        b = [rng.choice("abc") for _ in range(rng.randint(0, 7))]
        subsequences = {tuple(c) for k in range(len(a) + 1) for c in combinations(a, k)}
        brute = max(
            len(s) for s in subsequences
            if any(list(s) == list(c) for c in combinations(b, len(s)))
        )  # fmt: skip
        assert lcs_length(a, b) == brute


def test_json_valid():
    assert score({"type": "json_valid"}, '{"a": [1, 2]}').value == 1.0
    assert score({"type": "json_valid"}, '```json\n{"a": 1}\n```').value == 1.0
    bad = score({"type": "json_valid"}, '{"a": ')
    assert bad.value == 0.0 and bad.reason.startswith("not JSON")


# --- judge grades ----------------------------------------------------------------------


def test_judge_grade_letters_and_scales():
    from gradetrail_lib.scorers.base import ScoreFailed
    from gradetrail_lib.scorers.judge import Grade

    letters = Grade()
    assert letters.to_score("fine. GRADE: C").value == 1.0
    assert letters.to_score("GRADE:P").value == 0.5
    assert letters.to_score("GRADE: I").value == 0.0
    with pytest.raises(ScoreFailed) as unknown:
        letters.to_score("GRADE: X")
    assert unknown.value.kind == "judge_error" and "not one of C, I, P" in unknown.value.reason
    with pytest.raises(ScoreFailed, match="does not match"):
        letters.to_score("no grade here")
    scale = Grade(pattern=r"SCORE:\s*(\d+)", scale=(1, 10))
    assert scale.to_score("SCORE: 1").value == 0.0
    assert scale.to_score("SCORE: 10").value == 1.0
    assert scale.to_score("SCORE: 4").value == pytest.approx(1 / 3)
    with pytest.raises(ScoreFailed, match="outside the scale"):
        scale.to_score("SCORE: 11")
    with pytest.raises(ValueError, match="values or scale"):
        Grade(values={"A": 1.0}, scale=(0, 1))
    with pytest.raises(ValueError, match="needs a group"):
        Grade(pattern="GRADE")
