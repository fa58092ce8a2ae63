"""`bench/bench_cache_pg.py` at a small n, so that the bench keeps working: each engine
prints its cold ratio, its cold run's time with claims over without, its warm re-run's
wall and memory, and its concurrent writers' calls (each request once: claimed) with
every key stored."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.postgres import REQUIRED, postgres_problem

REPO = Path(__file__).resolve().parents[2]

# Under GRADETRAIL_REQUIRE_POSTGRES=1 (CI) it runs, and fails, without Postgres.
pytestmark = [
    pytest.mark.skipif(
        not REQUIRED and postgres_problem() is not None, reason=str(postgres_problem())
    ),
    pytest.mark.slow,  # Postgres and DuckDB, cold, warm and two writers: processes each
]


def test_the_postgres_cache_bench_prints_its_figures() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_cache_pg", "--n", "64", "--latency", "0.05",
         "--warm", "200", "--rounds", "1", "--writers", "2", "--writer-n", "40"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for engine in ("duckdb", "postgres"):
        section = out.split(f"{engine}\n", 1)[1]
        assert re.match(r"  cold n=64 C=64: responses step / floor = \d+\.\d{3} ", section), out
        claims = (
            r"^  cold n=64 C=64, claims: responses step with claims / without = \d+\.\d{3} "
            r"\(\d+\.\d{3}\); medians [\d.]+ s / [\d.]+ s$"
        )
        assert re.search(claims, section, re.M), out
        warm = (
            r"^  warm n=200: wall [\d.]+ s \(-?[\d.]+ s past --version [\d.]+ s\), "
            r"cache lookup [\d.]+ s; peak RSS \d+ MB$"
        )
        assert re.search(warm, section, re.M), out
        calls = re.search(r"^  2 writers x n=40 at once: wall [\d.]+ s; (\d+) calls for 40 "
                          r"distinct requests \([\d.]+x: \d+ sent again\); 40 keys stored$",
                          section, re.M)  # fmt: skip
        assert calls is not None, out
        assert 40 <= int(calls.group(1)) <= 42  # claimed: each request sent once
