"""Bad input is refused before anything happens: a malformed spec or dataset names its
file, line and field, exits 2, calls nothing and writes nothing (no results folder, no
cache file), whether or not the cache would answer the samples before it."""

import json
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.errors import InputError, InputErrors
from tests.conftest import FakeLLMServer, run_cli, write_addition_dataset, write_spec


def project(tmp_path: Path, url: str, n: int = 30) -> Path:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    return write_spec(tmp_path / "spec.yaml", base_url=f"{url}/v1")


def append(tmp_path: Path, *lines: str) -> None:
    with open(tmp_path / "data" / "add.jsonl", "a") as out:
        for line in lines:
            out.write(line + "\n")


def row(**fields: object) -> str:
    return json.dumps(fields)


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


BAD_DATASETS = {
    "bad JSON": (lambda tmp: append(tmp, '{"id": "x", "a": 1,'), ":31: invalid JSON"),
    "duplicate id": (
        lambda tmp: append(tmp, row(id="s000", a=1, b=2, answer="3")),
        ":31: id: duplicate id 's000' (first on line 1)",
    ),
    "missing field": (lambda tmp: append(tmp, row(id="x", a=1)), ":31: prompt:"),
    "empty file": (
        lambda tmp: (tmp / "data" / "add.jsonl").write_text(""),
        "add.jsonl: dataset has no samples",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_DATASETS))
def test_a_malformed_dataset_writes_nothing(
    case: str, tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    spec = project(tmp_path, fake_server.base_url)
    spoil, message = BAD_DATASETS[case]
    spoil(tmp_path)
    results, cache = tmp_path / "results", tmp_path / "cache.duckdb"
    done = run_cli("run", str(spec), "--results", str(results), "--cache", str(cache), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert fake_server.calls == 0
    assert not results.exists()
    assert not cache.exists()


def test_a_malformed_spec_writes_nothing(tmp_path: Path) -> None:
    spec = project(tmp_path, "http://127.0.0.1:9")
    spec.write_text(spec.read_text().replace("scorer: {type: numeric}", "scorer: {type: nope}"))
    results, cache = tmp_path / "results", tmp_path / "cache.duckdb"
    done = run_cli("run", str(spec), "--results", str(results), "--cache", str(cache), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "spec.yaml:" in done.stderr and "scorer" in done.stderr
    assert not results.exists()
    assert not cache.exists()


def test_run_spec_refuses_a_malformed_dataset_before_writing(tmp_path: Path) -> None:
    spec = project(tmp_path, "http://127.0.0.1:9")
    append(tmp_path, row(id="bad1", a=1), row(id="bad2", b=2, answer="x"))
    results, cache = tmp_path / "results", tmp_path / "cache.duckdb"
    with pytest.raises(InputErrors) as raised:
        run_spec(spec, results_root=results, cache=cache)
    assert sorted(e.line for e in raised.value.errors) == [31, 32]
    assert not results.exists()
    assert not cache.exists()


def test_an_error_after_cached_samples_stops_the_run_before_its_first_call(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    spec = project(tmp_path, fake_server.base_url)
    args = ["run", str(spec), "--cache", str(tmp_path / "c.duckdb")]
    assert run_cli(*args, "--results", str(tmp_path / "seed"), cwd=tmp_path).returncode == 0
    fake_server.reset_counts()
    # A new sample the cache lacks, then two malformed ones.
    append(tmp_path, row(id="new1", a=1000, b=1, answer="1001"), row(id="bad1", a=1))
    append(tmp_path, row(id="bad2", a=2))
    done = run_cli(*args, "--results", str(tmp_path / "r"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "data/add.jsonl:32: prompt:" in done.stderr
    assert "data/add.jsonl:33: prompt:" in done.stderr
    assert fake_server.calls == 0
    assert not (tmp_path / "r").exists()


def test_a_judge_sends_nothing_before_the_whole_dataset_is_checked(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    project(tmp_path, fake_server.base_url)
    spec = judged_spec(tmp_path, fake_server.base_url, "Grade {{ response }}")
    cache = tmp_path / "c.duckdb"
    run_spec(spec, results_root=tmp_path / "seed", cache=cache)
    assert fake_server.calls == 60  # 30 targets, 30 judge calls
    fake_server.reset_counts()
    # The targets are all cached, the judge's new prompt is not; the last sample is bad.
    judged_spec(tmp_path, fake_server.base_url, "Grade this: {{ response }}")
    append(tmp_path, row(id="bad", a=1, answer="2"))
    with pytest.raises(InputError, match="'b' is undefined"):
        run_spec(spec, results_root=tmp_path / "r", cache=cache)
    assert fake_server.calls == 0
    assert not (tmp_path / "r").exists()


def test_a_duplicate_id_in_a_fully_cached_run_leaves_the_last_run_as_it_was(
    tmp_path: Path, fake_server: FakeLLMServer
) -> None:
    spec = project(tmp_path, fake_server.base_url)
    cache = tmp_path / "c.duckdb"
    (first,) = run_spec(spec, results_root=tmp_path / "r", cache=cache)
    results = (first.run_dir / "results.jsonl").read_bytes()
    head = (tmp_path / "data" / "add.jsonl").read_text().splitlines()[0]
    append(tmp_path, head)  # its request is cached: the cache answers every sample
    with pytest.raises(InputError, match="duplicate id 's000'"):
        run_spec(spec, results_root=tmp_path / "r", cache=cache)
    assert sorted(p.name for p in (tmp_path / "r").iterdir() if p.is_dir()) == [first.run_dir.name]
    assert (first.run_dir / "results.jsonl").read_bytes() == results
