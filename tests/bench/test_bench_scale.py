"""`bench/bench_scale.py` at a small n, so that the bench keeps working: the cached re-run
sends nothing, the bare replay finds every request in the cache (its keys are the
run's), and the memory and floor lines are printed with their targets."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Its processes' start-ups are most of its time, whatever n (n=30 took 0.9 of n=300's).
pytestmark = pytest.mark.slow


def test_the_scale_bench_prints_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_scale", "--n", "300", "--rounds", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"^  cold run:   peak RSS \d+ MB \(target <= 300\); wall", out, re.M)
    assert re.search(r"^  cached run: peak RSS \d+ MB \(target <= 300\)$", out, re.M)
    assert re.search(r"^  cached run wall [\d.]+ s, --version [\d.]+ s: -?[\d.]+ s past", out, re.M)
    floor = r"^  bare replay \(the floor, one process\) [\d.]+ s: -?[\d.]+ s past --version"
    assert re.search(floor, out, re.M)
    readers = r"^  readers: report peak RSS \d+ MB, compare \(with a copy\) \d+ MB \(target <= 300"
    assert re.search(readers, out, re.M)
