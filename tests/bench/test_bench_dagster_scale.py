"""`bench/bench_dagster_scale.py` at a small n, so that the bench keeps working: a cold
materialization of the partition sends every sample, the fully cached one none, and
each prints its peak memory."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Its processes' start-ups are most of its time, whatever n (n=30 took 0.9 of n=300's).
pytestmark = pytest.mark.slow
N = 300


def test_the_dagster_scale_bench_prints_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_dagster_scale", "--n", str(N)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = re.findall(
        r"^  (cold|cached): +peak RSS (\d+) MB \(target <= 300\); wall [\d.]+ s; "
        r"provider calls (\d+), cache hits (\d+)$",
        done.stdout,
        re.M,
    )
    assert [(f[0], int(f[2]), int(f[3])) for f in found] == [("cold", N, 0), ("cached", 0, N)]
    assert all(int(f[1]) > 0 for f in found)
