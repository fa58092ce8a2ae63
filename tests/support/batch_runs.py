"""A small project for `run --batch` tests: N distinct additions, a target and a judge
on the fake server (key in GT_KEY)."""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.fake_llm_server import FakeLLMServer, default_responder

N = 6
TARGET, JUDGE = "claude-haiku-4-5", "judge-1"


def responder(body: dict[str, Any]) -> str:
    return "GRADE: C" if body.get("model") == JUDGE else default_responder(body)


def project(
    tmp_path: Path,
    base_url: str,
    judge_provider: str = "openai",
    target_provider: str = "anthropic",
) -> Path:
    """N distinct additions, a target (Anthropic by default) and a judge (OpenAI)."""
    (tmp_path / "data").mkdir(exist_ok=True)
    with open(tmp_path / "data" / "add.jsonl", "w") as out:
        for i in range(N):
            out.write(
                json.dumps({"id": f"s{i}", "a": i, "b": 1000, "answer": str(i + 1000)}) + "\n"
            )
    (tmp_path / "judge.j2").write_text(
        "Reference: {{ answer }}\nResponse: {{ response }}\nEnd with GRADE: C or GRADE: I.\n"
    )
    spec = tmp_path / "add.yaml"
    spec.write_text(
        "name: add\ndataset: {path: data/add.jsonl}\nprompt: 'Q: {{ a }} + {{ b }}'\n"
        f"model: {{provider: {target_provider}, name: {TARGET}, "
        f'base_url: "{base_url}/v1", api_key_env: GT_KEY}}\n'
        "params: {temperature: 0, max_tokens: 16}\n"
        "scorers:\n"
        "  - {name: sum, type: numeric}\n"
        "  - name: judged\n"
        "    type: judge\n"
        "    prompt_file: judge.j2\n"
        f"    model: {{provider: {judge_provider}, name: {JUDGE}, "
        f'base_url: "{base_url}/v1", api_key_env: GT_KEY}}\n'
        "    params: {temperature: 0, max_tokens: 8}\n"
    )
    return spec


@contextmanager
def serve_batches() -> Iterator[FakeLLMServer]:
    """The fake server answering the project's target and judge, batches in 0.1 s."""
    with FakeLLMServer(responder=responder) as srv:
        srv.batches.delay_s = 0.1
        yield srv


# The Dagster partition of the project's target.
MODEL_PARTITION = TARGET
