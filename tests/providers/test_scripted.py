"""Provider `scripted`: answers in-process from a sample field or a fixed text, with zero
usage and latency, cached like any provider's answers."""

import json
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.errors import InputError
from gradetrail_lib.spec.spec import load_spec
from tests.support.plans import whole


def project(tmp_path: Path, model: str) -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    rows = [{"id": "a", "gold": "Paris"}, {"id": "b", "gold": "Rome"}, {"id": "c"}]
    (tmp_path / "data" / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    (tmp_path / "data" / "bad.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\ndataset: {path: data/x.jsonl}\nprompt: 'Capital {{ id }}?'\n"
        f"model: {model}\nscorer: {{type: exact, field: gold}}\n"
    )
    return spec


def test_answers_from_a_field_with_zero_usage_and_are_cached(tmp_path: Path) -> None:
    spec = project(tmp_path, "{provider: scripted, name: oracle, answer_field: gold}")
    kwargs = {"results_root": tmp_path / "r", "cache": tmp_path / "c.db"}
    (done,) = run_spec(spec, **kwargs)
    assert [r.response for r in done.records] == ["Paris", "Rome"]
    assert [r.score_of("score") for r in done.records] == [1.0, 1.0]
    call = done.records[0].target
    assert call is not None
    assert (call.input_tokens, call.output_tokens, call.latency_s) == (0, 0, 0.0)
    assert call.cost_usd == 0.0 and call.served_model == "oracle"
    assert done.manifest.target.calls == 2
    (again,) = run_spec(spec, **kwargs)
    assert again.manifest.target.calls == 0 and again.manifest.target.cache_hits == 2


def test_a_fixed_text_and_its_key(tmp_path: Path) -> None:
    spec = project(tmp_path, "{provider: scripted, name: parrot, text: Paris}")
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    assert [r.score_of("score") for r in done.records] == [1.0, 0.0]
    # The answer is what the "model" says, so it is in the key: another text, other keys.
    other = project(tmp_path, "{provider: scripted, name: parrot, text: Rome}")
    keys = {
        i.request.key for i in whole(plan(load_spec(other), load_spec(other).spec.models[0])).items
    }
    assert keys.isdisjoint({r.target.request_key for r in done.records if r.target})


def test_a_sample_without_the_answer_field_is_an_input_error(tmp_path: Path) -> None:
    spec = project(tmp_path, "{provider: scripted, name: oracle, answer_field: gold}")
    spec.write_text(spec.read_text().replace("data/x.jsonl", "data/bad.jsonl"))
    loaded = load_spec(spec)
    with pytest.raises(InputError) as caught:
        plan(loaded, loaded.spec.models[0])
    assert (caught.value.path, caught.value.line, caught.value.field) == (
        "data/bad.jsonl", 3, "gold"
    )  # fmt: skip
