"""`chat_template: true`: a multiple-choice spec's log-likelihood contexts rendered by the
local model's own chat template. It is refused where it cannot apply (naming file, line
and field), changes the request keys and the run identity (`false` does not), puts no
delimiter before an option, and the manifest records the template's hash."""

import hashlib
import json
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.spec.fewshot import choice_renderer
from gradetrail_lib.spec.identity import requests_hash, run_identity
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import needs_local_model

ROWS = [
    {"id": "q1", "q": "Capital of France?", "opts": ["Rome", "Paris"], "key": 1},
    {"id": "q2", "q": "2 + 2 =", "opts": ["3", "4", "5"], "key": 1},
]

SPEC = """\
name: mc
dataset: {path: data.jsonl}
prompt: "Q: {{ q }}\\nA:"
choices: "{{ opts }}"
gold: "{{ key }}"
model: {provider: local, name: smollm2-135m}
"""
COMPATIBLE = "{provider: openai_compatible, name: m, base_url: 'http://127.0.0.1:9/v1'}"


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    path = tmp_path / name
    path.write_text(text)
    return path


def line_of(text: str, prefix: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(prefix))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # A remote log-likelihood endpoint has no template of the model's to apply.
        (
            SPEC.replace("{provider: local, name: smollm2-135m}", COMPATIBLE),
            "provider openai_compatible cannot apply a chat template",
        ),
        (SPEC + "method: generate\n", "only with choices by log-likelihood"),
        (
            SPEC.replace('choices: "{{ opts }}"\ngold: "{{ key }}"\n', ""),
            "only with choices by log-likelihood",
        ),
    ],
)
def test_refused_where_it_cannot_apply_naming_file_line_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    text = text.replace("model:", "chat_template: true\nmodel:", 1)
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_spec(path)
    assert (info.value.path, info.value.field) == (str(path), "chat_template")
    assert info.value.line == line_of(text, "chat_template:")
    assert message in info.value.message


def test_a_model_named_beside_the_spec_is_held_to_it(tmp_path: Path) -> None:
    text = SPEC + "chat_template: true\n"
    loaded = load_spec(write(tmp_path, text))
    remote = ModelConfig(provider="openai_compatible", name="m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(InputError) as info:
        plan(loaded, remote)  # `--models openai_compatible/m`
    assert (info.value.field, info.value.line) == ("chat_template", line_of(text, "chat_template"))
    assert "provider openai_compatible cannot apply a chat template" in info.value.message


def test_false_is_the_default_and_keeps_the_identity(tmp_path: Path) -> None:
    plain = load_spec(write(tmp_path, SPEC))
    off = load_spec(write(tmp_path, SPEC + "chat_template: false\n", "off.yaml"))
    on = load_spec(write(tmp_path, SPEC + "chat_template: true\n", "on.yaml"))
    model = plain.spec.models[0]
    assert off.spec.chat_template is None
    assert run_identity(off, "d") == run_identity(plain, "d")
    assert requests_hash(off, model) == requests_hash(plain, model)
    assert run_identity(on, "d") != run_identity(plain, "d")
    assert requests_hash(on, model) != requests_hash(plain, model)


def test_no_delimiter_before_the_option_but_the_examples_keep_theirs(tmp_path: Path) -> None:
    """lm-eval's `--apply_chat_template` drops its target delimiter after the assistant's
    turn opening; a few-shot example in the user's turn still shows `prompt + " " + gold`.
    A `choice_prefix` the spec sets is kept."""
    on = load_spec(write(tmp_path, SPEC + "chat_template: true\nfewshot: {k: 1}\n")).spec
    renderer = choice_renderer(on, None)
    assert renderer is not None and (renderer.prefix, renderer.continuation_prefix) == (" ", "")
    kept = load_spec(write(tmp_path, SPEC + "chat_template: true\nchoice_prefix: ' '\n")).spec
    renderer = choice_renderer(kept, None)
    assert renderer is not None and renderer.continuation_prefix == " "
    off = choice_renderer(load_spec(write(tmp_path, SPEC)).spec, None)
    assert off is not None and off.continuation_prefix == " "


def test_a_catalogue_entrys_file_may_turn_it_on(tmp_path: Path) -> None:
    text = "catalog: arc_easy\nchat_template: true\n"
    loaded = load_spec(write(tmp_path, text, "arc.yaml"))
    assert loaded.spec.chat_template is True
    assert [m.provider for m in loaded.spec.models] == ["local"]  # the entry's own model
    remote = f"catalog: arc_easy\nchat_template: true\nmodel: {COMPATIBLE}\n"
    path = write(tmp_path, remote, "arc_remote.yaml")
    with pytest.raises(InputError) as info:
        load_spec(path)
    assert (info.value.path, info.value.field, info.value.line) == (str(path), "chat_template", 2)


@needs_local_model
def test_keys_records_and_manifest(tmp_path: Path) -> None:
    """Run for real (two samples): the templated run shares no request key with the plain
    one, its records show the templated context, and its manifest names the template by
    the sha256 of the GGUF's `tokenizer.chat_template`. A re-run is all cache hits."""
    from llama_cpp import Llama

    from gradetrail_lib.providers.local_server import locate_model_file

    common = {"cache": tmp_path / "cache.duckdb", "results_root": tmp_path / "results"}
    (plain,) = run_spec(write(tmp_path, SPEC), **common)
    (templated,) = run_spec(write(tmp_path, SPEC + "chat_template: true\n", "on.yaml"), **common)
    plain_keys = {c.request_key for r in plain.records for c in r.calls}
    keys = {c.request_key for r in templated.records for c in r.calls}
    assert len(keys) == len(plain_keys) == 5 and not keys & plain_keys
    for record in templated.records:
        context = record.messages[0]["content"]
        assert context.startswith("<|im_start|>system\n")
        assert context.endswith("A:<|im_end|>\n<|im_start|>assistant\n")
        assert record.choices is not None and record.choices.chosen is not None
    manifest = json.loads((templated.run_dir / "manifest.json").read_text())
    llm = Llama(model_path=str(locate_model_file("smollm2-135m")), vocab_only=True, verbose=False)
    template = llm.metadata["tokenizer.chat_template"]
    llm.close()
    assert manifest["model"]["chat_template"] == {
        "source": "gguf:tokenizer.chat_template",
        "sha256": hashlib.sha256(template.encode()).hexdigest(),
    }
    assert plain.manifest.model.chat_template is None
    assert "chat_template" not in json.loads((plain.run_dir / "manifest.json").read_text())["model"]
    assert manifest["identity"] != plain.manifest.identity
    (again,) = run_spec(tmp_path / "on.yaml", **common)
    assert again.manifest.target.calls == 0  # every request answered by the cache
    assert again.manifest.identity == manifest["identity"]


def test_multiturn_needs_the_chat_template(tmp_path: Path) -> None:
    text = SPEC + "fewshot: {k: 1, multiturn: true}\n"
    path = write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_spec(path)
    assert (info.value.path, info.value.field) == (str(path), "fewshot")
    assert info.value.line == line_of(text, "fewshot:")
    assert "needs chat_template: true" in info.value.message
    # `false` hashes as absent.
    off = load_spec(write(tmp_path, SPEC + "fewshot: {k: 1, multiturn: false}\n", "off.yaml"))
    plain = load_spec(write(tmp_path, SPEC + "fewshot: {k: 1}\n", "plain.yaml"))
    assert run_identity(off, "d") == run_identity(plain, "d")


SYSTEM = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n"
)


@needs_local_model
def test_fewshot_examples_as_turns_or_in_the_one_turn(tmp_path: Path) -> None:
    """lm-eval's two forms, written out by hand for SmolLM2's template: without
    `multiturn` the example and the prompt are the user's one turn (the example with its
    `" " + gold`); with it, the example is a user turn and its gold option (no delimiter)
    an assistant turn. The two are keyed apart."""
    shots = "chat_template: true\nfewshot: {k: 1, seed: 3}\n"
    one = load_spec(write(tmp_path, SPEC + shots))
    turns = load_spec(write(tmp_path, SPEC + shots.replace("3}", "3, multiturn: true}"), "t.yaml"))
    keys = []
    for loaded, multiturn in ((one, False), (turns, True)):
        planned = plan(loaded, loaded.spec.models[0])
        for item in planned.batch(list(planned.dataset)).items:
            own = f"Q: {item.sample.fields['q']}\nA:"
            other = next(r for r in ROWS if r["id"] != item.sample.id)  # k=1 of two rows
            example, gold = f"Q: {other['q']}\nA:", other["opts"][other["key"]]
            if multiturn:
                chat = (
                    f"<|im_start|>user\n{example}<|im_end|>\n"
                    f"<|im_start|>assistant\n{gold}<|im_end|>\n"
                    f"<|im_start|>user\n{own}<|im_end|>\n"
                )
            else:
                chat = f"<|im_start|>user\n{example} {gold}\n\n{own}<|im_end|>\n"
            expected = SYSTEM + chat + "<|im_start|>assistant\n"
            options = item.sample.fields["opts"]
            assert [r.context for r in item.requests] == [expected] * len(options)
            assert [r.continuation for r in item.requests] == options
            keys += [r.key for r in item.requests]
    assert len(set(keys)) == len(keys) == 10
