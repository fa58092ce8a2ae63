"""A plan that defers its check (one spec, one model, only the target's requests can make
calls): its run checks each batch as it renders it and every sample before its first
call, so a run the cache answers whole reads its dataset once, and an input error still
stops the run before any call, with every error named and nothing written."""

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.cache import ResponseCache
from gradetrail_lib.dataset import Dataset
from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.pipeline import load_spec_dataset, plan
from gradetrail_lib.run import run_model
from gradetrail_lib.spec import load_spec
from tests.conftest import FakeLLMServer, run_cli, write_addition_dataset, write_spec


def counted(dataset: Dataset) -> tuple[Dataset, list[bool]]:
    """The dataset, with a list that grows by one entry (validated or not) per read."""
    reads: list[bool] = []

    def read(check: bool):  # type: ignore[no-untyped-def]
        reads.append(check)
        return dataset.read(check)

    return replace(dataset, read=read), reads


def project(tmp_path: Path, url: str, n: int = 30) -> Path:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    return write_spec(tmp_path / "spec.yaml", base_url=f"{url}/v1")


def append(tmp_path: Path, *rows: dict[str, object]) -> None:
    with open(tmp_path / "data" / "add.jsonl", "a") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


def run_dirs(root: Path) -> list[Path]:
    """Run and staging directories (not the history file)."""
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def seeded(tmp_path: Path, server: FakeLLMServer, results: str = "seed") -> ResponseCache:
    """The project's 30 samples run once (their answers cached, the server's counts
    reset); the cache."""
    loaded = load_spec(project(tmp_path, server.base_url))
    cache = ResponseCache(tmp_path / "c.duckdb")
    run_model(plan(loaded, loaded.spec.models[0]), cache, LocalBackend(), tmp_path / results)
    server.reset_counts()
    return cache


def deferred_run(tmp_path: Path, cache: ResponseCache, **options: Any) -> None:
    """The project's spec, read again, run with its check deferred into `r`."""
    loaded = load_spec(tmp_path / "spec.yaml")
    deferred = plan(loaded, loaded.spec.models[0], defer_check=True)
    run_model(deferred, cache, LocalBackend(), tmp_path / "r", **options)


def test_a_deferred_plan_is_checked_by_its_batches_or_at_once(tmp_path: Path) -> None:
    loaded = load_spec(project(tmp_path, "http://127.0.0.1:9"))
    model = loaded.spec.models[0]
    deferred = plan(loaded, model, defer_check=True)
    assert deferred.samples is None
    assert deferred.checked().samples == plan(loaded, model).samples == 30


def judged_spec(tmp_path: Path, url: str, prompt: str) -> Path:
    """The project's spec with a judge (the fake server as model judge-1) besides."""
    (tmp_path / "judge.j2").write_text(prompt)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        spec.read_text().replace(
            "scorer: {type: numeric}",
            "scorers:\n  - {name: num, type: numeric}\n"
            "  - {type: judge, name: j, prompt_file: judge.j2,"
            f" model: {{provider: openai_compatible, name: judge-1, base_url: '{url}/v1'}}}}",
        )
    )
    return spec


def test_a_judge_sends_nothing_before_the_whole_dataset_is_checked(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    project(tmp_path, fake_server.base_url)
    spec = judged_spec(tmp_path, fake_server.base_url, "Grade {{ response }}")
    loaded = load_spec(spec)
    model = loaded.spec.models[0]
    cache = ResponseCache(tmp_path / "c.duckdb")
    run_model(plan(loaded, model), cache, LocalBackend(), tmp_path / "seed")
    assert fake_server.calls == 60  # 30 targets, 30 judge calls
    fake_server.reset_counts()
    # The targets are all cached, the judge's new prompt is not; the last sample is bad.
    judged_spec(tmp_path, fake_server.base_url, "Grade this: {{ response }}")
    append(tmp_path, {"id": "bad", "a": 1, "answer": "2"})
    loaded = load_spec(spec)
    with pytest.raises(InputError, match="'b' is undefined"):
        run_model(
            plan(loaded, model, defer_check=True), cache, LocalBackend(), tmp_path / "r",
            batch_samples=10,
        )  # fmt: skip
    assert fake_server.calls == 0


def test_a_fully_cached_run_of_a_deferred_plan_reads_the_dataset_once(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    loaded = load_spec(project(tmp_path, fake_server.base_url))
    model = loaded.spec.models[0]
    cache = ResponseCache(tmp_path / "c.duckdb")
    first = run_model(plan(loaded, model), cache, LocalBackend(), tmp_path / "r")
    assert fake_server.calls == 30
    fake_server.reset_counts()
    dataset, reads = counted(load_spec_dataset(loaded))
    again = run_model(
        plan(loaded, model, dataset, defer_check=True), cache, LocalBackend(), tmp_path / "r",
        batch_samples=7,
    )  # fmt: skip
    assert reads == [True]  # once, validated: the check and the batches in one pass
    assert fake_server.calls == 0
    assert again.summary.scorers == first.summary.scorers
    assert again.summary.target.cache_hits == 30
    assert again.history.fingerprint == first.history.fingerprint
    dataset, reads = counted(load_spec_dataset(loaded))
    run_model(plan(loaded, model, dataset), cache, LocalBackend(), tmp_path / "r")
    assert reads == [True, False]  # an eager plan: checked, then read in batches


def test_an_error_after_cached_batches_stops_the_run_before_its_first_call(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    cache = seeded(tmp_path, fake_server)
    # Two new samples the cache lacks (their batch would send), the second malformed.
    append(
        tmp_path,
        {"id": "new1", "a": 1000, "b": 1, "answer": "1001"},
        {"id": "new2", "a": 1000, "answer": "1001"},
    )
    with pytest.raises(InputError) as raised:
        # new1 ends the first batch, which would send it
        deferred_run(tmp_path, cache, batch_samples=31)
    assert (raised.value.line, raised.value.field) == (32, "prompt")
    assert "'b' is undefined" in str(raised.value)
    assert fake_server.calls == 0
    assert run_dirs(tmp_path / "r") == []  # the staging directory went too


def test_an_error_in_a_cached_batch_reports_every_error_of_the_dataset(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    cache = seeded(tmp_path, fake_server)
    append(tmp_path, {"id": "bad1", "a": 1}, {"id": "bad2", "b": 2, "answer": "x"})
    with pytest.raises(InputErrors) as raised:
        # One batch: its inline check meets bad1 first.
        deferred_run(tmp_path, cache, batch_samples=1000)
    lines = sorted({e.line for e in raised.value.errors})
    assert lines == [31, 32]  # both rows, as an eager plan reports them
    assert run_dirs(tmp_path / "r") == []


def test_a_duplicate_id_in_a_fully_cached_run_fails_and_writes_nothing(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    cache = seeded(tmp_path, fake_server, results="r")
    (before,) = run_dirs(tmp_path / "r")
    results = (before / "results.jsonl").read_bytes()
    first = json.loads((tmp_path / "data" / "add.jsonl").read_text().splitlines()[0])
    append(tmp_path, first)  # its request is cached: every batch is the cache's
    with pytest.raises(InputError, match="duplicate id 's000'"):
        deferred_run(tmp_path, cache)
    assert run_dirs(tmp_path / "r") == [before]  # the previous run as it was
    assert (before / "results.jsonl").read_bytes() == results


def test_the_cli_names_every_bad_line_of_a_spec_whose_first_batches_are_cached(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    spec = project(tmp_path, fake_server.base_url)
    args = ["run", str(spec), "--cache", str(tmp_path / "c.duckdb")]
    assert run_cli(*args, "--results", str(tmp_path / "seed"), cwd=tmp_path).returncode == 0
    fake_server.reset_counts()
    append(tmp_path, {"id": "bad1", "a": 1}, {"id": "bad2", "a": 2})
    done = run_cli(*args, "--results", str(tmp_path / "r"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "data/add.jsonl:31: prompt:" in done.stderr
    assert "data/add.jsonl:32: prompt:" in done.stderr
    assert "Traceback" not in done.stderr
    assert fake_server.calls == 0
    assert run_dirs(tmp_path / "r") == []
