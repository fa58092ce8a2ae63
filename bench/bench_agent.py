"""Benchmark of agent runs (not a test: prints ratios).

    .venv/bin/python -m bench.bench_agent [--n 500] [--latency 0.2] [--concurrency 64]

1. Cold: n cases of three steps each (two tool calls, then the answer) against a loopback
   fake answering after L seconds, at concurrency C: the responses step's wall time over
   the floor 3*n*L/C, the median of `repeats` runs.
2. Warm: a replay of the same from the cache: whole-process wall time over a bare
   `gradetrail --version`, in turn in each round, each checked to send nothing.
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.bench_pipeline import GRADETRAIL, _spread, manifest_of, start_server, timed
from tests.support.agent_scripts import conversation, tool_call

SPEC = """name: agent
dataset: {{path: data/cases.jsonl}}
messages:
  - {{role: user, content: "[{tag}] Look up {{{{ n }}}} and the one after it."}}
model: {{provider: openai_compatible, name: agent-1, base_url: "{url}"}}
params: {{temperature: 0, max_tokens: 32}}
tools:
  - name: lookup
    parameters: {{type: object, properties: {{n: {{type: integer}}}}, required: [n]}}
step_budget: 4
scorers:
  - {{name: calls, type: tool_call}}
"""


def responder(body: dict[str, Any]) -> Any:
    """Turn 0 looks up n, turn 1 looks up n + 1, turn 2 answers."""
    c = conversation(body)
    n = int(c.messages[0]["content"].split("Look up ")[1].split(" ")[0])
    if c.turns < 2:
        return tool_call("lookup", n=n + c.turns)
    return f"Found {n} and {n + 1}."


def write_case(case: Path, n: int, url: str, tag: str) -> Path:
    (case / "data").mkdir(parents=True, exist_ok=True)
    with open(case / "data" / "cases.jsonl", "w") as out:
        for i in range(n):
            row = {
                "id": f"c{i}",
                "n": i,
                "expected": {
                    "tool_calls": [{"name": "lookup", "arguments": {"n": k}} for k in (i, i + 1)]
                },
                "tool_results": {
                    "lookup": [
                        {"arguments": {"n": k}, "result": {"value": k * k}} for k in (i, i + 1)
                    ]
                },
            }
            out.write(json.dumps(row) + "\n")
    spec = case / "agent.yaml"
    spec.write_text(SPEC.format(tag=tag, url=url))
    return spec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n, latency, concurrency = args.n, args.latency, args.concurrency
    floor = 3 * n * latency / concurrency
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server, url = start_server(latency, workdir, "bench.bench_agent:responder")
        ratios = []
        try:
            for i in range(args.repeats):
                case = workdir / f"cold-{i}"
                spec = write_case(case, n, url, f"cold-{i}")
                run = [*GRADETRAIL, "run", str(spec), "--cache", str(case / "c.duckdb")]
                _, out = timed([*run, "--concurrency", str(concurrency)], case)
                manifest = manifest_of(out, case)
                assert manifest["target"]["calls"] == 3 * n  # type: ignore[index]
                ratios.append(manifest["timings_s"]["responses"] / floor)  # type: ignore[index]
        finally:
            server.terminate()
            server.wait()
        print(
            f"cold agent n={n} x 3 steps L={latency * 1000:.0f}ms C={concurrency}: responses "
            f"step / (3*n*L/C) = {statistics.median(ratios):.3f} median of {args.repeats} "
            f"({_spread(ratios)})"
        )
        case = workdir / "cold-0"
        run = [*GRADETRAIL, "run", str(case / "agent.yaml"), "--cache", str(case / "c.duckdb")]
        version, warm = [], []
        for _ in range(args.repeats):
            version.append(timed([*GRADETRAIL, "--version"], case)[0])
            wall, out = timed(run, case)
            assert manifest_of(out, case)["target"]["calls"] == 0  # type: ignore[index]
            warm.append(wall)
        print(
            f"warm replay of {n} cases x 3 steps / `gradetrail --version` = "
            f"{statistics.median(warm) / statistics.median(version):.2f} median of "
            f"{args.repeats} ({_spread([w / v for w, v in zip(warm, version, strict=True)])}); "
            "zero calls"
        )


if __name__ == "__main__":
    main()
