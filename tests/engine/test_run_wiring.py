"""One wiring of a run for every surface: what `gradetrail run` and `run_spec` do with a
folder of specs, a spec whose run aborts, a model no spec has, and batch without the
cache, each rule the same in both and each message naming the option of the surface it
was given in (a flag in the CLI, an argument in Python). The CLI runs in process here."""

import re
from pathlib import Path

import pytest

from gradetrail_lib.cli import main
from gradetrail_lib.errors import InputError, InputErrors, RunAborted, UsageError
from tests.conftest import write_addition_dataset
from tests.conftest import write_spec as write_served_spec
from tests.support.fake_llm_server import FakeLLMServer, Fault

N = 6


def write_scripted_spec(path: Path, name: str, models: tuple[str, ...] = ("x",)) -> Path:
    """A spec whose scripted models answer every sample right."""
    write_addition_dataset(path.parent / "data" / "add.jsonl", N)
    listed = "".join(
        f"  - {{provider: scripted, name: {m}, answer_field: answer}}\n" for m in models
    )
    path.write_text(
        f"name: {name}\n"
        "dataset: {path: data/add.jsonl}\n"
        "prompt: 'Q: {{ a }} + {{ b }}'\n"
        f"models:\n{listed}"
        "params: {temperature: 0, max_tokens: 8}\n"
        "scorer: {type: exact, field: answer}\n"
    )
    return path


def cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(
        ["run", *args, "--results", str(tmp_path / "results"), "--cache", str(tmp_path / "c.db")]
    )
    out, err = capsys.readouterr()
    return code, out, err


def a_folder_whose_first_spec_aborts(tmp_path: Path, server: FakeLLMServer) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir()
    aborts = write_served_spec(specs / "a.yaml", base_url=f"{server.base_url}/v1")
    aborts.write_text(aborts.read_text().replace("name: add", "name: aborts"))
    write_scripted_spec(specs / "b.yaml", "fine")
    server.fail_always = Fault(status=401)
    return specs


def test_the_cli_keeps_going_past_a_spec_that_aborts_and_exits_with_the_worst(
    tmp_path: Path, fake_server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = a_folder_whose_first_spec_aborts(tmp_path, fake_server)
    code, out, err = cli(tmp_path, capsys, str(specs), "--concurrency", "1")
    assert code == 1, out + err
    assert "error: aborts: aborted after 3 identical errors" in err
    assert [x.split(" -> ")[0] for x in out.splitlines() if x.startswith("Run: ")] == [
        "Run: fine/x"
    ]
    assert out.splitlines()[-1] == "Specs: 2; exit status 1, the worst of (aborts 1, fine 0)"


def test_run_spec_stops_at_a_spec_that_aborts(tmp_path: Path, fake_server: FakeLLMServer) -> None:
    from gradetrail_lib import run_spec

    specs = a_folder_whose_first_spec_aborts(tmp_path, fake_server)
    with pytest.raises(RunAborted, match="aborted after 3 identical errors"):
        run_spec(specs, results_root=tmp_path / "results", cache=tmp_path / "c.db", concurrency=1)
    ran = [p.name for p in (tmp_path / "results").iterdir() if not p.name.startswith(".")]
    assert ran == []  # the second spec never ran


def test_a_model_no_spec_of_the_folder_has_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    write_scripted_spec(specs / "a.yaml", "a")
    code, out, err = cli(tmp_path, capsys, str(specs), "--model", "nope")
    assert code == 2
    assert f"Skipped: {specs / 'a.yaml'} (spec has no model 'nope')" in out
    assert f"error: {specs}: no spec in this folder has model 'nope'" in err
    assert not (tmp_path / "results").exists() and not (tmp_path / "c.db").exists()
    # A single spec without the model is an unknown model, not a skip.
    code, out, err = cli(tmp_path, capsys, str(specs / "a.yaml"), "--model", "nope")
    assert code == 2 and "Skipped" not in out and "nope" in err


def test_a_single_spec_that_scores_nothing_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write_scripted_spec(tmp_path / "s.yaml", "s")
    (tmp_path / "raises.py").write_text("def fn(response):\n    raise ValueError('no')\n")
    spec.write_text(
        spec.read_text().replace(
            "scorer: {type: exact, field: answer}", 'scorer: {type: python, ref: "raises.py:fn"}'
        )
    )
    code, out, _ = cli(tmp_path, capsys, str(spec))
    assert code == 1 and "Run: s/x -> " in out
    assert "Specs:" not in out and "Spec: " not in out  # a file is no folder


def test_run_spec_on_a_folder_with_bad_specs_raises_every_error_before_any_run(
    tmp_path: Path,
) -> None:
    from gradetrail_lib import run_spec

    specs = tmp_path / "specs"
    specs.mkdir()
    write_scripted_spec(specs / "a.yaml", "a")
    bad = write_scripted_spec(specs / "b.yaml", "b")
    bad.write_text(bad.read_text() + "colour: blue\n")
    twin = write_scripted_spec(specs / "c.yaml", "a")
    with pytest.raises(InputErrors) as caught:
        run_spec(specs, results_root=tmp_path / "results", cache=tmp_path / "c.db")
    messages = [str(e) for e in caught.value.errors]
    assert any(m.startswith(f"{bad}:") and "colour: unknown key" in m for m in messages)
    assert f"{twin}: name: 'a' is already used by {specs / 'a.yaml'}" in messages
    assert not (tmp_path / "results").exists() and not (tmp_path / "c.db").exists()
    # One bad spec alone: its own error.
    (specs / "b.yaml").unlink()
    (specs / "c.yaml").unlink()
    write_scripted_spec(specs / "d.yaml", "d").write_text("name: d\n")
    with pytest.raises(InputError):
        run_spec(specs, results_root=tmp_path / "results", cache=tmp_path / "c.db")
    assert not (tmp_path / "results").exists()


def test_batch_without_the_cache_is_one_rule_named_in_each_surface_s_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gradetrail_lib import run_spec

    spec = write_scripted_spec(tmp_path / "s.yaml", "s")
    code, _, err = cli(tmp_path, capsys, str(spec), "--batch", "--no-cache")
    assert code == 2
    assert err.startswith("error: --batch needs the cache file") and "drop --no-cache" in err
    with pytest.raises(UsageError) as caught:
        run_spec(spec, results_root=tmp_path / "results", read_cache=False, batch="all")
    message = str(caught.value)
    assert message.startswith("batch needs the cache file") and "read_cache=False" in message
    assert "--" not in message
    # The same rule in the same words, only the options' names differ.
    assert (
        message.replace("read_cache=False", "--no-cache").replace("batch", "--batch", 1)
        == err.removeprefix("error: ").strip()
    )
    assert not (tmp_path / "results").exists()


def test_max_cost_refuses_before_any_call(
    tmp_path: Path, fake_server: FakeLLMServer, capsys: pytest.CaptureFixture[str]
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    spec = write_served_spec(
        tmp_path / "add.yaml", base_url=f"{fake_server.base_url}/v1", provider="openai",
        model="gpt-4o-mini",
    )  # fmt: skip
    code, _, err = cli(tmp_path, capsys, str(spec), "--max-cost", "0.0000001")
    assert code == 2 and "error: --max-cost $" in err and "over the limit" in err
    assert fake_server.calls == 0 and not (tmp_path / "results").exists()


def test_a_base_url_without_models_is_refused_in_each_surface_s_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gradetrail_lib import run_spec

    spec = write_scripted_spec(tmp_path / "s.yaml", "s")
    code, _, err = cli(tmp_path, capsys, str(spec), "--base-url", "http://127.0.0.1:9")
    assert code == 2
    assert "--base-url is the endpoint of the models given by --models; give --models" in err
    with pytest.raises(UsageError, match=r"base_url is the endpoint .* give models=\[\.\.\.\]"):
        run_spec(spec, results_root=tmp_path / "results", base_url="http://127.0.0.1:9")
    assert not (tmp_path / "results").exists()


def test_a_release_check_goes_through_the_same_wiring_and_rules(tmp_path: Path) -> None:
    """`run --until-decided` is `decide_request`: its rules are the engine's, worded
    with the surface's names (the CLI's are pinned in tests/commands)."""
    from gradetrail_lib.engine.api import Decision, RunRequest, decide_request

    spec = write_scripted_spec(tmp_path / "s.yaml", "s", models=("x", "y"))
    base = {"spec": spec, "results_root": tmp_path / "results", "cache": tmp_path / "c.db"}
    for request, message in (
        (RunRequest(**base, model="y", read_cache=False), "a release check needs the cache"),
        (RunRequest(**base, model="y", batch="all"), "sends each chunk at once: drop batch"),
        (RunRequest(**base), "needs exactly one new model (models=[NEW])"),
        (RunRequest(**base, model="x"), "against x: the new model is the incumbent"),
    ):
        with pytest.raises(UsageError, match=re.escape(message)):
            decide_request(request, Decision(against="x"))
    assert not (tmp_path / "results").exists() and not (tmp_path / "c.db").exists()
    decided = decide_request(RunRequest(**base, model="y"), Decision(against="x", chunk=2))
    assert decided.incumbent.manifest.model.requested == "x"
    assert decided.challenger.manifest.model.requested == "y"
