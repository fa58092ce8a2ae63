"""Dagster runs launched the way a deployment launches them: `dagster asset materialize`
processes (one run per partition) against a DAGSTER_HOME, with the definitions built
from GRADETRAIL_* variables, and their run directories' records compared with timings
aside."""

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

STEPS = ("dataset", "responses", "scores", "stats", "report")
DAGSTER = str(Path(sys.executable).parent / "dagster")


def write_spec(
    specs: Path,
    name: str,
    *,
    base_url: str,
    models: Sequence[str],
    n: int,
    offset: int = 0,
    scorers: str = "scorer: {type: numeric}",
) -> None:
    """Spec `name` over n sums "Q: a + b" (a from `offset`, so that specs with different
    offsets send different requests), every stored answer right, on the fake server."""
    data = specs / "data" / f"{name}.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    with open(data, "w") as out:
        for i in range(offset, offset + n):
            row = {"id": f"s{i:03d}", "a": i, "b": 2 * i + 1, "answer": str(3 * i + 1)}
            out.write(json.dumps(row) + "\n")
    listed = "\n".join(
        f'  - {{provider: openai_compatible, name: {model}, base_url: "{base_url}"}}'
        for model in models
    )
    (specs / f"{name}.yaml").write_text(
        f"""name: {name}
dataset: {{path: data/{name}.jsonl}}
prompt: "Q: {{{{ a }}}} + {{{{ b }}}}"
models:
{listed}
params: {{temperature: 0, max_tokens: 16}}
{scorers}
"""
    )


def materialize(
    spec: str, partition: str, *, cwd: Path, env: Mapping[str, str], steps: Sequence[str] = STEPS
) -> subprocess.Popen[str]:
    """One run of `spec`'s steps for one partition, started (not waited for)."""
    return subprocess.Popen(
        [
            DAGSTER, "asset", "materialize", "-m", "gradetrail_assets.definitions",
            "--partition", partition, "--select", ",".join(f"{spec}/{s}" for s in steps),
        ],
        cwd=cwd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def wait_all(processes: Sequence[subprocess.Popen[str]], timeout: float = 240) -> None:
    """Waits for every run; fails with the output of the first that failed."""
    outputs = [p.communicate(timeout=timeout)[0] for p in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-4000:]
        assert "RUN_SUCCESS" in output, output[-4000:]


def comparable(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record with its timings left out (each call's latency)."""
    calls = [{k: v for k, v in call.items() if k != "latency_s"} for call in record["calls"]]
    return {**record, "calls": calls}


def run_records(results: Path) -> dict[str, list[dict[str, Any]]]:
    """Every run directory under `results` by name (spec, model and identity), its records
    by sample and repeat (they are written as they finish), timings aside."""
    found = {}
    for run_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        with open(run_dir / "results.jsonl") as lines:
            records = [comparable(json.loads(line)) for line in lines]
        found[run_dir.name] = sorted(records, key=lambda r: (r["id"], r["repeat"]))
    return found
