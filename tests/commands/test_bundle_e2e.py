"""`gradetrail bundle` end to end: two runs made on one "machine" (a judged spec and an
agent's, against the loopback fake), their answers exported to one bundle, imported into
a fresh cache on another "machine" (a DuckDB file, and a real Postgres), and the same
specs re-run there: no call reaches the server, the identities and the records are the
same (cache hits aside). Damaged bundles import nothing; bad input writes nothing."""

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from gradetrail_lib.cache.urls import without_password
from gradetrail_lib.cli import main
from tests.conftest import run_cli
from tests.support.agent_scripts import conversation, tool_call
from tests.support.eval_runs import multi_scorers, responder, run_spec, write_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer

CITIES = {"Paris": "sunny", "Rome": "rainy"}
PASSWORD = "s3cret-not-shown"
AGENT_SPEC = """name: weather
dataset: {{path: data/weather.jsonl}}
messages:
  - {{role: user, content: "What is the weather in {{{{ city }}}}?"}}
model: {{provider: openai_compatible, name: agent-1, base_url: "{base_url}"}}
params: {{temperature: 0, max_tokens: 64}}
tools:
  - name: weather
    description: Look up current conditions.
    parameters: {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}
step_budget: 3
scorers:
  - {{name: calls, type: tool_call}}
  - {{name: answer, type: regex, pattern: "(?i)sunny"}}
"""


def answer(body: dict[str, Any]) -> Any:
    """The judged spec's answers and grades (`eval_runs.responder`), and the agent's two
    steps: call the weather tool, then say what it returned."""
    if not body.get("tools"):
        return responder(body)
    convo = conversation(body)
    city = convo.messages[0]["content"].split(" in ")[1].rstrip("?")
    if convo.turns == 0:
        return tool_call("weather", city=city)
    condition = json.loads(convo.last_tool_results[0]["content"])["condition"]
    return f"It is {condition} in {city}."


def write_project(folder: Path, base_url: str) -> None:
    """Two specs in one folder: `add` (four scorers, one an LLM judge) and `weather` (an
    agent with a scripted tool)."""
    write_dataset(folder / "data" / "add.jsonl", 4)
    write_spec(folder / "add.yaml", base_url, ["fake-good"], scorers=multi_scorers(base_url))
    samples = [
        {
            "id": city.lower(),
            "city": city,
            "expected": {"tool_calls": [{"name": "weather", "arguments": {"city": city}}]},
            "tool_results": {
                "weather": [{"arguments": {"city": city}, "result": {"condition": condition}}]
            },
        }
        for city, condition in CITIES.items()
    ]
    (folder / "data" / "weather.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    (folder / "weather.yaml").write_text(AGENT_SPEC.format(base_url=base_url))


@dataclass
class Source:
    server: FakeLLMServer
    project: Path
    runs: dict[str, Path]  # by model: fake-good (add), agent-1 (weather)
    bundle: Path
    exported: str  # what the export printed


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    root = tmp_path_factory.mktemp("bundle")
    with FakeLLMServer(latency_s=0.0, responder=answer) as server:
        project = root / "a"
        write_project(project, f"{server.base_url}/v1")
        runs = run_spec(project, project)
        bundle = root / "answers.parquet"
        done = run_cli(
            "bundle", "export", *(str(p) for p in runs.values()), "-o", str(bundle),
            "--cache", str(project / "cache.duckdb"), cwd=project,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        yield Source(server, project, runs, bundle, done.stdout)


def records(run_dir: Path) -> list[dict[str, Any]]:
    """A run's records without what a re-run from the cache changes (cache hits)."""
    out = []
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        record = json.loads(line)
        for part in [*record["calls"], *record["trajectory"]]:
            del part["cache_hit"]
        out.append(record)
    return out


def manifest(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "manifest.json").read_text())


def test_the_export_counts_every_kind_of_answer(source: Source) -> None:
    # add: 4 targets and 4 judge gradings; weather: 2 cases of 2 steps each.
    assert "12 answer(s) (4 target, 4 judge, 4 agent step) of 2 run(s)" in source.exported
    with duckdb.connect() as connection:
        rows = connection.execute(
            "SELECT key, provider FROM read_parquet(?)", [str(source.bundle)]
        ).fetchall()
    assert len(rows) == 12 and [k for k, _ in rows] == sorted(k for k, _ in rows)
    assert {p for _, p in rows} == {"openai_compatible", "anthropic"}


@pytest.mark.parametrize("kind", ["duckdb", "postgres"])
def test_an_imported_bundle_replays_both_runs_elsewhere_with_no_call(
    source: Source, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    elsewhere = tmp_path / "b"
    shutil.copytree(
        source.project, elsewhere, ignore=shutil.ignore_patterns("results", "cache.duckdb*")
    )
    if kind == "duckdb":
        cache = str(elsewhere / "fresh.duckdb")
    else:  # a password in the URL (the server trusts loopback): never shown
        cache = request.getfixturevalue("postgres_url").replace(
            "://postgres@", f"://postgres:{PASSWORD}@"
        )
        assert PASSWORD in cache
    done = run_cli("bundle", "import", str(source.bundle), "--cache", cache, cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "12 answer(s)" in done.stdout and "12 added to" in done.stdout
    assert PASSWORD not in done.stdout + done.stderr
    if kind == "postgres":
        assert "postgres:***@" in done.stdout

    sent = source.server.calls
    again = run_cli(
        "run", str(elsewhere), "--cache", cache, "--results", str(elsewhere / "results"),
        cwd=elsewhere, env={"GT_FAKE_KEY": "sk-fake-not-a-secret"},
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert source.server.calls == sent  # not one call reached the server
    for model, first in source.runs.items():
        (replayed,) = (elsewhere / "results").glob(f"*-{model}-*")
        assert replayed.name == first.name  # the same identity
        assert manifest(replayed)["identity"] == manifest(first)["identity"]
        assert manifest(replayed)["target"]["calls"] == 0
        assert manifest(replayed)["judge"]["calls"] == 0
        assert records(replayed) == records(first)

    # Imported again: every key is there already, nothing is added.
    twice = run_cli("bundle", "import", str(source.bundle), "--cache", cache, cwd=elsewhere)
    assert twice.returncode == 0, twice.stderr
    assert "0 added to" in twice.stdout and "12 already there" in twice.stdout
    assert PASSWORD not in twice.stdout + twice.stderr

    # Each replayed run records its cache: the file's absolute path, the URL without
    # its password.
    recorded = str(Path(cache).resolve()) if kind == "duckdb" else without_password(cache)
    for first in source.runs.values():
        text = (elsewhere / "results" / first.name / "manifest.json").read_text()
        assert json.loads(text)["cache"] == recorded
        assert PASSWORD not in text

    # Exported there without --cache (from another directory), the replayed runs are read
    # from the cache they recorded and make the very same bundle, byte for byte.
    replayed_dirs = [str(elsewhere / "results" / first.name) for first in source.runs.values()]
    back = elsewhere / "back.parquet"
    out = run_cli("bundle", "export", *replayed_dirs, "-o", str(back), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert back.read_bytes() == source.bundle.read_bytes()
    assert PASSWORD not in out.stdout + out.stderr


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_damaged_or_truncated_bundle_imports_nothing_and_creates_no_cache(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = source.bundle.read_bytes()
    cases = {
        "truncated": data[: len(data) // 2],
        "flipped": data[:100] + bytes([data[100] ^ 0x20]) + data[101:],
        "edited": data.replace(b'"spec":"add"', b'"spec":"sub"'),
    }
    assert cases["edited"] != data
    for name, damaged in cases.items():
        bundle = tmp_path / f"{name}.parquet"
        bundle.write_bytes(damaged)
        cache = tmp_path / name / "cache.duckdb"
        err = _refused(["bundle", "import", str(bundle), "--cache", str(cache)], capsys)
        assert str(bundle) in err
        reason = "truncated" if name == "truncated" else "damaged or edited"
        assert reason in err, err
        assert not cache.parent.exists()  # no cache file, not even its folder


def test_bad_input_writes_nothing(
    source: Source, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = str(source.project / "cache.duckdb")
    run = str(source.runs["fake-good"])
    out = tmp_path / "out.parquet"
    not_a_run = tmp_path / "empty"
    not_a_run.mkdir()
    cases = {
        "no such directory": [str(tmp_path / "missing"), "-o", str(out)],
        "not a run directory (no manifest.json)": [str(not_a_run), "-o", str(out)],
        "no such folder": [run, "-o", str(tmp_path / "nowhere" / "out.parquet")],
        "no cache file here": [run, "-o", str(out), "--cache", str(tmp_path / "none.duckdb")],
    }
    for message, argv in cases.items():
        extra = [] if "--cache" in argv else ["--cache", cache]
        assert message in _refused(["bundle", "export", *argv, *extra], capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]

    # A cache without the answers (another machine's) cannot make the bundle.
    other = tmp_path / "other.duckdb"
    assert main(["bundle", "import", str(source.bundle), "--cache", str(other)]) == 0
    other_run = source.runs["agent-1"]
    with duckdb.connect(str(other)) as connection:
        connection.execute("DELETE FROM responses WHERE provider = 'anthropic'")
    capsys.readouterr()
    err = _refused(["bundle", "export", run, str(other_run), "-o", str(out), "--cache",
                    str(other)], capsys)  # fmt: skip
    assert "4 of the 12 answers the runs reference are not in this cache" in err
    assert "judge answer" in err and run in err
    assert not out.exists()

    # An unknown scheme is refused before the bundle is read; nothing is created.
    err = _refused(["bundle", "import", str(source.bundle), "--cache", "mongodb://db/x"], capsys)
    assert "unknown scheme 'mongodb'" in err
    assert not (tmp_path / "mongodb:").exists()


def _with_cache(run_dir: Path, to: Path, cache: str | None) -> str:
    """A copy of a run directory under `to` whose manifest records `cache` (None: no
    cache recorded, as a `--no-cache` run's or an older one's)."""
    copy = to / run_dir.name
    shutil.copytree(run_dir, copy)
    data = manifest(copy)
    if cache is None:
        del data["cache"]
    else:
        data["cache"] = cache
    (copy / "manifest.json").write_text(json.dumps(data))
    return str(copy)


def test_an_export_without_cache_reads_the_cache_the_runs_recorded(
    source: Source,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made_with = (source.project / "cache.duckdb").resolve()
    runs = [str(p) for p in source.runs.values()]
    assert {manifest(p)["cache"] for p in source.runs.values()} == {str(made_with)}
    monkeypatch.delenv("GRADETRAIL_CACHE", raising=False)
    monkeypatch.chdir(tmp_path)  # no cache here: the default file is not there
    out = tmp_path / "out.parquet"
    assert main(["bundle", "export", *runs, "-o", str(out)]) == 0
    assert out.read_bytes() == source.bundle.read_bytes()
    assert not (tmp_path / ".gradetrail").exists()
    out.unlink()

    # The recorded cache is gone: the error names it and the run that recorded it;
    # nothing is written, no cache created; --cache then names the one that holds them.
    gone = tmp_path / "moved" / "cache.duckdb"
    moved = [_with_cache(p, tmp_path / "moved", str(gone)) for p in source.runs.values()]
    err = _refused(["bundle", "export", *moved, "-o", str(out)], capsys)
    assert f"{gone}: no cache file here (the cache run {moved[0]} was made with)" in err
    assert "--cache" in err
    assert not out.exists() and not gone.exists()
    assert main(["bundle", "export", *moved, "-o", str(out), "--cache", str(made_with)]) == 0
    assert out.read_bytes() == source.bundle.read_bytes()
    out.unlink()

    # Runs made with two caches: refused, both named (one bundle reads one cache).
    other = _with_cache(source.runs["agent-1"], tmp_path / "other", str(tmp_path / "b.duckdb"))
    err = _refused(["bundle", "export", runs[0], other, "-o", str(out)], capsys)
    assert "different caches" in err and str(made_with) in err and "b.duckdb" in err

    # No run records its cache (older runs): GRADETRAIL_CACHE or the default, as before,
    # and the error says why it looked there.
    old = [_with_cache(p, tmp_path / "old", None) for p in source.runs.values()]
    err = _refused(["bundle", "export", *old, "-o", str(out)], capsys)
    assert "no cache file here (no run names its cache" in err
    monkeypatch.setenv("GRADETRAIL_CACHE", str(made_with))
    assert main(["bundle", "export", *old, "-o", str(out)]) == 0
    assert out.read_bytes() == source.bundle.read_bytes()
