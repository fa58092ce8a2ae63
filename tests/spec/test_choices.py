"""Multiple-choice specs: what loads and what is refused (naming file, line and field),
how a sample's options, gold and few-shot context render, and how a letter is read."""

import json
from pathlib import Path

import pytest

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.errors import InputError
from gradetrail_lib.spec.choices import ChoiceRenderer, FewShot, lettered, read_letter
from gradetrail_lib.spec.spec import load_spec

ROWS = [
    {"id": "q1", "q": "2 + 2 =", "opts": ["3", "4", "5"], "key": 1, "answer": "4"},
    {"id": "q2", "q": "Sky colour?", "opts": ["blue", "green"], "key": "0", "answer": "blue"},
    {
        "id": "q3",
        "q": "Capital of France?",
        "opts": ["Rome", "Paris"],
        "key": "Paris",
        "answer": "x",
    },
]

SPEC = """\
name: mc
dataset: {path: data.jsonl}
prompt: "Q: {{ q }}\\nA:"
choices: "{{ opts }}"
gold: "{{ key }}"
model: {provider: local, name: smollm2-135m}
"""


def write(tmp_path: Path, text: str, rows: list[dict[str, object]] = ROWS) -> Path:
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_a_multiple_choice_spec_gets_the_methods_scorers(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, SPEC)).spec
    assert spec.by_loglikelihood
    assert [(s.name, s.metric) for s in spec.scorers] == [  # type: ignore[attr-defined]
        ("acc", "acc"),
        ("acc_norm", "acc_norm"),
        ("acc_bytes", "acc_bytes"),
    ]
    with_mi = load_spec(write(tmp_path, SPEC + 'unconditional_context: ""\n')).spec
    assert [s.name for s in with_mi.scorers][-1] == "acc_mutual_info"
    generated = load_spec(
        write(tmp_path, SPEC.replace("local, name: smollm2-135m", "anthropic, name: c")
              + "method: generate\n")
    ).spec  # fmt: skip
    assert [s.name for s in generated.scorers] == ["acc"]


def test_a_chat_only_provider_is_refused_naming_it_and_generate(tmp_path: Path) -> None:
    text = SPEC.replace("{provider: local, name: smollm2-135m}", "{provider: anthropic, name: c}")
    with pytest.raises(InputError) as info:
        load_spec(write(tmp_path, text))
    assert "provider anthropic gives no log-likelihoods" in info.value.message
    assert "method: generate" in info.value.message
    # The same provider named beside the spec (`--models`) is refused at plan time too.
    loaded = load_spec(write(tmp_path, SPEC))
    from gradetrail_lib.providers.registry import ModelConfig

    with pytest.raises(InputError, match="provider gemini gives no log-likelihoods"):
        plan(loaded, ModelConfig(provider="gemini", name="g"))


@pytest.mark.parametrize(
    ("old", "new", "field", "text"),
    [
        ('gold: "{{ key }}"\n', "", None, "give choices and gold together"),
        ('choices: "{{ opts }}"', 'choices: "Q {{ opts }}"', "choices", "write one expression"),
        ('gold: "{{ key }}"', 'gold: "{{ key"', "gold", "write one expression"),
        ("model:", "repeats: 3\nmodel:", None, "repeats must be 1"),
        ("model:", "scorer: {type: exact}\nmodel:", None, "score with type: choice"),
    ],
)
def test_bad_declarations_name_the_field(
    tmp_path: Path, old: str, new: str, field: str | None, text: str
) -> None:
    path = write(tmp_path, SPEC.replace(old, new))
    with pytest.raises(InputError) as info:
        load_spec(path)
    assert info.value.path == str(path)
    assert info.value.field == field
    assert text in info.value.message
    if field is not None:
        assert (
            info.value.line
            == SPEC.replace(old, new)
            .splitlines()
            .index(
                next(line for line in SPEC.replace(old, new).splitlines() if line.startswith(field))
            )
            + 1
        )


def test_options_and_gold_render_from_each_sample() -> None:
    renderer = ChoiceRenderer("Q: {{ q }}\nA:", "{{ opts }}", "{{ key }}", " ")
    samples = [Sample(id=r["id"], fields=r, line=i + 1) for i, r in enumerate(ROWS)]  # type: ignore[arg-type]
    rendered = [renderer.render(s, "data.jsonl") for s in samples]
    assert [r.gold for r in rendered] == [1, 0, 1]  # an int, a text of digits, an option's text
    assert rendered[0].context == "Q: 2 + 2 =\nA:"
    assert rendered[0].options == ["3", "4", "5"]
    listed = ChoiceRenderer("{{ q }}", ["{{ opts[1] }}", "{{ opts[0] }}"], "{{ 0 }}", " ")
    assert listed.render(samples[1], "d").options == ["green", "blue"]


def test_a_sample_that_cannot_render_names_its_line_and_field() -> None:
    renderer = ChoiceRenderer("{{ q }}", "{{ opts }}", "{{ key }}", " ")
    bad_gold = Sample(id="b", fields={"q": "?", "opts": ["a", "b"], "key": 7}, line=4)
    with pytest.raises(InputError) as info:
        renderer.render(bad_gold, "d.jsonl")
    assert (info.value.line, info.value.field) == (4, "gold")
    assert "neither an option's index (0 to 1)" in info.value.message
    one_option = Sample(id="c", fields={"q": "?", "opts": ["a"], "key": 0}, line=5)
    with pytest.raises(InputError, match="two or more texts"):
        renderer.render(one_option, "d.jsonl")
    missing = Sample(id="m", fields={"q": "?", "key": 0}, line=6)
    with pytest.raises(InputError) as info:
        renderer.render(missing, "d.jsonl")
    assert (info.value.line, info.value.field) == (6, "choices")


def test_fewshot_is_deterministic_and_never_the_sample_itself() -> None:
    pool = [Sample(id=f"s{i}", fields={"q": f"q{i}", "opts": ["a", "b"], "key": i % 2}, line=i + 1)
            for i in range(12)]  # fmt: skip
    shots = FewShot(pool, "train.jsonl", k=3, seed=7, separator="\n\n")
    for sample in pool:
        picked = shots.pick(sample)
        assert len(picked) == 3 and sample.id not in {p.id for p in picked}
        assert [p.id for p in picked] == [p.id for p in shots.pick(sample)]
    assert [p.id for p in FewShot(pool, "t", k=3, seed=8, separator="").pick(pool[0])] != [
        p.id for p in shots.pick(pool[0])
    ]
    renderer = ChoiceRenderer("Q: {{ q }}\nA:", "{{ opts }}", "{{ key }}", " ", shots)
    asked = renderer.render(pool[0], "d")
    parts = asked.context.split("\n\n")
    assert len(parts) == 4 and parts[-1] == "Q: q0\nA:"
    example = next(s for s in pool if s.id == shots.pick(pool[0])[0].id)
    assert (
        parts[0] == f"Q: {example.fields['q']}\nA: {example.fields['opts'][example.fields['key']]}"
    )
    with pytest.raises(InputError, match="3 examples asked"):
        FewShot(pool[:3], "t", k=3, seed=1, separator="").pick(pool[0])


def test_fewshot_enters_the_request_key(tmp_path: Path) -> None:
    rows = [dict(r, opts=["a", "b", "c"], key=0) for r in ROWS]
    plain = load_spec(write(tmp_path, SPEC, rows))
    planned = plan(plain, plain.spec.models[0])
    keys = [r.key for item in planned.batch(list(planned.dataset)).items for r in item.requests]
    shot = load_spec(write(tmp_path, SPEC + "fewshot: {k: 1, seed: 3}\n", rows))
    planned = plan(shot, shot.spec.models[0])
    shot_keys = [
        r.key for item in planned.batch(list(planned.dataset)).items for r in item.requests
    ]
    assert len(keys) == len(shot_keys) == 9
    assert not set(keys) & set(shot_keys)
    items = planned.batch(list(planned.dataset)).items
    contexts = {r.context for item in items for r in item.requests}
    assert all(c.count("\n\n") == 1 for c in contexts)


def test_a_letter_is_read_from_an_answer() -> None:
    assert read_letter("B", 4) == 1
    assert read_letter("(C) because it is blue", 4) == 2
    assert read_letter("The answer is D.", 4) == 3
    assert read_letter("Answer: a", 4) == 0
    assert read_letter("A good guess.\nAnswer: B", 4) == 1  # "answer" first, then a line start
    assert read_letter("E", 4) is None  # not an option
    assert read_letter("I do not know", 4) is None
    assert lettered("Q?", ["x", "y"]).splitlines() == [
        "Q?",
        "A. x",
        "B. y",
        "Answer with the letter of the correct option only.",
    ]


def test_fewshot_source_and_choices_enter_the_identity_and_the_requests_hash(
    tmp_path: Path,
) -> None:
    from gradetrail_lib.spec.identity import requests_hash, run_identity

    (tmp_path / "shots.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    text = SPEC + "fewshot: {k: 1, source: {path: shots.jsonl}}\n"
    loaded = load_spec(write(tmp_path, text))
    model = loaded.spec.models[0]
    identity, requests = run_identity(loaded, "d"), requests_hash(loaded, model)
    rows = [dict(r, q=f"{r['q']} (edited)") for r in ROWS]
    (tmp_path / "shots.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_identity(loaded, "d") != identity  # the examples' rows changed
    assert requests_hash(loaded, model) != requests
    other = load_spec(write(tmp_path, text.replace('gold: "{{ key }}"', 'gold: "{{ 0 }}"')))
    assert requests_hash(other, model) != requests_hash(loaded, model)


def test_generate_fewshot_examples_are_lettered_and_answered_by_letter(tmp_path: Path) -> None:
    rows = [dict(r, opts=["a", "b", "c"], key=i % 3) for i, r in enumerate(ROWS)]
    text = SPEC.replace("local, name: smollm2-135m", "anthropic, name: c")
    loaded = load_spec(write(tmp_path, text + "method: generate\nfewshot: {k: 1, seed: 3}\n", rows))
    planned = plan(loaded, loaded.spec.models[0])
    for item in planned.batch(list(planned.dataset)).items:
        prompt = item.request.messages[-1]["content"]
        shot, own = prompt.split("\n\n")
        question, letter = shot.rsplit("\n", 1)
        example = next(r for r in rows if question.startswith(f"Q: {r['q']}"))
        assert letter == "ABC"[example["key"]] and example["id"] != item.sample.id
        assert own.startswith(f"Q: {item.sample.fields['q']}") and own.endswith("only.")
        assert own.count("\nA. a\nB. b\nC. c\n") == 1
