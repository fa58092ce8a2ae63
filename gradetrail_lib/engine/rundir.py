"""Run directories: results.jsonl and manifest.json, replaced as a whole.

A run directory is written under a temporary name (its records streamed in as they are
scored) and renamed into place with its manifest; an older directory of the same
identity is first renamed aside and then removed, so a reader sees the old run or the
new one, never a mix, and a run that fails leaves the old one as it was.
"""

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path
from types import TracebackType
from typing import Any

from gradetrail_lib._version import __version__
from gradetrail_lib.analysis.summary import RunSummary
from gradetrail_lib.engine.plan import RunPlan
from gradetrail_lib.providers.pricing import PriceList
from gradetrail_lib.results.runs import MANIFEST_FILE, RESULTS_FILE, run_dir_name
from gradetrail_lib.results.trace import (
    SCHEMA_VERSION,
    ChatTemplateInfo,
    DatasetInfo,
    GitInfo,
    Manifest,
    ModelInfo,
    PricingInfo,
    RecordWriter,
    ScorerInfo,
    SpecInfo,
    TraceRecord,
)
from gradetrail_lib.spec.identity import (
    RecordsFingerprint,
    file_hashes,
    judge_files,
    requests_hash,
    run_identity,
    scorer_files,
    scorer_hashes,
)
from gradetrail_lib.spec.identity import scorer_hash as scorer_hash_of
from gradetrail_lib.spec.identity import spec_hash as spec_hash_of


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


def warnings_for(plan: RunPlan, served: set[str], git: dict[str, Any]) -> list[str]:
    warnings = []
    others = sorted(s for s in served if s != plan.model.name)
    if others:
        warnings.append(
            f"served model {', '.join(others)} differs from requested {plan.model.name}"
        )
    temperature = plan.loaded.spec.params.temperature
    # Log-likelihoods are read, never sampled: no temperature applies.
    sampled = not plan.loaded.spec.by_loglikelihood
    if sampled and (temperature is None or temperature > 0):
        warnings.append(
            "temperature is not 0: responses are samples and a re-run will differ"
            if temperature
            else "temperature is unset: the provider's default (usually not 0) applies"
        )
    if git["dirty"]:
        warnings.append("the git work tree has uncommitted changes")
    for scorer in plan.loaded.spec.scorers:
        if getattr(scorer, "sandbox", None) == "none":
            warnings.append(
                f"scorer {scorer.name!r} runs model-written code unsandboxed (`sandbox: none`)"
            )
    for tool in plan.loaded.spec.tools or []:
        if tool.sandbox == "none":
            warnings.append(
                f"tool {tool.name!r} runs model-written code unsandboxed (`sandbox: none`)"
            )
    return warnings


def chat_template_info(plan: RunPlan) -> ChatTemplateInfo | None:
    template = plan.builder.chat_template
    if template is None:
        return None
    return ChatTemplateInfo(source=template.source, sha256=template.sha256)


def build_manifest(
    plan: RunPlan,
    execution: dict[str, object],
    served: set[str],
    summary: RunSummary,
    prices: PriceList,
    timings: dict[str, float],
    started_at: datetime,
    *,
    cache: str | None = None,
) -> Manifest:
    """`execution`: how the misses were sent (the backend's describe()); `served`: the
    model names the provider answered as; `cache`: the cache's location as recorded
    (`Manifest.cache`), None without one."""
    loaded = plan.loaded
    git = git_state(loaded.base_dir)
    hashes = scorer_hashes(loaded)
    return Manifest(
        schema_version=SCHEMA_VERSION,
        identity=run_identity(loaded, plan.dataset_hash),
        spec=SpecInfo(name=loaded.spec.name, path=str(loaded.path), hash=spec_hash_of(loaded)),
        dataset=DatasetInfo(path=loaded.spec.dataset.label, hash=plan.dataset_hash),
        scorers=[ScorerInfo(name=s.name, type=s.type, hash=hashes[s.name]) for s in plan.scorers],
        scorer_hash=scorer_hash_of(loaded),
        scorer_files=file_hashes(scorer_files(loaded)),
        judge_hashes=file_hashes(judge_files(loaded)),
        requests_hash=requests_hash(loaded, plan.model),
        model=ModelInfo(
            requested=plan.model.name,
            provider=plan.model.provider,
            base_url=plan.builder.key_base_url,
            served=sorted(served),
            chat_template=chat_template_info(plan),
        ),
        git=GitInfo(**git),
        gradetrail_version=__version__,
        execution=execution,  # type: ignore[arg-type]
        started_at=started_at.isoformat(),
        finished_at=datetime.now(UTC).isoformat(),
        timings_s=timings,
        samples=summary.samples,
        outcomes=summary.outcomes,
        failure_modes=summary.failure_modes,
        scores=summary.scorers,
        target=summary.target,
        judge=summary.judge,
        pricing=PricingInfo(version=prices.version, effective_date=prices.effective_date),
        warnings=warnings_for(plan, served, git),
        # The plan's own (plan() may be given repeats other than the spec's).
        repeats=plan.repeats,
        cache=cache,
    )


class RunDirWriter:
    """A run directory in the writing: records go to a staging directory as they come;
    `commit` adds the manifest and puts it in place, `abort` (or leaving the `with`
    block on an exception) removes it."""

    def __init__(self, results_root: Path) -> None:
        self.results_root = results_root
        results_root.mkdir(parents=True, exist_ok=True)
        self.staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=results_root))
        self._out = RecordWriter(self.staging / RESULTS_FILE)
        self.fingerprint = RecordsFingerprint()
        self.write_s = 0.0

    def write(self, records: Sequence[TraceRecord]) -> None:
        started = time.perf_counter()
        self._out.write(records)
        self.fingerprint.add_all(records)
        self.write_s += time.perf_counter() - started

    def commit(self, manifest: Manifest) -> Path:
        """Adds the manifest (its timings completed with the write and the total) and
        renames the directory into place."""
        name = run_dir_name(manifest.spec.name, manifest.model.requested, manifest.identity)
        target = self.results_root / name
        started = time.perf_counter()
        self._out.close()
        timings = manifest.timings_s
        timings["write"] = self.write_s + time.perf_counter() - started
        timings["total"] = sum(v for k, v in timings.items() if k != "total")
        (self.staging / MANIFEST_FILE).write_text(
            manifest.model_dump_json(indent=2) + "\n", encoding="utf-8"
        )
        os.chmod(self.staging, 0o755)
        aside = None
        if target.exists():
            aside = self.results_root / f".{name}.old-{os.getpid()}"
            os.rename(target, aside)
        try:
            os.rename(self.staging, target)
        except OSError:
            if aside is not None:  # the old run goes back where it was
                os.rename(aside, target)
            raise
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        return target

    def abort(self) -> None:
        # What was buffered may not be writable (a full disk): it goes with the rest.
        with contextlib.suppress(OSError):
            self._out.close()
        shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self) -> "RunDirWriter":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is not None and self.staging.exists():
            self.abort()


def write_run_dir(results_root: Path, records: Iterable[TraceRecord], manifest: Manifest) -> Path:
    """A run directory of records already in hand (a run streams them: `RunDirWriter`)."""
    with RunDirWriter(results_root) as out:
        remaining = iter(records)
        while part := list(islice(remaining, 1024)):
            out.write(part)
        return out.commit(manifest)
