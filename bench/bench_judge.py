"""Benchmark of judged runs (not a test: prints ratios).

    .venv/bin/python -m bench.bench_judge [--n 500] [--latency 0.2] [--warm-n 10000]

1. Cold: n samples at concurrency C=64 against a loopback fake target answering after L
   seconds, each judged by a judge on its own fake endpoint answering after L too. With
   judging pipelined (each response judged as it arrives, on the judge's own C slots) the
   floor is n*L/C + L: the target's rounds, then the last response's judging. Reported:
   the run's responses and scoring steps (manifest timings) over that floor, the median
   of `repeats` runs.
2. Warm: a fully cached re-run of `warm-n` samples with three scorers (regex, Python, a
   judge): whole-process wall time over a bare `gradetrail --version`, measured in turn in
   each round; every round checked to send no target and no judge call.

Each fake server runs in a process of its own.
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.bench_pipeline import GRADETRAIL, _spread, manifest_of, start_server, timed
from tests.conftest import write_addition_dataset

JUDGE = "Response: {{ response }}\nReference: {{ answer }}\nGRADE: C\n"
PYTHON = "def short(response):\n    return len(response) < 40\n"


def write_judged(case: Path, target_url: str, judge_url: str, tag: str) -> Path:
    (case / "judges").mkdir(parents=True, exist_ok=True)
    # The fake echoes what it gets (`Echo: ...GRADE: C`), which the judge's pattern reads.
    (case / "judges" / "grade.j2").write_text(f"[{tag}] {JUDGE}")
    (case / "metrics.py").write_text(PYTHON)
    spec = case / "judged.yaml"
    spec.write_text(
        f"""name: judged
dataset: {{path: data/add.jsonl}}
prompt: "[{tag}] Q: {{{{ a }}}} + {{{{ b }}}}"
model: {{provider: openai_compatible, name: fake-1, base_url: "{target_url}"}}
params: {{temperature: 0, max_tokens: 16}}
scorers:
  - {{name: answer, type: regex, pattern: 'Answer: {{{{ answer }}}}'}}
  - {{name: short, type: python, ref: "metrics.py:short"}}
  - name: judged
    type: judge
    prompt_file: judges/grade.j2
    model: {{provider: openai_compatible, name: judge-1, base_url: "{judge_url}"}}
"""
    )
    return spec


def cold_ratios(n: int, latency_s: float, concurrency: int, workdir: Path, repeats: int) -> None:
    target, target_url = start_server(latency_s, _mkdir(workdir / "target"))
    judge, judge_url = start_server(latency_s, _mkdir(workdir / "judge"))
    floor = n * latency_s / concurrency + latency_s
    ratios = []
    try:
        for i in range(repeats):
            case = workdir / f"cold-{i}"
            write_addition_dataset(case / "data" / "add.jsonl", n)
            spec = write_judged(case, target_url, judge_url, f"cold-{i}")
            cache = str(case / "c.duckdb")
            _, out = timed(
                [
                    *GRADETRAIL,
                    "run",
                    str(spec),
                    "--cache",
                    cache,
                    "--concurrency",
                    str(concurrency),
                ],
                case,
            )
            manifest = manifest_of(out, case)
            assert manifest["target"]["calls"] == n  # type: ignore[index]
            assert manifest["judge"]["calls"] == n  # type: ignore[index]
            timings = manifest["timings_s"]
            wall = timings["responses"] + timings["scoring"]  # type: ignore[index]
            ratios.append(wall / floor)
    finally:
        for server in (target, judge):
            server.terminate()
            server.wait()
    print(
        f"cold judged n={n} L={latency_s * 1000:.0f}ms C={concurrency} (judge on its own "
        f"endpoint, L too): responses + scoring / (n*L/C + L) = {statistics.median(ratios):.3f} "
        f"median of {repeats} ({_spread(ratios)})"
    )


def warm_ratio(n: int, workdir: Path, repeats: int) -> None:
    case = workdir / "warm"
    target, target_url = start_server(0.0, _mkdir(workdir / "warm-target"))
    judge, judge_url = start_server(0.0, _mkdir(workdir / "warm-judge"))
    try:
        write_addition_dataset(case / "data" / "add.jsonl", n)
        spec = write_judged(case, target_url, judge_url, "warm")
        run = [*GRADETRAIL, "run", str(spec), "--cache", str(case / "c.duckdb")]
        timed([*run, "--concurrency", "64"], case)  # seed the cache
    finally:
        for server in (target, judge):
            server.terminate()
            server.wait()
    version, warm = [], []
    for _ in range(repeats):
        version.append(timed([*GRADETRAIL, "--version"], case)[0])
        wall, out = timed(run, case)
        manifest = manifest_of(out, case)
        assert manifest["target"]["calls"] == 0 and manifest["judge"]["calls"] == 0  # type: ignore[index]
        warm.append(wall)
    ratios = [w / v for w, v in zip(warm, version, strict=True)]
    print(
        f"warm re-run of {n} cached samples with 3 scorers (regex, Python, judge) / "
        f"`gradetrail --version` = {statistics.median(warm) / statistics.median(version):.2f} "
        f"median of {repeats} ({_spread(ratios)}); zero target and judge calls"
    )


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--warm-n", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        cold_ratios(args.n, args.latency, args.concurrency, workdir, args.repeats)
        warm_ratio(args.warm_n, workdir, args.repeats)


if __name__ == "__main__":
    main()
