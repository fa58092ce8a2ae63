"""Run directories: results.jsonl and manifest.json, replaced as a whole.

A run directory is written under a temporary name and renamed into place; an older
directory of the same identity is first renamed aside and then removed, so a reader
sees the old run or the new one, never a mix.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gradetrail_lib
from gradetrail_lib.identity import file_hashes, requests_hash, run_identity, scorer_files
from gradetrail_lib.identity import scorer_hash as scorer_hash_of
from gradetrail_lib.identity import spec_hash as spec_hash_of
from gradetrail_lib.pipeline import EvalPlan, Responses, ResultRow
from gradetrail_lib.pricing import PriceList, sum_costs
from gradetrail_lib.request import key_base_url
from gradetrail_lib.summary import RunSummary

RESULTS_FILE = "results.jsonl"
_ROW_ENCODER = json.JSONEncoder(ensure_ascii=False)  # one for every row, not one per row
MANIFEST_FILE = "manifest.json"


def run_dir_name(spec_name: str, model_name: str, identity: str) -> str:
    safe_model = re.sub(r"[^A-Za-z0-9_.-]+", "_", model_name)
    return f"{spec_name}-{safe_model}-{identity[:12]}"


def git_state(where: Path) -> dict[str, Any]:
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    if sha is None:
        return {"sha": None, "dirty": None}
    return {"sha": sha, "dirty": bool(git("status", "--porcelain"))}


def warnings_for(plan: EvalPlan, served: set[str], git: dict[str, Any]) -> list[str]:
    warnings = []
    others = sorted(s for s in served if s != plan.model.name)
    if others:
        warnings.append(
            f"served model {', '.join(others)} differs from requested {plan.model.name}"
        )
    temperature = plan.loaded.spec.params.temperature
    if temperature is None or temperature > 0:
        warnings.append(
            "temperature is not 0: responses are samples and a re-run will differ"
            if temperature
            else "temperature is unset: the provider's default (usually not 0) applies"
        )
    if git["dirty"]:
        warnings.append("the git work tree has uncommitted changes")
    return warnings


def build_manifest(
    plan: EvalPlan,
    responses: Responses,
    summary: RunSummary,
    prices: PriceList,
    timings: dict[str, float],
    started_at: datetime,
) -> dict[str, Any]:
    loaded = plan.loaded
    served = {r.served_model for r in responses.responses.values() if r.served_model}
    git = git_state(loaded.base_dir)
    return {
        "identity": run_identity(loaded, plan.dataset.content_hash),
        "spec": {"name": loaded.spec.name, "path": str(loaded.path), "hash": spec_hash_of(loaded)},
        "dataset": {"path": loaded.spec.dataset.path, "hash": plan.dataset.content_hash},
        "scorer_hash": scorer_hash_of(loaded),
        "scorer_files": file_hashes(scorer_files(loaded)),
        "judge_hashes": {},
        "requests_hash": requests_hash(loaded, plan.model),
        "model": {
            "requested": plan.model.name,
            "provider": plan.model.provider,
            "base_url": key_base_url(plan.model),
            "served": sorted(served),
        },
        "git": git,
        "gradetrail_version": gradetrail_lib.__version__,
        "execution": responses.execution,
        "started_at": started_at.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "timings_s": timings,
        "samples": summary.samples,
        "outcomes": summary.outcomes,
        "failure_modes": summary.failure_modes,
        "mean_score": summary.mean_score,
        "tokens": {"input": summary.input_tokens, "output": summary.output_tokens},
        "cost_usd": summary.cost_usd,
        "cost_paid_usd": _paid(plan, responses, prices),
        "pricing": {"version": prices.version, "effective_date": prices.effective_date},
        "cache_hits": summary.cache_hits,
        "calls": responses.calls,
        "warnings": warnings_for(plan, served, git),
    }


def _paid(plan: EvalPlan, responses: Responses, prices: PriceList) -> float | None:
    """What this run's own calls cost (cache hits were paid for by an earlier run)."""
    fresh = [r for k, r in responses.responses.items() if k not in responses.cache_hits]
    return sum_costs(
        [
            prices.cost(plan.model.provider, plan.model.name, r.input_tokens, r.output_tokens)
            for r in fresh
        ]
    )


def write_run_dir(results_root: Path, rows: list[ResultRow], manifest: dict[str, Any]) -> Path:
    name = run_dir_name(
        manifest["spec"]["name"], manifest["model"]["requested"], manifest["identity"]
    )
    results_root.mkdir(parents=True, exist_ok=True)
    target = results_root / name
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=results_root))
    try:
        with open(staging / RESULTS_FILE, "w", encoding="utf-8") as out:
            for row in rows:
                out.write(_ROW_ENCODER.encode(row.to_json()) + "\n")
        (staging / MANIFEST_FILE).write_text(
            json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        os.chmod(staging, 0o755)
        aside = None
        if target.exists():
            aside = results_root / f".{name}.old-{os.getpid()}"
            os.rename(target, aside)
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return target


def read_run_dir(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    with open(path / RESULTS_FILE, encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return manifest, rows
