"""`engine.until_decided` with real runs (the in-process scripted provider, a DuckDB
cache): a clear difference stops after a chunk or two with B named and only those cases
sent; identical models end equivalent or undecided at the budget; the run directories
are normal ones that `compare` reads, their manifests carry the decision; a later full
run reuses every answer sent."""

import json
from pathlib import Path

import pytest

from gradetrail_lib.analysis.stats.paired import compare
from gradetrail_lib.backends import build_backend
from gradetrail_lib.cache.location import open_cache
from gradetrail_lib.engine.plan import plan
from gradetrail_lib.engine.run import RunOptions, run_model
from gradetrail_lib.engine.until_decided import run_until_decided
from gradetrail_lib.results.runs import MANIFEST_FILE, load_run
from gradetrail_lib.spec.spec import load_spec
from tests.support.scripted_specs import write_scripted_spec

CASES = 400


def _spec(root: Path) -> Path:
    # x right on 40 % of cases, y on 90 %, z exactly as x.
    return write_scripted_spec(
        root, name="rel", cases=CASES,
        models={"x": lambda i: i % 5 < 2, "y": lambda i: i % 10 != 0, "z": lambda i: i % 5 < 2},
    )  # fmt: skip


def test_a_clear_winner_stops_early_and_pays_only_for_the_cases_sent(tmp_path: Path) -> None:
    loaded = load_spec(_spec(tmp_path))
    x, y, _ = (plan(loaded, m) for m in loaded.spec.models)
    cache = open_cache(tmp_path / "c.duckdb")
    backend = build_backend("local", concurrency=2)
    results = tmp_path / "results"
    decided = run_until_decided(x, y, cache, backend, results, seed=7, chunk=50)
    d = decided.decision
    assert d.verdict == "B" and d.low > 0
    assert d.cases < CASES and d.cases % 50 == 0 and d.available == CASES
    # Both runs hold the cases used, counted as this run's calls (no cache hits).
    for run in (decided.incumbent, decided.challenger):
        assert run.manifest.samples == d.cases
        assert (run.manifest.target.calls, run.manifest.target.cache_hits) == (d.cases, 0)
        on_disk = json.loads((run.run_dir / MANIFEST_FILE).read_text())
        assert on_disk["sequential"]["verdict"] == "B"
        assert on_disk["sequential"]["method"] == "betting-cs-wsr-2024"
        assert on_disk["sequential"]["cases_used"] == d.cases
        assert on_disk["sequential"]["winner"] == "rel/y"
    # Only the cases sent were answered: the cache holds 2 x d.cases answers.
    assert len(cache.cached_keys([k for k in _all_keys(loaded)])) == 2 * d.cases
    # A normal run directory: compare reads the pair.
    a, b = load_run(decided.incumbent.run_dir), load_run(decided.challenger.run_dir)
    assert compare(a.sheet("exact"), b.sheet("exact"), "exact").verdict == "B"
    assert "Verdict: rel/y (challenger) is better" in decided.describe()
    # A full run of y now finds every case sent in the cache; its directory is not the
    # check's, which stays where it is.
    full = run_model(y, cache, backend, results, RunOptions())
    assert full.manifest.target.cache_hits == d.cases
    assert full.manifest.target.calls == CASES - d.cases
    assert decided.challenger.run_dir.parent == results / "until-decided" / "rel-y-vs-x"
    assert full.run_dir.parent == results and decided.challenger.run_dir.exists()
    assert load_run(decided.challenger.run_dir).manifest.samples == d.cases


def _all_keys(loaded: object) -> list[str]:
    from gradetrail_lib.spec.spec import LoadedSpec

    assert isinstance(loaded, LoadedSpec)
    keys = []
    for model in loaded.spec.models:
        for batch in plan(loaded, model).batches():
            keys += list(batch.request_keys())
    return keys


def test_identical_models_are_undecided_at_the_budget(tmp_path: Path) -> None:
    loaded = load_spec(_spec(tmp_path))
    x, _, z = (plan(loaded, m) for m in loaded.spec.models)
    cache = open_cache(tmp_path / "c.duckdb")
    backend = build_backend("local", concurrency=2)
    decided = run_until_decided(
        x, z, cache, backend, tmp_path / "results", chunk=40, max_samples=120, margin=0.02
    )
    d = decided.decision
    assert d.verdict == "undecided" and d.cases == 120 and d.looks == 3
    assert d.low < 0 < d.high


def test_identical_models_are_equivalent_within_a_wide_margin(tmp_path: Path) -> None:
    loaded = load_spec(_spec(tmp_path))
    x, _, z = (plan(loaded, m) for m in loaded.spec.models)
    decided = run_until_decided(
        x, z, open_cache(tmp_path / "c.duckdb"), build_backend("local", concurrency=2),
        tmp_path / "results", chunk=50, margin=0.1,
    )  # fmt: skip
    d = decided.decision
    assert d.verdict == "equivalent" and d.low > -0.1 and d.high < 0.1
    assert d.cases < CASES


def test_a_chunk_below_one_is_refused(tmp_path: Path) -> None:
    from gradetrail_lib.errors import UsageError

    loaded = load_spec(_spec(tmp_path))
    x, y, _ = (plan(loaded, m) for m in loaded.spec.models)
    with pytest.raises(UsageError, match="chunk"):
        run_until_decided(
            x, y, None, build_backend("local", concurrency=1), tmp_path / "r", chunk=0
        )
