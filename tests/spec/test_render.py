"""Prompt rendering: StrictUndefined errors name the dataset, line, sample and field."""

import jinja2
import pytest

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.spec.prompts import PromptRenderer
from gradetrail_lib.spec.spec import Spec
from gradetrail_lib.templating import Template, make_environment, substitution_parts

DATASET = "data/x.jsonl"


def make_spec(prompt: str, system: str | None = None) -> Spec:
    data = {
        "name": "t",
        "dataset": {"path": DATASET},
        "prompt": prompt,
        "models": [{"provider": "openai", "name": "gpt-5-mini"}],
        "scorer": {"type": "exact"},
    }
    if system is not None:
        data["system"] = system
    return Spec.model_validate(data)


def sample(sample_id: str = "s1", line: int = 3, **fields) -> Sample:
    return Sample(id=sample_id, fields={"id": sample_id, **fields}, line=line)


def test_system_and_user_messages():
    renderer = PromptRenderer(make_spec("Q: {{ question }}", system="You are {{ persona }}."))
    messages = renderer.messages(sample(question="2+2?", persona="terse"), DATASET)
    assert messages == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Q: 2+2?"},
    ]


def test_user_message_only_without_system():
    messages = PromptRenderer(make_spec("Q: {{ question }}")).messages(
        sample(question="x"), DATASET
    )
    assert messages == [{"role": "user", "content": "Q: x"}]


def test_trailing_newline_is_kept_and_nothing_is_html_escaped():
    renderer = PromptRenderer(make_spec("Q: {{ question }}\n"))
    messages = renderer.messages(sample(question="<b>a & b</b>"), DATASET)
    assert messages[0]["content"] == "Q: <b>a & b</b>\n"


def test_missing_field_names_dataset_line_sample_and_field():
    renderer = PromptRenderer(make_spec("Q: {{ question }}"))
    with pytest.raises(InputError) as info:
        renderer.messages(sample("s7", line=12, answer=1), DATASET)
    err = info.value
    assert err.path == DATASET
    assert err.line == 12
    assert err.field == "prompt"
    assert "'s7'" in err.message
    assert "question" in err.message
    assert str(err) == "data/x.jsonl:12: prompt: sample 's7': 'question' is undefined"


def test_missing_field_in_system_is_reported_as_system():
    renderer = PromptRenderer(make_spec("Q: {{ question }}", system="Be {{ tone }}"))
    with pytest.raises(InputError) as info:
        renderer.messages(sample("s2", line=5, question="q"), DATASET)
    assert (info.value.line, info.value.field) == (5, "system")
    assert "'tone'" in info.value.message and "'s2'" in info.value.message


def test_undefined_in_a_condition_is_an_error_not_false():
    renderer = PromptRenderer(make_spec("{% if hint %}Hint: {{ hint }}{% endif %}Q"))
    with pytest.raises(InputError, match="hint"):
        renderer.messages(sample(), DATASET)


def test_missing_attribute_of_a_present_field():
    renderer = PromptRenderer(make_spec("{{ meta.source }}"))
    assert renderer.messages(sample(meta={"source": "web"}), DATASET)[0]["content"] == "web"
    with pytest.raises(InputError) as info:
        renderer.messages(sample(meta={}), DATASET)
    assert "source" in info.value.message


def test_runtime_template_error_names_the_sample():
    template = Template("{{ items[0] }}", "prompt")
    with pytest.raises(InputError) as info:
        template.render(sample("s9", line=4, items=5), DATASET)
    assert (info.value.path, info.value.line, info.value.field) == (DATASET, 4, "prompt")
    assert "'s9'" in info.value.message


SUBSTITUTIONS = [
    "Q: {{ a }} + {{b}}\n",
    "{{ a }}{{ a }}",
    "x {{- a -}}   y\n\n",
    "{# note #}{{ a }} {% raw %}{{ b }}{% endraw %}",
    "plain text only",
    "",
    "{{ n }} {{ f }} {{ nothing }} {{ flag }} {{ items }} {{ meta }}",
    "{{ range }}",  # a jinja2 global, not a field
    "{ {a} } {{ a }} }} {{ b }}{",  # braces in the text (str.format's own syntax)
]
FIELDS = {
    "a": "<b>α & ω</b>",
    "b": "(1.5)",
    "n": 7,
    "f": 0.1,
    "nothing": None,
    "flag": True,
    "items": [1, "x"],
    "meta": {"k": "v"},
}


@pytest.mark.parametrize("source", SUBSTITUTIONS)
@pytest.mark.parametrize("finalize", [None, lambda value: f"[{value}]"])
def test_plain_substitution_renders_exactly_as_jinja2_does(source, finalize):
    env = make_environment(finalize)
    assert substitution_parts(env, source) is not None  # the fast path is the one tested
    expected = env.from_string(source).render(**FIELDS)
    assert Template(source, "prompt", env).render(sample(**FIELDS), DATASET) == expected


@pytest.mark.parametrize(
    "source", ["{{ a | upper }}", "{{ meta.k }}", "{% if a %}{{ a }}{% endif %}", "{{ 'x' }}"]
)
def test_anything_but_plain_substitution_goes_to_jinja2(source):
    assert substitution_parts(make_environment(), source) is None
    rendered = Template(source, "prompt").render(sample(**FIELDS), DATASET)
    assert rendered == make_environment().from_string(source).render(**FIELDS)


def test_plain_substitution_reports_a_missing_field_as_jinja2_does():
    source = "Q: {{ question }}"
    with pytest.raises(jinja2.UndefinedError) as jinja_error:
        make_environment().from_string(source).render(id="s7")
    with pytest.raises(InputError) as info:
        Template(source, "prompt").render(sample("s7", line=12), DATASET)
    assert info.value.message == f"sample 's7': {jinja_error.value.message}"
