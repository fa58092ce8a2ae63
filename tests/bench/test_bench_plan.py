"""`bench/bench_plan.py` at a small n, so that the bench keeps working and what it checks
holds at any size: the plan before a run counts every request as a miss, and the run's
real cost (the fake API's reported usage at the list's prices) lies within the plan's
cost range, for the target and for the judge."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Its processes' start-ups are most of its time, whatever n (n=30 took 0.9 of n=300's).
pytestmark = pytest.mark.slow
N = 300


def test_the_plan_bench_prints_its_figures_and_the_real_cost_is_in_range() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_plan", "--n", str(N), "--repeats", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    roles = re.findall(
        r"^accuracy (target|scorer judged) \(anthropic/([\w.-]+)\), (\d+) misses: "
        r"input tokens estimated (\d+) / reported (\d+) = ([\d.]+)x",
        out,
        re.M,
    )
    assert [(r[0], r[1], int(r[2])) for r in roles] == [
        ("target", "claude-haiku-4-5", N),
        ("scorer judged", "claude-sonnet-4-5", N),
    ]
    for _, _, _, estimated, reported, ratio in roles:
        assert int(reported) > 0 and abs(float(ratio) - int(estimated) / int(reported)) < 1e-3
    # The judge's response still to come is counted at the target's max_tokens: a bound.
    assert float(roles[1][5]) >= 1
    assert out.count("within the plan's range") == 2 and "OUTSIDE" not in out
    assert re.search(r"^accuracy total: real cost \$[\d.]+ within ", out, re.M)
    for name in ("cold cache", "fully cached"):
        assert re.search(
            rf"^plan of {N} samples, {name}: [\d.]+ s = [\d.]+x `--version` median of 1 "
            r"\([\d.]+\); [+-][\d.]+ s past it \(target <= \+1.5 s: (met|MISSED)\)$",
            out,
            re.M,
        ), out
