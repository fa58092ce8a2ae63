"""The shipped tool-use suite (specs/tools.yaml) against a loopback fake that plays known
trajectories: right answers, a wrong tool, a thrash, a case over the budget, a tool error."""

import json
import shutil
from pathlib import Path
from typing import Any

from gradetrail_lib import load_run
from tests.conftest import REPO, run_cli
from tests.support.agent_scripts import conversation, tool_call
from tests.support.fake_llm_server import FakeLLMServer

CASES = [json.loads(line) for line in (REPO / "specs/data/tools.jsonl").read_text().splitlines()]
BY_QUESTION = {c["question"]: c for c in CASES}
MISBEHAVING = {
    "weather-01": "wrong_tool",
    "arith-01": "thrash",
    "stock-01": "over_budget",
    "weather-02": "tool_error",
}


def oracle(body: dict[str, Any]) -> Any:
    """Calls the expected tools one per turn, then answers with the expected values; the
    misbehaving cases do what their name says."""
    c = conversation(body)
    case = BY_QUESTION[c.messages[0]["content"]]
    expected, turn = case["expected"]["tool_calls"], c.turns
    behaviour = MISBEHAVING.get(case["id"])
    if behaviour == "wrong_tool" and turn == 0:
        return tool_call("forecast", **expected[0]["arguments"])
    if behaviour == "thrash":
        return tool_call(expected[0]["name"], **expected[0]["arguments"])
    if behaviour == "over_budget":
        return tool_call("inventory", sku=f"XX-{turn}")
    if behaviour == "tool_error" and turn == 0:
        return tool_call("weather", city="Atlantis")
    if behaviour is None and turn < len(expected):
        return tool_call(expected[turn]["name"], **expected[turn]["arguments"])
    answer = case["answer"]
    if behaviour is not None:
        return "I could not find out."
    return "The answer: " + ", ".join(answer if isinstance(answer, list) else [answer])


def test_the_shipped_suite_against_known_trajectories(tmp_path: Path) -> None:
    for name in ("data", "scorers"):
        shutil.copytree(REPO / "specs" / name, tmp_path / name)
    with FakeLLMServer(responder=oracle) as srv:
        text = (REPO / "specs" / "tools.yaml").read_text()
        endpoint = f'{{provider: openai_compatible, name: agent-1, base_url: "{srv.base_url}/v1"}}'
        spec = tmp_path / "tools.yaml"
        spec.write_text(text.replace("{provider: local, name: smollm2-135m}", endpoint))
        args = ("run", str(spec), "--cache", str(tmp_path / "c.db"), "--concurrency", "16")
        cold = run_cli(*args, cwd=tmp_path)
        assert cold.returncode == 0, cold.stderr
        sent = srv.calls
        warm = run_cli(*args, cwd=tmp_path)
        assert warm.returncode == 0, warm.stderr
        assert srv.calls == sent, "a re-run replays every trajectory from the cache"
    assert len(CASES) >= 30
    assert {c["expected"]["tool_calls"][0]["name"] for c in CASES} == {
        "weather", "calculator", "inventory",
    }  # fmt: skip
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    records = {r.id: r for r in load_run(run_dir)}
    modes = {i: r.failure_mode for i, r in records.items() if r.failure_mode}
    assert modes == {
        "weather-01": "tool_error",  # no tool named forecast
        "arith-01": "thrash",
        "stock-01": "budget_exhausted",
        "weather-02": "tool_error",  # no scripted result for Atlantis
    }
    right = [r for i, r in records.items() if i not in MISBEHAVING]
    assert all(r.score_of("calls") == 1.0 and r.score_of("answer") == 1.0 for r in right)
    assert max(len(r.trajectory) for r in right) == 4  # three calls, then the answer
    assert f"Cache hits: {sent}/{sent}" in warm.stdout
