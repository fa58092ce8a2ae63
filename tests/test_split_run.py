"""A large run the cache may answer has its dataset's second half replayed by a fork of
the run (`run_model(split=True)`, as `gradetrail run` and `run_spec` make it) while the run
does the first: what it writes is what one process writes, byte for byte; what the fork
cannot do (a miss, an input error, its own death) the run does itself; an input error
anywhere, an id in both halves among them, fails the run with nothing written."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.cache import ResponseCache
from gradetrail_lib.pipeline import plan
from gradetrail_lib.run import run_model
from gradetrail_lib.spec import load_spec
from tests.conftest import run_cli
from tests.support.oracle import oracle_project, oracle_rows, write_rows

N = 400
BATCH = 40  # halves of ~200 samples: 5 batches each


def seed(tmp_path: Path, repeats: int = 1) -> None:
    """Every request of the project answered once (into the cache c.duckdb)."""
    loaded = load_spec(oracle_project(tmp_path, N, repeats))
    cache = ResponseCache(tmp_path / "c.duckdb")
    run_model(plan(loaded, loaded.spec.models[0]), cache, LocalBackend(), tmp_path / "seed")


def split_run(
    tmp_path: Path, results: str, *flags: str, cache: str = "c.duckdb"
) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [
            sys.executable, "-m", "tests.support.split_run", str(tmp_path / "s.yaml"),
            str(tmp_path / cache), str(tmp_path / results), str(BATCH), *flags,
        ],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def results_of(report: dict[str, Any]) -> bytes:
    return (Path(report["run_dir"]) / "results.jsonl").read_bytes()


def same_run(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert results_of(a) == results_of(b)
    for field in ("fingerprint", "scores", "outcomes", "calls", "cache_hits"):
        assert a[field] == b[field], field


@pytest.mark.parametrize("repeats", [1, 3])
def test_a_cached_run_in_two_processes_writes_what_one_process_writes(
    tmp_path: Path, repeats: int
) -> None:
    seed(tmp_path, repeats)
    code_two, two = split_run(tmp_path, "two")
    code_one, one = split_run(tmp_path, "one", "--one-core")
    assert code_two == code_one == 0
    replayed = two["execution"]["second_process_samples"]
    assert N // 4 < replayed < N * 3 // 4  # the fork did about half
    assert "second_process_samples" not in one["execution"]
    same_run(two, one)
    assert two["calls"] == 0
    assert two["cache_hits"] == N * repeats
    ids = [json.loads(line)["id"] for line in results_of(two).splitlines()]
    assert ids == [r["id"] for r in oracle_rows(N) for _ in range(repeats)]


def test_a_miss_in_the_second_half_is_sent_by_the_run_after_what_the_fork_did(
    tmp_path: Path,
) -> None:
    seed(tmp_path)
    shutil.copy(tmp_path / "c.duckdb", tmp_path / "copy.duckdb")
    changed = oracle_rows(N)
    changed[-3]["id"] = "new"  # a new prompt: its batch (the half's last) is a miss
    write_rows(tmp_path, changed)
    code, two = split_run(tmp_path, "two")
    assert code == 0
    assert two["calls"] == 1
    replayed = two["execution"]["second_process_samples"]
    assert 0 < replayed < N // 2  # the fork stopped at the miss's batch
    _, one = split_run(tmp_path, "one", "--one-core", cache="copy.duckdb")
    same_run(two, one)


def test_a_killed_fork_costs_time_not_results(tmp_path: Path) -> None:
    seed(tmp_path)
    code, two = split_run(tmp_path, "two", "--kill-fork")
    assert code == 0
    assert two["execution"]["second_process_samples"] == 0  # the run did the half itself
    _, one = split_run(tmp_path, "one", "--one-core")
    same_run(two, one)


def test_input_errors_in_the_second_half_are_all_named_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    seed(tmp_path)
    broken = oracle_rows(N)
    for i in (N - 150, N - 10):
        del broken[i]["gold"]
    write_rows(tmp_path, broken)
    code, report = split_run(tmp_path, "two")
    assert code == 2
    assert [e.split(":")[1] for e in report["errors"]] == [str(N - 149), str(N - 9)]
    assert all("gold" in e for e in report["errors"])
    assert not (tmp_path / "two").exists() or not any((tmp_path / "two").iterdir())


def test_an_id_in_both_halves_fails_the_run_and_leaves_the_last_run_as_it_was(
    tmp_path: Path,
) -> None:
    seed(tmp_path)
    code, first = split_run(tmp_path, "two")
    assert code == 0
    before = results_of(first)
    repeated = oracle_rows(N)
    repeated[-1]["id"] = "s0"  # the same prompt as the first sample's: cached, so the fork
    write_rows(tmp_path, repeated)  # replays it and only the ids of both halves tell
    code, report = split_run(tmp_path, "two")
    assert code == 2
    (error,) = report["errors"]
    assert f":{N}: id: duplicate id 's0' (first on line 1)" in error
    assert results_of(first) == before
    assert [p.name for p in (tmp_path / "two").iterdir() if p.is_dir()] == [
        Path(first["run_dir"]).name
    ]


def test_gradetrail_run_replays_half_of_a_large_cached_run_in_a_second_process(
    tmp_path: Path,
) -> None:
    """Through the CLI, at its own batch size (halves of a batch or more: 2 x 8,192);
    `--processes 1` keeps it in one."""
    n = 17_000
    oracle_project(tmp_path, n)
    args = ["run", "s.yaml", "--cache", "c.duckdb", "--results", "r"]
    cold = run_cli(*args, cwd=tmp_path)
    assert cold.returncode == 0, cold.stderr
    cold_dir = next((tmp_path / "r").glob("s-*"))
    first = (cold_dir / "results.jsonl").read_bytes()
    # Every request a miss: the fork stopped at its first batch and the run sent the half.
    cold_manifest = json.loads((cold_dir / "manifest.json").read_text())
    assert cold_manifest["execution"]["second_process_samples"] == 0
    warm = run_cli(*args, cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    assert f"Cache hits: {n}/{n}" in warm.stdout
    (run_dir,) = [p for p in (tmp_path / "r").iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["execution"]["second_process_samples"] > n // 4
    # The cold run's records but for the cache hits, which the re-run's all are.
    assert (run_dir / "results.jsonl").read_bytes() == first.replace(
        b'"cache_hit":false', b'"cache_hit":true'
    )
    timings = manifest["timings_s"]
    assert timings["total"] == pytest.approx(sum(v for k, v in timings.items() if k != "total"))
    alone = run_cli(*args, "--processes", "1", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert "second_process_samples" not in manifest["execution"]
    assert "second_process" not in manifest["timings_s"]
    assert (run_dir / "results.jsonl").read_bytes() == first.replace(
        b'"cache_hit":false', b'"cache_hit":true'
    )


def judged_project(tmp_path: Path, n: int = 17_000) -> Path:
    """A spec of n samples with a judge, whose cost `plan` estimates (nothing is sent)."""
    from tests.conftest import write_addition_dataset, write_spec

    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    (tmp_path / "judge.j2").write_text("Ref {{ answer }} Resp {{ response }} GRADE: C or I")
    spec = write_spec(
        tmp_path / "add.yaml", base_url="http://127.0.0.1:9/v1", provider="anthropic",
        model="claude-haiku-4-5",
    )  # fmt: skip
    spec.write_text(
        spec.read_text().replace(
            "scorer: {type: numeric}\n", "scorers:\n  - {name: score, type: numeric}"
        )
        + "\n  - {name: judged, type: judge, prompt_file: judge.j2, params: {max_tokens: 8},\n"
        "     model: {provider: anthropic, name: claude-sonnet-4-5}}\n"
    )
    return spec


def one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def plan_json(tmp_path: Path, *, alone: bool = False) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "gradetrail_lib.cli", "plan", "add.yaml", "--json",
         "--cache", "none.duckdb"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        preexec_fn=one_core if alone else None,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def floats_close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(floats_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(floats_close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_a_plan_in_two_processes_says_what_one_process_says(tmp_path: Path) -> None:
    judged_project(tmp_path)
    code_two, two = plan_json(tmp_path)
    code_one, one = plan_json(tmp_path, alone=True)
    assert code_two == code_one == 0, two + one
    assert floats_close(json.loads(two), json.loads(one))
    (model,) = json.loads(two)["models"]
    assert model["samples"] == 17_000
    assert model["scorers"][0]["pending"] == 17_000  # every judge call estimated
    # The fork did its half: in a fresh process (one thread), its result is not None.
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from gradetrail_lib import forked\n"
        "from gradetrail_lib.cost_plan import estimate_run\n"
        "from gradetrail_lib.pipeline import plan\n"
        "from gradetrail_lib.pricing import load_prices\n"
        "from gradetrail_lib.spec import load_spec\n"
        "results = []\n"
        "result = forked.Forked.result\n"
        "def seen(self):\n"
        "    value = result(self)\n"
        "    results.append(value is not None)\n"
        "    return value\n"
        "forked.Forked.result = seen\n"
        "loaded = load_spec(Path('add.yaml'))\n"
        "p = plan(loaded, loaded.spec.models[0], defer_check=True)\n"
        "estimate_run(p, None, load_prices(), split=True)\n"
        "print(results)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )  # fmt: skip
    assert done.stdout.strip() == "[True]", done.stderr


def test_a_plan_names_an_id_in_both_halves(tmp_path: Path) -> None:
    judged_project(tmp_path)
    data = tmp_path / "data" / "add.jsonl"
    lines = data.read_text().splitlines(keepends=True)
    lines[-1] = lines[-1].replace('"s16999"', '"s001"')
    data.write_text("".join(lines))
    code, out = plan_json(tmp_path)
    assert code == 2
    assert "data/add.jsonl:17000: id: duplicate id 's001' (first on line 2)" in out


def test_ctrl_c_stops_both_processes_and_writes_nothing(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches both processes; the fork ignores it (the run stops it),
    the run exits 130 and removes its staging directory, and no process is left."""
    n = 40_000
    oracle_project(tmp_path, n)
    args = ["run", "s.yaml", "--cache", "c.duckdb", "--results", "r"]
    assert run_cli(*args, cwd=tmp_path).returncode == 0  # every answer cached
    (tmp_path / "r" / ".history.jsonl").unlink()
    before = sorted(p.name for p in (tmp_path / "r").iterdir())
    run = subprocess.Popen(
        [sys.executable, "-m", "gradetrail_lib.cli", *args], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    forks: list[int] = []
    children = Path(f"/proc/{run.pid}/task/{run.pid}/children")
    deadline = time.monotonic() + 60
    while not forks and run.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            forks = [int(p) for p in children.read_text().split()]
        time.sleep(0.005)
    assert forks, "the run ended before its fork was seen"
    for pid in [run.pid, *forks]:  # as a terminal sends it: to the whole process group
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    time.sleep(0.2)
    assert not any(Path(f"/proc/{pid}").exists() for pid in forks)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == before  # no staging left
