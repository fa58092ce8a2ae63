"""Real run directories for the compare / gate / cost / report tests.

One spec with several fake models on one loopback server: being one spec, the runs
share the dataset hash and the scorer hashes, so pairing them is valid, and the models
differ only in how the responder answers (keyed on the request's model name). A spec
may have several scorers (`MULTI_SCORERS`: numeric, regex, Python and an LLM judge,
the judge a priced model on the same fake server).
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
_JUDGE = re.compile(r"JUDGE expected=(\S*)\nresponse=(.*)", re.S)
_NUMBER = re.compile(r"-?\d+")

# The judge prompt (`judge.j2`); the responder grades it as a judge model would.
JUDGE_PROMPT = "JUDGE expected={{ answer }}\nresponse={{ response }}\n"
# A Python scorer (`short.py`): an answer passes when it is at most 12 characters.
SHORT_SCORER = """def fn(response, sample):
    return (len(response) <= 12, f"{len(response)} characters")
"""
JUDGE_MODEL = "claude-sonnet-4-5"  # priced in pricing v1
# The spec's `scorers:` list: numeric first (the primary), then regex, Python, judge.
MULTI_SCORERS = """
  - {{name: num, type: numeric}}
  - {{name: rx, type: regex, pattern: 'Answer: {{{{ answer }}}}$'}}
  - {{name: short, type: python, ref: "short.py:fn"}}
  - name: judge
    type: judge
    prompt_file: judge.j2
    model: {{provider: anthropic, name: {judge}, base_url: "{base_url}", api_key_env: GT_FAKE_KEY}}
"""


def write_dataset(path: Path, n: int) -> None:
    """Samples "Q: a + b" whose stored answers are all right."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        for i in range(n):
            a, b = i, 2 * i + 1
            out.write(json.dumps({"id": f"s{i:03d}", "a": a, "b": b, "answer": str(a + b)}) + "\n")


def judge(expected: str, response: str) -> str:
    """The judge's grade: C when the response's last number is the expected answer, else
    I; it quotes markup it was shown (so a report must escape a judge's output too)."""
    numbers = _NUMBER.findall(response)
    grade = "C" if numbers and numbers[-1] == expected else "I"
    quoted = f"The response contains {MALICIOUS}. " if "<script>" in response else ""
    return f"{quoted}GRADE: {grade}"


def responder(body: dict[str, Any]) -> str:
    """fake-good is always right; fake-bad is wrong when a % 3 == 0; fake-close only at
    a == 5; fake-verbose rambles past max_tokens; fake-evil answers with markup;
    fake-wordy is right in a sentence (the last number right, `Answer: N` not there).
    A judge prompt (`JUDGE_PROMPT`) is graded by `judge`."""
    model = body.get("model")
    text = last_user_message(body)
    judged = _JUDGE.match(text)
    if judged is not None:
        return judge(judged.group(1), judged.group(2).strip())
    match = _QA.search(text)
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
    if model == "fake-wordy":
        return f"So the sum is {a + b}"
    return default_responder(body)


def write_spec(
    path: Path,
    base_url: str,
    models: list[str],
    *,
    scorer: str = "{type: numeric}",
    scorers: str | None = None,
    dataset: str = "data/add.jsonl",
) -> Path:
    """A spec of `models`; `scorers` (the YAML of a `scorers:` list, e.g. MULTI_SCORERS)
    replaces the one `scorer`, and the files its scorers name are written next to it."""
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
    scoring = f"scorers:{scorers.rstrip()}" if scorers is not None else f"scorer: {scorer}"
    path.write_text(
        f"""name: add
dataset: {{path: {dataset}}}
prompt: |
  Q: {{{{ a }}}} + {{{{ b }}}}
models:
{chr(10).join(lines)}
params: {{temperature: 0, max_tokens: 16}}
{scoring}
"""
    )
    (path.parent / "judge.j2").write_text(JUDGE_PROMPT)
    (path.parent / "short.py").write_text(SHORT_SCORER)
    return path


def multi_scorers(base_url: str, *, regex: str = "Answer: {{ answer }}$") -> str:
    """MULTI_SCORERS with its judge on `base_url`; `regex` changes the rx scorer."""
    text = MULTI_SCORERS.format(judge=JUDGE_MODEL, base_url=base_url)
    return text.replace("Answer: {{ answer }}$", regex)


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
