"""`bench/bench_batch.py` at a small n, so that the bench keeps working: the run by batch
answers every request, submits no custom_id twice, stays under its memory target, and
the run by batch costs what the price list's batch price says next to the ordinary run."""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_batch_bench_prints_its_figures() -> None:
    """A process of its own: the bench's peak RSS is its process tree's, and the test's
    process in the whole suite is past the 300 MB target by itself (544 MB seen when
    `main` ran in it)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_batch", "--n", "200", "--delay", "0.1"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(
        r"^batch of 200 requests, processing delay 0.1 s: responses step [\d.]+ s / "
        r"\(upload [\d.]+ \+ delay [\d.]+ \+ download [\d.]+ = [\d.]+ s\) = [\d.]+x",
        out,
        re.M,
    ), out
    assert re.search(r"^  peak RSS \d+ MB \(target <= 300: met\)$", out, re.M), out
    assert "400 in 2 batches (the floor's and the run's), 0 submitted twice" in out
    assert re.search(
        r"^  cost: by batch \$[\d.]+ / ordinary \$[\d.]+ = 0.500000; the price list \(v2\) "
        r"for openai/gpt-5-mini: 0.500000 \(equal: met\)$",
        out,
        re.M,
    ), out
