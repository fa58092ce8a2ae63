"""Real run directories for the compare / gate / cost / report tests.

One spec with several fake models on one loopback server: being one spec, the runs
share the dataset hash and the scorer hash, so pairing them is valid, and the models
differ only in how the responder answers (keyed on the request's model name).
"""

import json
import re
import subprocess
from pathlib import Path
from typing import Any

from tests.conftest import run_cli
from tests.support.fake_llm_server import FakeLLMServer, default_responder, last_user_message

MALICIOUS = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='img'\">"
_QA = re.compile(r"Q: (\d+) \+ (\d+)")


def write_dataset(path: Path, n: int) -> None:
    """Samples "Q: a + b" whose stored answers are all right."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        for i in range(n):
            a, b = i, 2 * i + 1
            out.write(json.dumps({"id": f"s{i:03d}", "a": a, "b": b, "answer": str(a + b)}) + "\n")


def responder(body: dict[str, Any]) -> str:
    """fake-good is always right; fake-bad is wrong when a % 3 == 0; fake-close only at
    a == 5; fake-verbose rambles past max_tokens; fake-evil answers with markup."""
    model = body.get("model")
    match = _QA.search(last_user_message(body))
    if match is None:
        return default_responder(body)
    a, b = int(match.group(1)), int(match.group(2))
    if model == "fake-bad" and a % 3 == 0:
        return f"Answer: {a + b + 1}"
    if model == "fake-close" and a == 5:
        return f"Answer: {a + b + 1}"
    if model == "fake-verbose":
        return "Let me think about this step by step. " * 4 + f"Answer: {a + b}"
    if model == "fake-evil":
        return f"{MALICIOUS} Answer: {a + b + 7}"
    return default_responder(body)


def write_spec(
    path: Path,
    base_url: str,
    models: list[str],
    *,
    scorer: str = "{type: numeric}",
    dataset: str = "data/add.jsonl",
) -> Path:
    lines = []
    for name in models:
        if name.startswith("claude-"):  # a priced model, spoken to as Anthropic
            lines.append(
                f'  - {{provider: anthropic, name: {name}, base_url: "{base_url}", '
                "api_key_env: GT_FAKE_KEY}"
            )
        else:
            lines.append(
                f'  - {{provider: openai_compatible, name: {name}, base_url: "{base_url}"}}'
            )
    path.write_text(
        f"""name: add
dataset: {{path: {dataset}}}
prompt: |
  Q: {{{{ a }}}} + {{{{ b }}}}
models:
{chr(10).join(lines)}
params: {{temperature: 0, max_tokens: 16}}
scorer: {scorer}
"""
    )
    return path


def run_spec(spec: Path, cwd: Path) -> dict[str, Path]:
    """`gradetrail run SPEC` for real; the run directory of each model, by model name."""
    done: subprocess.CompletedProcess[str] = run_cli(
        "run",
        str(spec),
        "--cache",
        str(cwd / "cache.duckdb"),
        "--results",
        str(cwd / "results"),
        cwd=cwd,
        env={"GT_FAKE_KEY": "sk-fake-not-a-secret"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    dirs = {}
    for line in done.stdout.splitlines():
        if line.startswith("Run: "):
            label, path = line[len("Run: ") :].split(" -> ", 1)
            dirs[label.split("/", 1)[1]] = Path(path)
    return dirs


def start_server() -> FakeLLMServer:
    return FakeLLMServer(latency_s=0.0, responder=responder).start()
