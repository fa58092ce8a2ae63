"""Behaviours no other test pinned, pinned before modules move into packages: each test
fails on a plausible slip of the move (its docstring says what it pins).

Every run here is real (`run_spec` in process, Dagster's job in process), and the
commands are the CLI's (`compare` through `cli.main` in process, `gate` as a subprocess),
against the `scripted` provider or the loopback fake server
(tests/support/fake_llm_server.py)."""

import itertools
import json
import math
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
import numpy as np
import pytest
from scipy.stats import bootstrap

from gradetrail_assets.build import build_definitions
from gradetrail_assets.checks import latest_data_version
from gradetrail_assets.resources import GradetrailResource
from gradetrail_lib import cli, load_run, run_spec
from gradetrail_lib.analysis.stats.clusters import cluster_mean_interval
from gradetrail_lib.analysis.stats.intervals import BootstrapSettings
from gradetrail_lib.backends import build_backend
from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.engine.fetch import fetch_run
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.responses import Responses, batch_fingerprint
from gradetrail_lib.providers.base import ModelResponse
from gradetrail_lib.spec.identity import run_identity, scorer_hash
from gradetrail_lib.spec.spec import LoadedSpec, Spec, load_spec
from tests.conftest import run_cli, write_addition_dataset
from tests.conftest import write_spec as write_fake_spec
from tests.support import eval_runs
from tests.support.agent_scripts import conversation, tool_call
from tests.support.fake_llm_server import FakeLLMServer, Fault, default_responder
from tests.support.plans import whole

# --- 1. the tool definitions are part of the request key --------------------------------

WEATHER_TOOL: dict[str, Any] = {
    "name": "weather",
    "description": "Look up current conditions.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
TOOL_SPEC: dict[str, Any] = {
    "name": "keys",
    "dataset": {"path": "data/x.jsonl"},
    "messages": [{"role": "user", "content": "Weather in {{ city }}?"}],
    "models": [{"provider": "openai_compatible", "name": "agent", "base_url": "http://h:1/v1"}],
    "params": {"temperature": 0, "max_tokens": 64},
    "tools": [WEATHER_TOOL],
    "scorer": {"type": "json_valid"},
}


def tool_keys(tmp_path: Path, **changes: Any) -> list[str]:
    """The first requests' keys of TOOL_SPEC with `changes`, over two samples."""
    data = tmp_path / "data" / "x.jsonl"
    data.parent.mkdir(exist_ok=True)
    data.write_text('{"id": "a", "city": "Paris"}\n{"id": "b", "city": "Rome"}\n')
    loaded = LoadedSpec(spec=Spec.model_validate({**TOOL_SPEC, **changes}), path=tmp_path / "s")
    return [i.request.key for i in whole(plan(loaded, loaded.spec.models[0])).items]


def with_tool(**changes: Any) -> dict[str, Any]:
    return {"tools": [{**WEATHER_TOOL, **changes}]}


@pytest.mark.parametrize(
    "changes",
    [
        with_tool(description="Look up the forecast."),
        with_tool(
            parameters={
                "type": "object",
                "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
                "required": ["city"],
            }
        ),
        with_tool(
            parameters={"type": "object", "properties": {"city": {"type": "string"}}}
        ),  # `required` dropped
        with_tool(name="forecast"),
        {"tools": [WEATHER_TOOL, {"name": "clock", "description": "The time."}]},
        {"tools": None},
        {"tool_choice": "required"},
    ],
    ids=["description", "new-property", "required", "name", "extra-tool", "no-tools", "choice"],
)
def test_tool_definitions_are_part_of_the_request_key(tmp_path: Path, changes: Any) -> None:
    """Same messages, other tools (or tool schema, or tool choice): every key differs;
    the same tools, in a spec validated afresh: the same keys."""
    base = tool_keys(tmp_path)
    assert len(set(base)) == 2
    assert tool_keys(tmp_path, tools=[json.loads(json.dumps(WEATHER_TOOL))]) == base
    changed = tool_keys(tmp_path, **changes)
    assert all(a != b for a, b in zip(base, changed, strict=True))


CITIES = {"Paris": "sunny", "Rome": "rainy"}


def weather_rows() -> list[dict[str, Any]]:
    return [
        {
            "id": city.lower(),
            "city": city,
            "expected": {"tool_calls": [{"name": "weather", "arguments": {"city": city}}]},
            "tool_results": {
                "weather": [{"arguments": {"city": city}, "result": {"condition": condition}}]
            },
        }
        for city, condition in CITIES.items()
    ]


def weather_agent(body: dict[str, Any]) -> Any:
    """Calls `weather` for the city asked about, then says what it returned."""
    c = conversation(body)
    city = c.last_user_text.split(" in ")[1].rstrip("?")
    if c.turns == 0:
        return tool_call("weather", city=city)
    result = json.loads(c.last_tool_results[0]["content"])
    if "error" in result:
        return f"I could not find out the weather in {city}."
    return f"It is {result['condition']} in {city}."


def weather_project(
    tmp_path: Path, base_url: str, *, tool: str = "", scorer: str = "{type: tool_call}"
) -> Path:
    """An agent spec over Paris and Rome with one `weather` tool (`tool`: more of its YAML,
    at the tool entry's indentation)."""
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "w.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in weather_rows())
    )
    spec = tmp_path / "w.yaml"
    spec.write_text(
        "name: w\n"
        "dataset: {path: data/w.jsonl}\n"
        "messages: [{role: user, content: 'What is the weather in {{ city }}?'}]\n"
        f'model: {{provider: openai_compatible, name: agent-1, base_url: "{base_url}"}}\n'
        "params: {temperature: 0, max_tokens: 64}\n"
        "tools:\n"
        "  - name: weather\n"
        "    description: Look up current conditions.\n"
        "    parameters: {type: object, properties: {city: {type: string}}, required: [city]}\n"
        f"{tool}"
        "step_budget: 3\n"
        f"scorer: {scorer}\n"
    )
    return spec


def test_a_changed_tool_schema_is_a_cache_miss_end_to_end(tmp_path: Path) -> None:
    """A re-run with the same tools replays every step from the cache; a re-run whose tool
    schema (or description) changed sends every step again, under new keys."""

    def first_keys(done: Any) -> list[str]:
        return [r.trajectory[0].request_key for r in done.records]

    runs: dict[str, Any] = {"results_root": tmp_path / "r", "cache": tmp_path / "c.db"}
    with FakeLLMServer(responder=weather_agent) as srv:
        url = f"{srv.base_url}/v1"
        (first,) = run_spec(weather_project(tmp_path, url), **runs)
        assert srv.calls == 4 and [r.response for r in first.records] == [
            "It is sunny in Paris.",
            "It is rainy in Rome.",
        ]
        (same,) = run_spec(weather_project(tmp_path, url), **runs)
        assert srv.calls == 4 and same.manifest.target.cache_hits == 4
        assert first_keys(same) == first_keys(first)

        schema = (
            weather_project(tmp_path, url)
            .read_text()
            .replace(
                "properties: {city: {type: string}}",
                "properties: {city: {type: string}, units: {type: string}}",
            )
        )
        (tmp_path / "w.yaml").write_text(schema)
        (changed,) = run_spec(tmp_path / "w.yaml", **runs)
        assert srv.calls == 8 and changed.manifest.target.cache_hits == 0
        assert not set(first_keys(changed)) & set(first_keys(first))

        described = (
            weather_project(tmp_path, url)
            .read_text()
            .replace("Look up current conditions.", "Look up the conditions now.")
        )
        (tmp_path / "w.yaml").write_text(described)
        (redescribed,) = run_spec(tmp_path / "w.yaml", **runs)
        assert srv.calls == 12 and redescribed.manifest.target.cache_hits == 0


# --- 2. a provider error is never cached ------------------------------------------------


@pytest.mark.parametrize(
    "faults",
    [
        [Fault(status=400, message="pinned: bad request")],
        # Transient: retried at once (retry-after 0) until the attempts run out.
        [Fault(status=500, headers={"retry-after": "0"}) for _ in range(6)],
    ],
    ids=["400", "500"],
)
def test_a_provider_error_is_never_cached(tmp_path: Path, faults: list[Fault]) -> None:
    """The request the provider answered with an error has no cache entry after the run
    (its neighbours do), and a re-run sends that request, and only it, again."""
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 3)
    runs: dict[str, Any] = {
        "results_root": tmp_path / "r",
        "cache": tmp_path / "c.db",
        "concurrency": 1,
    }
    with FakeLLMServer() as srv:
        spec = write_fake_spec(tmp_path / "add.yaml", base_url=f"{srv.base_url}/v1")
        srv.script = list(faults)
        (done,) = run_spec(spec, **runs)
        assert srv.calls == len(faults) + 2
        failed = [r for r in done.records if r.outcome == "provider_error"]
        assert len(failed) == 1, [r.outcome for r in done.records]
        (bad,) = failed
        assert bad.calls[0].error is not None and f"HTTP {faults[0].status}" in bad.calls[0].error
        bad_key = bad.calls[0].request_key
        keys = [r.calls[0].request_key for r in done.records]
        cache = ResponseCache(tmp_path / "c.db")
        assert cache.lookup([bad_key]) == {}
        assert cache.cached_keys(keys) == set(keys) - {bad_key}
        assert cache.count() == 2

        sent = srv.calls
        (again,) = run_spec(spec, **runs)
        assert srv.calls == sent + 1
        assert srv.requests[-1]["status"] == 200
        assert again.manifest.target.calls == 1 and again.manifest.target.cache_hits == 2
        retried = {r.id: r for r in again.records}[bad.id]
        assert retried.outcome == "scored" and retried.calls[0].cache_hit is False
        assert cache.cached_keys(keys) == set(keys)


# --- 3. the judge model is part of the scorer hash and the run identity ---------------


def judged_spec(path: Path, base_url: str, judge: str) -> Path:
    eval_runs.write_dataset(path.parent / "data" / "add.jsonl", 3)
    (path.parent / "judge.j2").write_text(eval_runs.JUDGE_PROMPT)
    path.write_text(
        f"""name: judged
dataset: {{path: data/add.jsonl}}
prompt: |
  Q: {{{{ a }}}} + {{{{ b }}}}
models:
  - {{provider: openai_compatible, name: fake-good, base_url: "{base_url}"}}
params: {{temperature: 0, max_tokens: 16}}
scorers:
  - {{name: num, type: numeric}}
  - name: judge
    type: judge
    prompt_file: judge.j2
    model: {{provider: openai_compatible, name: {judge}, base_url: "{base_url}"}}
"""
    )
    return path


def test_the_judge_model_is_part_of_the_scorer_hash_and_the_identity(tmp_path: Path) -> None:
    """Two runs whose specs differ only in the judge's model name: other scorer hash (of
    the judge, and of the run), other run identity, other run directory; the target's
    requests, the other scorer and the dataset hash as they were."""
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    with eval_runs.start_server() as srv:
        url = f"{srv.base_url}/v1"
        spec_a = judged_spec(a_dir / "s.yaml", url, "judge-one")
        spec_b = judged_spec(b_dir / "s.yaml", url, "judge-two")
        (a,) = run_spec(spec_a, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        (b,) = run_spec(spec_b, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        # The judge answered both: the judge calls went to each model name.
        judged = {r["body"]["model"] for r in srv.requests}
        assert judged == {"fake-good", "judge-one", "judge-two"}
    ma, mb = a.manifest, b.manifest
    assert all(r.score_of("judge") == 1.0 for r in a.records + b.records)
    assert ma.scorer("judge").hash != mb.scorer("judge").hash
    assert ma.scorer("num").hash == mb.scorer("num").hash
    assert ma.scorer_hash != mb.scorer_hash
    assert ma.identity != mb.identity and a.run_dir != b.run_dir
    assert (ma.requests_hash, ma.dataset.hash) == (mb.requests_hash, mb.dataset.hash)
    # The public hashes say the same, and say it again for the same spec.
    la, lb = load_spec(spec_a), load_spec(spec_b)
    assert scorer_hash(la) == ma.scorer_hash and scorer_hash(lb) == mb.scorer_hash
    assert run_identity(la, ma.dataset.hash) == ma.identity
    assert run_identity(lb, mb.dataset.hash) == mb.identity
    assert run_identity(load_spec(spec_a), ma.dataset.hash) == ma.identity


# --- 4. a paired comparison pairs by (id, repeat) ---------------------------------------

# Per sample, per repeat: whether model A passes, whether model B passes.
PATTERN = {
    "s0": [(1, 1), (1, 0)],
    "s1": [(0, 1), (0, 1)],
    "s2": [(1, 0), (0, 0)],
    "s3": [(0, 1), (1, 1)],
    "s4": [(0, 1), (0, 1)],
    "s5": [(1, 1), (0, 0)],
}
# Counted by hand from PATTERN: both pass, both fail, A only, B only.
PAIRED_COUNTS = {"both_pass": 3, "both_fail": 2, "a_only": 2, "b_only": 5}
BY_REPEAT = """def by_repeat(response, sample, record):
    return response in sample["gold"][record.repeat]
"""


def paired_project(tmp_path: Path) -> Path:
    """Scripted models `ma` (answers "A") and `mb` ("B"), each sample run twice; a Python
    scorer passes an answer listed in the sample's gold for that repeat."""
    (tmp_path / "data").mkdir()
    rows = [
        {
            "id": sid,
            "a": "A",
            "b": "B",
            "gold": [[m for m, ok in zip("AB", pair, strict=True) if ok] for pair in pairs],
        }
        for sid, pairs in PATTERN.items()
    ]
    (tmp_path / "data" / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "by_repeat.py").write_text(BY_REPEAT)
    spec = tmp_path / "p.yaml"
    spec.write_text(
        "name: p\ndataset: {path: data/p.jsonl}\nprompt: 'Number {{ id }}?'\nrepeats: 2\n"
        "models:\n"
        "  - {provider: scripted, name: ma, answer_field: a}\n"
        "  - {provider: scripted, name: mb, answer_field: b}\n"
        "scorer: {type: python, ref: 'by_repeat.py:by_repeat'}\n"
    )
    return spec


def reordered(run_dir: Path, into: Path, order: Any) -> Path:
    """A copy of the run directory whose results.jsonl lines are `order(lines)`."""
    copy = into / run_dir.name
    shutil.copytree(run_dir, copy)
    lines = (run_dir / "results.jsonl").read_text().splitlines(keepends=True)
    (copy / "results.jsonl").write_text("".join(order(lines)))
    return copy


def compare_json(capsys: pytest.CaptureFixture[str], a: Path, b: Path) -> dict[str, Any]:
    """`gradetrail compare A B --json`, in process (the CLI's code, without a second of
    start-up each time): the one scorer's comparison."""
    capsys.readouterr()
    code = cli.main(["compare", str(a), str(b), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    (scorer,) = json.loads(out.out)["scorers"]
    assert scorer["compared"] is True
    return dict(scorer)


def test_a_paired_comparison_pairs_by_id_and_repeat_not_by_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gradetrail compare` of two runs whose records are in other orders (B's reversed:
    each case's repeats swapped too; A's rotated) gives what the runs in order give, the
    counts being those of PATTERN paired by (id, repeat)."""
    spec = paired_project(tmp_path)
    run_a, run_b = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    assert [(r.id, r.repeat) for r in run_b.records][:3] == [("s0", 0), ("s0", 1), ("s1", 0)]
    expected_a = [bool(PATTERN[r.id][r.repeat][0]) for r in run_a.records]
    assert [r.passes("score") for r in run_a.records] == expected_a
    (tmp_path / "moved").mkdir()
    reversed_b = reordered(run_b.run_dir, tmp_path / "moved", lambda lines: lines[::-1])
    loaded_b = load_run(reversed_b).records
    assert [(r.id, r.repeat) for r in loaded_b][:2] == [("s5", 1), ("s5", 0)]
    # Paired by position, the reversed run would give other counts: the order matters.
    by_position = sum(
        x.passes("score") and not y.passes("score")
        for x, y in zip(run_a.records, loaded_b, strict=True)
    )
    assert by_position != PAIRED_COUNTS["a_only"]

    in_order = compare_json(capsys, run_a.run_dir, run_b.run_dir)
    assert in_order["counts"] == PAIRED_COUNTS and in_order["n"] == 12
    assert in_order["cases"] == 6
    assert compare_json(capsys, run_a.run_dir, reversed_b) == in_order

    (tmp_path / "rotated").mkdir()
    rotated_a = reordered(run_a.run_dir, tmp_path / "rotated", lambda lines: lines[5:] + lines[:5])
    from_rotated = compare_json(capsys, rotated_a, reversed_b)
    for figure in ("counts", "n", "cases", "mcnemar_p", "mean_score_a", "mean_score_b"):
        assert from_rotated[figure] == in_order[figure], figure
    assert from_rotated["difference_b_minus_a"]["value"] == pytest.approx(
        in_order["difference_b_minus_a"]["value"]
    )


# --- 5. the responses' data version follows the answers' text --------------------------


def test_the_batch_fingerprint_covers_each_answer_s_text() -> None:
    """`batch_fingerprint` (what the responses step's data version hashes): the same
    answers give the same fingerprint; one answer's text changed, under the same key,
    changes it."""

    def fingerprint(texts: dict[str, str]) -> str:
        responses = Responses()
        for key, text in texts.items():
            responses.responses[key] = ModelResponse(
                text=text, served_model="m", stop_reason="stop", input_tokens=1,
                output_tokens=1, latency_s=0.1,
            )  # fmt: skip
        return batch_fingerprint(responses)

    texts = {"k1": "Answer: 3", "k2": "Answer: 5"}
    assert fingerprint(texts) == fingerprint(dict(texts))
    assert fingerprint(texts) != fingerprint({**texts, "k2": "Answer: 6"})
    assert fingerprint(texts) != fingerprint({**texts, "k2": "Answer: 5 "})


def test_the_responses_data_version_changes_when_an_answer_s_text_does(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """The Dagster responses asset: materialized again from the same cache, the same data
    version; its requests answered afresh (a new cache) with one answer's text changed
    (the same request keys), another data version; `fetch_run` agrees."""
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", 4)
    key = dg.AssetKey(["add", "responses"])
    instance.add_dynamic_partitions("add__models", ["fake-1"])

    def materialize(database: str) -> str | None:
        settings = GradetrailResource(
            database=str(tmp_path / database), results_dir=str(tmp_path / "results")
        )
        defs = build_definitions(specs, settings)
        result = defs.resolve_job_def("add__eval").execute_in_process(
            instance=instance,
            partition_key="fake-1",
            asset_selection=[key],
            resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "io"))},
        )
        assert result.success
        return latest_data_version(instance, key, "fake-1")

    def one_changed(body: dict[str, Any]) -> str:
        text = default_responder(body)
        return "Answer: 10 (sure)" if text == "Answer: 10" else text  # sample s003 only

    with FakeLLMServer() as srv:
        write_fake_spec(specs / "add.yaml", base_url=f"{srv.base_url}/v1")
        first = materialize("one.duckdb")
        assert first is not None and srv.calls == 4
        assert materialize("one.duckdb") == first and srv.calls == 4  # every answer cached
        srv.responder = one_changed
        changed = materialize("two.duckdb")
        assert srv.calls == 8 and changed is not None and changed != first

        loaded = load_spec(specs / "add.yaml")
        run_plan = plan(loaded, loaded.spec.models[0])
        backend = build_backend("local", concurrency=2)
        one = fetch_run(run_plan, ResponseCache(tmp_path / "one.duckdb"), backend)
        two = fetch_run(run_plan, ResponseCache(tmp_path / "two.duckdb"), backend)
        assert srv.calls == 8 and one.cache_hits == two.cache_hits == 4
        assert (one.fingerprint, two.fingerprint) == (first, changed)


# --- 6. a tool that raised is a tool_error ----------------------------------------------

RAISING_TOOL = """def weather(city):
    if city == "Rome":
        raise LookupError("no station in " + city)
    return {"condition": "sunny"}
"""


def test_a_python_tool_that_raised_is_a_tool_error(tmp_path: Path) -> None:
    """The call whose Python function raised: its tool result carries the error (and the
    model is shown it), and the case answering wrongly after it failed as `tool_error`;
    the other case's call succeeded."""
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "weather.py").write_text(RAISING_TOOL)
    with FakeLLMServer(responder=weather_agent) as srv:
        spec = weather_project(
            tmp_path,
            f"{srv.base_url}/v1",
            tool='    ref: "tools/weather.py:weather"\n',
            scorer="{type: regex, pattern: '(?i)sunny|rainy'}",
        )
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        shown = [conversation(r["body"]).last_tool_results for r in srv.requests]
    by_id = {r.id: r for r in done.records}
    paris, rome = by_id["paris"], by_id["rome"]
    assert (paris.failure_mode, paris.score_of("score")) == (None, 1.0)
    assert paris.trajectory[0].tool_results[0].error is None
    (result,) = rome.trajectory[0].tool_results
    assert result.error == "weather raised LookupError: no station in Rome"
    assert json.loads(result.content) == {"error": result.error}
    assert rome.response == "I could not find out the weather in Rome."
    assert rome.score_of("score") == 0.0
    assert (rome.outcome, rome.failure_mode) == ("scored", "tool_error")
    assert done.summary.failure_modes == {"tool_error": 1}
    assert any(results and "raised LookupError" in results[0]["content"] for results in shown), (
        "the model is shown the error as the tool's result"
    )


# --- 7. gate --baseline previous picks a run of the same model ---------------------------


def gate_spec(tmp_path: Path, x_field: str) -> Path:
    """Spec `g` of scripted models x (answering from `x_field`) and y (from `wrong`)."""
    rows = [
        {"id": f"s{i:02d}", "answer": f"a{i}", "wrong": "nope" if i % 2 else f"a{i}",
         "other": "nope" if i % 2 == 0 else f"a{i}"}
        for i in range(16)
    ]  # fmt: skip
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "g.yaml"
    spec.write_text(
        "name: g\ndataset: {path: data/d.jsonl}\nprompt: 'say {{ answer }}'\n"
        "models:\n"
        f"  - {{provider: scripted, name: x, answer_field: {x_field}}}\n"
        "  - {provider: scripted, name: y, answer_field: wrong}\n"
        "scorer: {type: exact, field: answer}\n"
    )
    return spec


def test_gate_previous_picks_the_previous_run_of_the_same_model(tmp_path: Path) -> None:
    """History x1 (model x), y1 (model y), x2 (model x, other results): `gate x2
    --baseline previous` takes x1, not y1, the latest run before x2."""
    runs: dict[str, Any] = {"results_root": tmp_path / "results", "cache": tmp_path / "c.db"}
    (x1,) = run_spec(gate_spec(tmp_path, "answer"), models=["x"], **runs)
    (y1,) = run_spec(gate_spec(tmp_path, "answer"), models=["y"], **runs)
    (x2,) = run_spec(gate_spec(tmp_path, "other"), models=["x"], **runs)
    assert len({x1.run_dir, y1.run_dir, x2.run_dir}) == 3
    assert x1.history.finished_at < y1.history.finished_at < x2.history.finished_at
    # y1 is comparable with x2 (one spec: same dataset and scorer hashes), and differs.
    assert y1.manifest.scorer_hash == x2.manifest.scorer_hash
    assert y1.history.fingerprint != x2.history.fingerprint

    gated = run_cli("gate", str(x2.run_dir), "--baseline", "previous", "--json", cwd=tmp_path)
    assert gated.returncode in (0, 1), gated.stdout + gated.stderr
    decision = json.loads(gated.stdout)
    assert decision["baseline"]["run_dir"] == str(x1.run_dir)
    assert decision["baseline"]["skipped"] == []
    assert f"baseline: {x1.run_dir} (previous run of g/x" in gated.stderr
    # 16/16 -> 8/16 against x1 (a regression: 8 pairs won only by x1, McNemar p 0.008);
    # against y1 (8/16, the other half) it would pass.
    assert gated.returncode == 1 and decision["passed"] is False


# --- 8. cache hits are counted per request ----------------------------------------------


def oracle_spec(tmp_path: Path, ids: list[int]) -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "x.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "answer": str(i)}) + "\n" for i in ids)
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\ndataset: {path: data/x.jsonl}\nprompt: 'Number {{ id }}?'\n"
        "model: {provider: scripted, name: oracle, answer_field: answer}\n"
        "scorer: {type: exact}\n"
    )
    return spec


def test_cache_hits_are_counted_per_request_not_per_batch(tmp_path: Path) -> None:
    """A batch of five requests of which two are cached: 2 cache hits and 3 calls in the
    manifest and the summary (and in `fetch_run`, the responses step's counts), the two
    records marked as hits."""
    runs: dict[str, Any] = {"results_root": tmp_path / "r", "cache": tmp_path / "c.db"}
    run_spec(oracle_spec(tmp_path, [1, 3]), **runs)
    shutil.copy(tmp_path / "c.db", tmp_path / "copy.db")
    spec = oracle_spec(tmp_path, [0, 1, 2, 3, 4])
    (done,) = run_spec(spec, **runs)
    target = done.manifest.target
    assert (target.cache_hits, target.calls) == (2, 3)
    assert done.summary.cache_hits == 2
    assert [r.id for r in done.records if r.calls[0].cache_hit] == ["s1", "s3"]

    loaded = load_spec(spec)
    fetched = fetch_run(
        plan(loaded, loaded.spec.models[0]), ResponseCache(tmp_path / "copy.db"),
        build_backend("local", concurrency=2),
    )  # fmt: skip
    assert (fetched.requests, fetched.cache_hits, fetched.calls) == (5, 2, 3)


# --- 9. a Python scorer that returns None is a scorer_error ----------------------------

NONE_SCORERS = """import asyncio

def maybe(response):
    return None if response == "2" else True

async def later(response):
    await asyncio.sleep(0)
    return None if response == "1" else 1.0
"""


def test_a_python_scorer_returning_none_is_a_scorer_error(tmp_path: Path) -> None:
    """A Python scorer (sync or async) that returns None scored nothing: a `scorer_error`
    with a reason, the primary scorer's making the record's outcome and failure mode."""
    spec = oracle_spec(tmp_path, [0, 1, 2, 3])
    (tmp_path / "none.py").write_text(NONE_SCORERS)
    spec.write_text(
        spec.read_text().replace(
            "scorer: {type: exact}\n",
            "scorers:\n"
            "  - {name: maybe, type: python, ref: 'none.py:maybe'}\n"
            "  - {name: later, type: python, ref: 'none.py:later'}\n",
        )
    )
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    by_id = {r.id: r for r in done.records}
    maybe = by_id["s2"].scores["maybe"]
    assert (maybe.score, maybe.error) == (None, "scorer_error")
    assert "NoneType" in maybe.reason
    assert (by_id["s2"].outcome, by_id["s2"].failure_mode) == ("scorer_error", "scorer_error")
    later = by_id["s1"].scores["later"]
    assert (later.score, later.error) == (None, "scorer_error")
    assert by_id["s1"].outcome == "scored"  # a secondary scorer's error is its own
    assert [by_id[i].score_of("maybe") for i in ("s0", "s1", "s3")] == [1.0] * 3
    assert done.summary.scorers["maybe"].errors == 1
    assert done.summary.scorers["later"].errors == 1
    assert done.summary.outcomes["scorer_error"] == 1


# --- 10. the cluster bootstrap resamples each case's sum and count together ------------

# Cases of unequal sizes: (sum, count) (1, 1), (0, 9) and (1.5, 3), 12 + 12 + 6 of them.
# (30 cases: with 10, as this test had, the bootstrap undercovers and `score_method`
# takes the score interval at the effective n instead; tests/analysis/test_coverage.py.)
CLUSTERS = ([[1.0]] * 4 + [[0.0] * 9] * 4 + [[1.0, 0.0, 0.5]] * 2) * 3


def achievable_ratios(groups: list[list[float]]) -> list[float]:
    """sum / count over every multiset of len(groups) whole cases drawn from `groups`."""
    kinds = sorted({(math.fsum(g), len(g)) for g in groups})
    ratios = set()
    for drawn in itertools.combinations_with_replacement(kinds, len(groups)):
        ratios.add(math.fsum(s for s, _ in drawn) / sum(c for _, c in drawn))
    return sorted(ratios)


@pytest.mark.parametrize("bca_max_n", [2000, 0], ids=["bca", "percentile"])
def test_the_cluster_bootstrap_resamples_sums_and_counts_together(bca_max_n: int) -> None:
    """With cases of unequal sizes, each end of the interval is a ratio whole resampled
    cases can give (resampled apart, sums and counts give ratios no set of cases has),
    and the interval is exactly scipy's bootstrap of the cases' indices, by hand."""
    # 10,001 resamples: the percentile's 2.5 % and 97.5 % ends fall on order statistics
    # (q * (n - 1) is whole), not between two, which would be no achievable ratio.
    settings = BootstrapSettings(bca_max_n=bca_max_n, n_resamples=10_001)
    interval = cluster_mean_interval(CLUSTERS, settings=settings)
    method = "bca" if bca_max_n else "percentile"
    assert interval.method == f"cluster-bootstrap-{method}"
    possible = achievable_ratios(CLUSTERS)
    for end in (interval.low, interval.high):
        assert any(math.isclose(end, r, rel_tol=1e-9) for r in possible), end
    mean = math.fsum(map(math.fsum, CLUSTERS)) / sum(map(len, CLUSTERS))  # 21 / 138
    assert interval.low < mean < interval.high

    # The reference: resample case indices, each case's sum and count taken together.
    sums = np.array([math.fsum(g) for g in CLUSTERS])
    counts = np.array([float(len(g)) for g in CLUSTERS])
    reference = bootstrap(
        (np.arange(len(CLUSTERS)),),
        lambda cases, axis=-1: sums[cases].sum(axis=axis) / counts[cases].sum(axis=axis),
        confidence_level=0.95,
        n_resamples=settings.n_resamples,
        method="BCa" if bca_max_n else "percentile",
        vectorized=True,
        rng=np.random.default_rng(settings.seed),
    ).confidence_interval
    assert (interval.low, interval.high) == pytest.approx((reference.low, reference.high))
