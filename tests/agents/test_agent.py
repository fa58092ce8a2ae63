"""Agents end to end: a tool-using spec against the loopback fake, which plays known
trajectories in both provider formats; every step cached; the ways an agent fails."""

import json
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib import load_run, run_spec
from gradetrail_lib.backends import local
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.policy import RetryPolicy
from gradetrail_lib.spec.identity import run_identity
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import run_cli
from tests.support.agent_scripts import conversation, tool_call
from tests.support.fake_llm_server import FakeLLMServer

CITIES = {
    "Paris": "sunny",  # answers right after one call
    "Rome": "rainy",  # answers right (not sunny: the regex scorer fails it)
    "Atlantis": None,  # calls a tool that does not exist, then gives up
    "Nowhere": None,  # no scripted result for its call, then answers wrongly
    "Loop": "foggy",  # calls the same thing again: thrash
    "Budget": "windy",  # keeps calling with new arguments: over the budget
}


def sample(city: str) -> dict[str, Any]:
    results = {"weather": []}
    if CITIES[city] is not None and city != "Nowhere":
        results["weather"].append(
            {"arguments": {"city": city}, "result": {"condition": CITIES[city]}}
        )
    for i in range(1, 6):
        results["weather"].append(
            {"arguments": {"city": f"{city}{i}"}, "result": {"condition": "windy"}}
        )
    return {
        "id": city.lower(),
        "city": city,
        "expected": {"tool_calls": [{"name": "weather", "arguments": {"city": city}}]},
        "tool_results": results,
    }


def agent(body: dict[str, Any]) -> Any:
    """The fake agent: what each city's case does at each turn."""
    c = conversation(body)
    city = c.messages[0]["content"].split(" in ")[1].rstrip("?")
    turn = c.turns
    if city == "Atlantis":
        return tool_call("forecast", city=city) if turn == 0 else "I cannot tell."
    if city == "Loop":
        return tool_call("weather", city=city)
    if city == "Budget":
        return tool_call("weather", city=f"{city}{turn + 1}")
    if turn == 0:
        return tool_call("weather", city=city)
    result = json.loads(c.last_tool_results[0]["content"])
    if "error" in result:
        return "It is sunny, I suppose."
    return f"It is {result['condition']} in {city}."


SPEC = """name: weather
dataset: {{path: data/weather.jsonl}}
messages:
  - {{role: system, content: "You answer with the tools you are given."}}
  - {{role: user, content: "What is the weather in {{{{ city }}}}?"}}
model: {{provider: {provider}, name: agent-1, base_url: "{base_url}", api_key_env: GT_KEY}}
params: {{temperature: 0, max_tokens: 64}}
tools:
  - name: weather
    description: Look up current conditions.
    parameters:
      {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}{tool_extra}
step_budget: 3
scorers:
  - {{name: calls, type: tool_call}}
  - {{name: answer, type: regex, pattern: "(?i)sunny"}}
"""


def project(
    tmp_path: Path, base_url: str, provider: str = "openai_compatible", tool_extra: str = ""
) -> Path:
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "weather.jsonl").write_text(
        "".join(json.dumps(sample(c)) + "\n" for c in CITIES)
    )
    spec = tmp_path / "weather.yaml"
    spec.write_text(SPEC.format(provider=provider, base_url=base_url, tool_extra=tool_extra))
    return spec


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")


def records_by_id(done: Any) -> dict[str, Any]:
    return {r.id: r for r in done.records}


@pytest.mark.parametrize("provider", ["openai_compatible", "anthropic"])
def test_known_trajectories_and_their_failure_modes(tmp_path: Path, provider: str) -> None:
    with FakeLLMServer(responder=agent) as srv:
        spec = project(tmp_path, f"{srv.base_url}/v1", provider)
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        sent = srv.calls
        by_id = records_by_id(done)
        paris = by_id["paris"]
        assert (paris.outcome, paris.failure_mode) == ("scored", None)
        assert paris.score_of("calls") == 1.0 and paris.score_of("answer") == 1.0
        assert [len(s.tool_calls) for s in paris.trajectory] == [1, 0]
        assert paris.trajectory[0].tool_results[0].content == '{"condition": "sunny"}'
        assert paris.response == "It is sunny in Paris." and len(paris.calls) == 2
        rome = by_id["rome"]
        # The primary scorer (the tool calls) passes; the answer scorer does not.
        assert (rome.failure_mode, rome.score_of("calls")) == (None, 1.0)
        assert rome.score_of("answer") == 0.0
        atlantis = by_id["atlantis"]
        assert atlantis.failure_mode == "tool_error"
        assert "no tool named 'forecast'" in str(atlantis.trajectory[0].tool_results[0].error)
        nowhere = by_id["nowhere"]
        assert nowhere.failure_mode is None and nowhere.score_of("answer") == 1.0  # lucky guess
        assert nowhere.trajectory[0].tool_results[0].error.startswith("no scripted result")
        loop = by_id["loop"]
        assert loop.failure_mode == "thrash" and len(loop.trajectory) == 2
        assert loop.trajectory[1].tool_results == []  # stopped at once, not run again
        budget = by_id["budget"]
        assert budget.failure_mode == "budget_exhausted" and len(budget.trajectory) == 3
        assert sent == 2 + 2 + 2 + 2 + 2 + 3
        assert done.summary.failure_modes == {"budget_exhausted": 1, "thrash": 1, "tool_error": 1}

        # A re-run replays every trajectory from the cache.
        (again,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == sent
        assert again.manifest.target.calls == 0 and again.manifest.target.cache_hits == sent
        assert [r.trajectory for r in again.records] == [
            [type(s)(**{**s.__dict__, "cache_hit": True}) for s in r.trajectory]
            for r in done.records
        ]
        assert [r.scores for r in again.records] == [r.scores for r in done.records]


def test_a_changed_tool_result_resends_only_the_steps_after_it(tmp_path: Path) -> None:
    with FakeLLMServer(responder=agent) as srv:
        spec = project(tmp_path, f"{srv.base_url}/v1")
        run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        first = srv.calls
        data = tmp_path / "data" / "weather.jsonl"
        rows = [json.loads(line) for line in data.read_text().splitlines()]
        rows[0]["tool_results"]["weather"][0]["result"] = {"condition": "hail"}  # paris
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == first + 1, "only Paris's second step is new"
        paris = records_by_id(done)["paris"]
        assert [s.cache_hit for s in paris.trajectory] == [True, False]
        assert paris.response == "It is hail in Paris."


def test_one_failing_case_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paris's first call fails on every attempt: its case is a provider error, Rome's is
    scored. (Its 6 attempts back off from 10 ms, not 0.5 s: about 8 s of waiting otherwise,
    and how long a retry waits is tests/providers' business.)"""
    monkeypatch.setattr(local, "RetryPolicy", partial(RetryPolicy, base_delay_s=0.01))

    def flaky(body: dict[str, Any]) -> Any:
        c = conversation(body)
        if "Paris" in c.messages[0]["content"] and c.turns == 1:
            raise RuntimeError("boom")  # the fake answers 500 when its responder raises
        return agent(body)

    with FakeLLMServer(responder=agent) as srv:
        srv.responder = flaky
        spec = project(tmp_path, f"{srv.base_url}/v1")
        done = run_cli("run", str(spec), "--cache", str(tmp_path / "c.db"), cwd=tmp_path,
                       env={"GT_KEY": "k"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    by_id = {r.id: r for r in load_run(run_dir)}
    paris = by_id["paris"]
    assert (paris.outcome, paris.failure_mode) == ("provider_error", "provider_error")
    assert paris.calls[1].error is not None and len(paris.trajectory) == 1
    assert by_id["rome"].outcome == "scored"


def test_python_tools_sync_and_async_are_hashed_into_the_identity(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    source = tmp_path / "tools" / "weather.py"
    source.write_text(
        "import asyncio\n\n"
        "async def weather(city):\n"
        "    await asyncio.sleep(0)\n"
        "    if city == 'Atlantis':\n"
        "        raise LookupError('no such city')\n"
        "    return {'condition': 'sunny' if city == 'Paris' else 'cloudy'}\n"
    )
    with FakeLLMServer(responder=agent) as srv:
        spec = project(
            tmp_path, f"{srv.base_url}/v1", tool_extra='\n    ref: "tools/weather.py:weather"'
        )
        loaded = load_spec(spec)
        before = run_identity(loaded, "d")
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    by_id = records_by_id(done)
    assert by_id["paris"].trajectory[0].tool_results[0].content == '{"condition": "sunny"}'
    assert by_id["nowhere"].trajectory[0].tool_results[0].error is None  # not scripted now
    source.write_text(source.read_text().replace("cloudy", "overcast"))
    assert run_identity(load_spec(spec), "d") != before


def test_tool_spec_errors_name_file_line_and_field(tmp_path: Path) -> None:
    spec = project(
        tmp_path, "http://127.0.0.1:9/v1", tool_extra='\n    ref: "tools/gone.py:weather"'
    )
    with pytest.raises(InputError) as caught:
        load_spec(spec)
    assert caught.value.field == "tools[0].ref" and caught.value.line == 13
    assert "no such file" in caught.value.message
    bad = spec.read_text().replace("{type: object, properties", "{type: array, items")
    spec.write_text(bad.replace('\n    ref: "tools/gone.py:weather"', ""))
    with pytest.raises(InputError) as caught:
        load_spec(spec)
    assert caught.value.field == "tools[0].parameters"


def test_a_plain_request_keeps_its_key_beside_a_tool_spec(tmp_path: Path) -> None:
    """A spec without tools and with one user message keys exactly as a `prompt:` spec."""
    from gradetrail_lib.engine.plan import plan
    from tests.support.plans import whole

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text('{"id": "a", "q": "hi"}\n')
    base = (
        "name: k\ndataset: {path: data/x.jsonl}\nmodel: {provider: openai, name: gpt-x}\n"
        "scorer: {type: json_valid}\n"
    )
    (tmp_path / "p.yaml").write_text(base + "prompt: '{{ q }}'\n")
    (tmp_path / "m.yaml").write_text(base + "messages: [{role: user, content: '{{ q }}'}]\n")
    keys = []
    for name in ("p.yaml", "m.yaml"):
        loaded = load_spec(tmp_path / name)
        keys.append(whole(plan(loaded, loaded.spec.models[0])).items[0].request.key)
    assert keys[0] == keys[1]


def test_retrieved_documents_reach_the_record_and_the_retrieval_command(tmp_path: Path) -> None:
    """A search tool's scripted result carries documents; the sample lists the relevant
    ids and support verdicts; `gradetrail retrieval` reads them back from the run."""

    def searcher(body: dict[str, Any]) -> Any:
        c = conversation(body)
        if c.turns == 0:
            return tool_call("search", query="capital of France")
        return "Paris [doc:d2], and Lyon [doc:d9]."

    (tmp_path / "data").mkdir()
    docs = [{"id": "d1", "text": "France"}, {"id": "d2", "text": "Paris is the capital"}]
    row = {
        "id": "q1",
        "question": "What is the capital of France?",
        "relevant_context_ids": ["d2", "d3"],
        "citation_support": {"d2": True},
        "expected": {
            "tool_calls": [{"name": "search", "arguments": {"query": "capital of France"}}]
        },
        "tool_results": {
            "search": [{"arguments": {"query": "capital of France"}, "result": {"documents": docs}}]
        },
    }
    (tmp_path / "data" / "q.jsonl").write_text(json.dumps(row) + "\n")
    with FakeLLMServer(responder=searcher) as srv:
        (tmp_path / "rag.yaml").write_text(
            "name: rag\ndataset: {path: data/q.jsonl}\n"
            "messages: [{role: user, content: '{{ question }}'}]\n"
            f'model: {{provider: openai_compatible, name: rag-1, base_url: "{srv.base_url}/v1"}}\n'
            "tools:\n  - name: search\n"
            "    parameters: {type: object, properties: {query: {type: string}}}\n"
            "scorer: {type: tool_call}\n"
        )
        (done,) = run_spec(
            tmp_path / "rag.yaml", results_root=tmp_path / "r", cache=tmp_path / "c.db"
        )
    (record,) = done.records
    assert [d["id"] for d in record.trajectory[0].tool_results[0].documents] == ["d1", "d2"]
    assert record.retrieval is not None and record.retrieval.relevant_ids == ["d2", "d3"]
    out = run_cli("retrieval", str(done.run_dir), "--k", "2", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (figures,) = json.loads(out.stdout)
    # d1, d2 retrieved; d2 of d2, d3 relevant: precision@2 1/2, recall@2 1/2, MRR 1/2.
    assert [figures[m]["value"] for m in ("precision_at_k", "recall_at_k", "mrr")] == [0.5] * 3
    # d2 is retrieved and supported; d9 was never retrieved: unsupported.
    faithful = figures["citation_faithfulness"]
    assert (faithful["value"], faithful["n"], faithful["successes"]) == (0.5, 2, 1)


@pytest.mark.timeout(180)
@pytest.mark.slow  # a local Ray cluster
def test_an_agent_runs_on_the_ray_backend_step_by_step(tmp_path: Path) -> None:
    """Each step is one `run` of the backend: with Ray, the same trajectories as locally."""
    with FakeLLMServer(responder=agent) as srv:
        spec = project(tmp_path, f"{srv.base_url}/v1")
        (ray_run,) = run_spec(
            spec, results_root=tmp_path / "ray", cache=tmp_path / "ray.db", backend="ray"
        )
        (local,) = run_spec(spec, results_root=tmp_path / "local", cache=tmp_path / "local.db")
    assert [r.failure_mode for r in ray_run.records] == [r.failure_mode for r in local.records]

    # The fake numbers its tool-call ids across runs, so later keys differ; the steps do not.
    def steps(done: Any) -> list[Any]:
        return [
            [(s.content, [(c["name"], c["arguments"]) for c in s.tool_calls]) for s in r.trajectory]
            for r in done.records
        ]

    assert steps(ray_run) == steps(local)
    assert ray_run.manifest.execution["backend"] == "ray"
