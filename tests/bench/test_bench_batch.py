"""`bench/bench_batch.py` at a small n, so that the bench keeps working: the run by batch
answers every request, submits no custom_id twice, stays under its memory target, and
the run by batch costs what the price list's batch price says next to the ordinary run."""

import re
import sys

import pytest

from bench import bench_batch


def test_the_batch_bench_prints_its_figures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bench's `main` in this process (a process start-up less): the fake server and
    the runs it measures have processes of their own all the same."""
    # What `main` puts in the environment (the key, the polls) is taken out afterwards.
    for name, value in {bench_batch.KEY_ENV: "", **bench_batch.POLL}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["bench_batch", "--n", "200", "--delay", "0.1"])
    bench_batch.main()
    out = capsys.readouterr().out
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
