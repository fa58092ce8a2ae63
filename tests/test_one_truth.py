"""One run reads the same on every surface: `run`'s summary (text and --json), the
manifest (the summary, stored), `plan`, `compare` and `cost` (text and --json), the HTML
report, the viewer's pages, and the Dagster assets' metadata and checks.

The run has what used to read differently from one surface to the next: a judge output
with no grade (cut off, as at max_tokens), so a sample the judge scorer leaves unscored
(its mean is over the 3 scored samples: 2/3, not 2/4), and a local model, which has no
price. The target is the `local` provider itself (its flag decides the cost label), its
llama.cpp server replaced by the fake server so that the answers are known; the judge is
scripted, each sample's grade given by the dataset.
"""

import contextlib
import io
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from starlette.testclient import TestClient

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import GradetrailResource
from gradetrail_lib import cli
from gradetrail_lib.providers import local_server
from gradetrail_lib.providers.pricing import LOCAL_COST
from gradetrail_lib.report.html import write_report
from gradetrail_lib.results.trace import ScorerFigures
from gradetrail_lib.viewer.app import create_app
from tests.support.fake_llm_server import FakeLLMServer

MODEL = "smollm2-135m"
TWIN = "smollm2-twin"  # a second local model, for a release check
# The fake server answers "Answer: a+b"; the stored answer of s2 is wrong, so `num`
# passes 3 of 4. The judge's grades: C, C, I, and an output cut off before its grade.
ROWS = [
    {"id": "s0", "a": 1, "b": 2, "answer": "3", "grade": "GRADE: C"},
    {"id": "s1", "a": 2, "b": 3, "answer": "5", "grade": "GRADE: C"},
    {"id": "s2", "a": 3, "b": 4, "answer": "8", "grade": "GRADE: I"},
    {"id": "s3", "a": 4, "b": 5, "answer": "9", "grade": "The answer 9 is the sum, so the"},
]
SPEC = f"""name: truth
dataset: {{path: data/truth.jsonl}}
prompt: "Q: {{{{ a }}}} + {{{{ b }}}}"
model: {{provider: local, name: {MODEL}}}
params: {{temperature: 0, max_tokens: 16}}
scorers:
  - {{name: num, type: numeric}}
  - name: judged
    type: judge
    prompt_file: judge.j2
    model: {{provider: scripted, name: grader, answer_field: grade}}
"""

# The figures every surface must show.
SAMPLES = 4
JUDGE_ERRORS = 1  # s3's judge output has no grade
JUDGED_SCORED = 3
JUDGED_MEAN = 2 / 3  # over the scored samples: C, C, I
NUM_MEAN = 3 / 4


@pytest.fixture
def local_on_fake(
    monkeypatch: pytest.MonkeyPatch, fake_server: FakeLLMServer
) -> Iterator[FakeLLMServer]:
    """The `local` provider, its llama.cpp server replaced by the fake server (and the
    weights' identity by a fixed one): everything else is the real local provider's."""

    class FakeShared:
        @contextlib.contextmanager
        def serve(self, name: str) -> Iterator[str]:
            assert name in (MODEL, TWIN)
            yield f"{fake_server.base_url}/v1"

    monkeypatch.setattr(local_server, "_SHARED", FakeShared())
    monkeypatch.setattr(local_server, "model_identity", lambda name: f"fake-weights/{name}")
    yield fake_server


def write_project(root: Path) -> Path:
    specs = root / "specs"
    (specs / "data").mkdir(parents=True)
    with open(specs / "data" / "truth.jsonl", "w") as out:
        out.writelines(json.dumps(row) + "\n" for row in ROWS)
    (specs / "judge.j2").write_text(
        "Is {{ response }} right for {{ a }} + {{ b }}? GRADE: C or I\n"
    )
    (specs / "truth.yaml").write_text(SPEC)
    return specs


def cli_out(*args: str) -> str:
    """The CLI in this process (the local provider's fake server is this process's)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(args))
    assert code == 0, out.getvalue()
    return out.getvalue()


def test_one_run_reads_the_same_everywhere(tmp_path: Path, local_on_fake: FakeLLMServer) -> None:
    specs = write_project(tmp_path)
    results = tmp_path / "results"
    cache = ["--cache", str(tmp_path / "cache.duckdb"), "--results", str(results)]

    # -- `gradetrail run`: the summary as printed
    text = cli_out("run", str(specs / "truth.yaml"), *cache)
    assert local_on_fake.calls == SAMPLES  # the local provider's calls reached the fake
    assert (
        f"Samples: {SAMPLES} (scored=4, provider_error=0, scorer_error=0, judge_error=0: " in text
    )
    assert re.search(rf"Scorer num \[numeric\] \(primary\): mean {NUM_MEAN:.4f} \(.*n=4\)", text)
    judged = re.search(r"Scorer judged \[judge\]: mean (\S+) \([^;]*n=(\d+)\);.*", text)
    assert judged is not None, text
    assert (judged.group(1), judged.group(2)) == (f"{JUDGED_MEAN:.4f}", str(JUDGED_SCORED))
    assert "1 unscored count as failures (1 judge errors)" in judged.group(0)
    assert re.search(
        rf"Judge: 4 calls, 0 cache hits, {JUDGE_ERRORS} errors \(no usable grade\);", text
    )
    assert f"Cost: {LOCAL_COST}\n" in text
    assert "$0.000000" not in text.split("Judge:")[0]  # the target's figures

    # -- `plan` (text and --json) before a run: no price either; and `--max-cost` still
    # runs a local model (its price list's $0 is what the budget reads).
    planned = cli_out("plan", str(specs / "truth.yaml"), *cache[:2])
    assert f"Target (local/{MODEL}):" in planned and f"Cost: {LOCAL_COST}" in planned
    planned_json = json.loads(cli_out("plan", str(specs / "truth.yaml"), *cache[:2], "--json"))
    (model_plan,) = planned_json["models"]
    assert model_plan["target"]["local"] is True and model_plan["target"]["cost_high"] is None
    # -- `gradetrail run --json` (again: every answer from the cache), under a budget
    rerun = json.loads(
        cli_out("run", str(specs / "truth.yaml"), *cache, "--json", "--max-cost", "0.01")
    )
    assert local_on_fake.calls == SAMPLES  # the re-run was answered by the cache
    assert rerun["exit_status"] == 0
    (summary,) = [r["summary"] for r in rerun["runs"]]
    assert summary["outcomes"]["judge_error"] == 0 and summary["outcomes_by"] == "num"
    assert summary["judge_errors"] == {"judged": JUDGE_ERRORS}
    assert summary["scorers"]["judged"]["mean"] == pytest.approx(JUDGED_MEAN)
    assert summary["scorers"]["judged"]["scored"] == JUDGED_SCORED
    assert summary["target"]["local"] is True and summary["target"]["cost_usd"] is None
    with contextlib.redirect_stderr(io.StringIO()) as refused:
        code = cli.main(["run", str(specs / "truth.yaml"), "--json", "--until-decided",
                         "--model", MODEL, "--against", MODEL])  # fmt: skip
    assert code == 2 and "--json is not for --until-decided" in refused.getvalue()

    # -- the manifest: the summary's JSON
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["outcomes"]["judge_error"] == 0  # outcomes are the primary scorer's
    figures = manifest["scores"]["judged"]
    assert (figures["judge_errors"], figures["errors"]) == (JUDGE_ERRORS, JUDGE_ERRORS)
    assert (figures["scored"], figures["n"]) == (JUDGED_SCORED, SAMPLES)
    assert figures["mean"] == pytest.approx(JUDGED_MEAN)
    assert manifest["target"]["local"] is True
    assert manifest["target"]["cost_usd"] is None and manifest["target"]["cost_paid_usd"] is None
    # `run --json` printed the figures the manifest holds (the summary, stored).
    assert summary["scorers"] == manifest["scores"] and summary["outcomes"] == manifest["outcomes"]

    # -- `compare` (text and --json): the mean over scored samples, its n stated
    twin = tmp_path / "twin"
    shutil.copytree(run_dir, twin)
    compared = cli_out("compare", str(run_dir), str(twin), "--scorer", "judged")
    assert re.search(
        rf"mean score \(of scored\)\s+{JUDGED_MEAN:.4f} \(n=3\)\s+{JUDGED_MEAN:.4f} \(n=3\)",
        compared,
    ), compared
    pair = json.loads(cli_out("compare", str(run_dir), str(twin), "--json"))["scorers"]
    by_name = {p["scorer"]: p for p in pair}
    assert by_name["judged"]["mean_score_a"] == pytest.approx(JUDGED_MEAN)
    assert by_name["judged"]["scored_a"] == JUDGED_SCORED
    assert by_name["num"]["mean_score_a"] == pytest.approx(NUM_MEAN)

    # -- `cost` (text and --json): no price, neither $0 nor unknown
    cost_text = cli_out("cost", str(run_dir))
    local_row = next(line for line in cost_text.splitlines() if line.startswith(f"local/{MODEL} "))
    assert LOCAL_COST in local_row and "$" not in local_row
    assert f"Total: {LOCAL_COST}" not in cost_text  # the scripted judge's $0 is a price
    assert "Unknown price" not in cost_text
    cost_json = json.loads(cli_out("cost", str(run_dir), "--json"))
    (target,) = [m for m in cost_json["models"] if m["role"] == "target"]
    assert target["local"] is True and target["cost_usd"] is None
    assert target["cost_per_passed_usd"] is None and cost_json["unknown_prices"] == []

    # -- the HTML report
    html = write_report(run_dir).read_text()
    summary_row = html.split('<table class="summary">')[1].split("</table>")[0]
    assert LOCAL_COST in summary_row and "$0.000000" not in summary_row
    scorer_rows = html.split("<h3>Scorers</h3>")[1].split("</table>")[0]
    judged_row = scorer_rows.split("<td>judged")[1].split("</tr>")[0]
    assert f"{JUDGED_MEAN:.3f} ({JUDGED_SCORED})" in judged_row
    assert "1 (1 judge error)" in judged_row
    assert f"judge errors (no usable grade): {JUDGE_ERRORS}" in html

    # -- the viewer's pages, through its app
    with TestClient(create_app(results), base_url="http://127.0.0.1") as client:
        runs_page = client.get("/").text
        run_row = runs_page.split('class="run-link"')[1].split("</tr>")[0]
        assert LOCAL_COST in run_row and "$0.000000" not in run_row
        run_page = client.get(f"/run/{run_dir.name}").text
        scorers_table = run_page.split('<table class="scorers">')[1].split("</table>")[0]
        judged_cells = scorers_table.split("<td>judged")[1].split("</tr>")[0]
        assert f"{JUDGED_MEAN:.4f} (n={JUDGED_SCORED})" in judged_cells
        assert re.search(rf'<td class="num">{JUDGE_ERRORS}</td>', judged_cells)
        sample_page = client.get(f"/run/{run_dir.name}/sample/s3").text
        calls = sample_page.split('<table class="calls">')[1].split("</table>")[0]
        assert LOCAL_COST in calls.split("</tr>")[1]  # the target's call: no price
        assert "judge_error" in sample_page

    # -- Dagster: the scores and stats assets' metadata and checks, in process
    instance = dg.DagsterInstance.ephemeral()
    resource = GradetrailResource(
        database=str(tmp_path / "gradetrail.duckdb"), results_dir=str(tmp_path / "dagster")
    )
    defs = build_definitions(specs, resource)
    partitions = defs.resolve_job_def("truth__eval").partitions_def
    assert partitions is not None
    instance.add_dynamic_partitions("truth__models", [MODEL])
    result = defs.resolve_job_def("truth__eval").execute_in_process(
        instance=instance,
        partition_key=MODEL,
        asset_selection=[
            dg.AssetKey(["truth", s]) for s in ("dataset", "responses", "scores", "stats")
        ],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))},
    )
    assert result.success
    responses = metadata_of(result, "truth__responses")
    assert responses["cost"] == LOCAL_COST and "cost_usd" not in responses
    scores = metadata_of(result, "truth__scores")
    assert scores["judge_errors"] == JUDGE_ERRORS
    assert scores["judge_errors[judged]"] == JUDGE_ERRORS
    assert scores["scorers"]["judged"]["judge_errors"] == JUDGE_ERRORS
    assert scores["scorers"]["judged"]["errors"] == JUDGE_ERRORS
    assert scores["mean_score[judged]"] == pytest.approx(JUDGED_MEAN)
    assert scores["scorers"]["judged"]["scored"] == JUDGED_SCORED
    assert scores["cost"] == LOCAL_COST
    assert "cost_usd" not in scores and "cost_paid_usd" not in scores  # never a $0 figure
    # The failures table lists the sample the judge could not grade.
    assert "| s3 | judge_error (judged) |" in scores["summary"]
    stats = metadata_of(result, "truth__stats")
    assert stats["mean_score[judged]"] == pytest.approx(JUDGED_MEAN)
    assert stats["cost"] == LOCAL_COST and "cost_usd" not in stats
    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    judge_check = checks["judge_error_rate"].metadata
    assert judge_check["scorers"].value == {
        "judged": {"errors": JUDGE_ERRORS, "answered": SAMPLES, "rate": JUDGE_ERRORS / SAMPLES}
    }
    assert judge_check["rate"].value == JUDGE_ERRORS / SAMPLES
    # The leaderboard, from the stats table: the same mean over scored samples.
    board_job = dg.define_asset_job("board", selection=[dg.AssetKey(["truth", "leaderboard"])])
    with_board = dg.Definitions.merge(defs, dg.Definitions(jobs=[board_job]))
    boarded = with_board.resolve_job_def("board").execute_in_process(instance=instance)
    board = metadata_of(boarded, "truth__leaderboard")["board"]
    (entry,) = board["models"]
    assert entry["mean_score"] == pytest.approx(NUM_MEAN)
    assert entry["others"]["judged"]["mean_score"] == pytest.approx(JUDGED_MEAN)


def metadata_of(result: dg.ExecuteInProcessResult, node: str) -> dict[str, Any]:
    event = result.asset_materializations_for_node(node)[0]
    return {k: v.value for k, v in event.metadata.items()}


def test_a_manifest_from_before_judge_errors_reads_a_judge_scorers_errors_as_its_judges() -> None:
    older = {"n": 30, "scored": 29, "errors": 1, "mean": 0.4483, "passed": 13}
    assert ScorerFigures.model_validate({**older, "type": "judge"}).judge_errors == 1
    assert ScorerFigures.model_validate({**older, "type": "python"}).judge_errors == 0
    written = {**older, "type": "judge", "errors": 2, "judge_errors": 1}
    assert ScorerFigures.model_validate(written).judge_errors == 1


def test_a_release_check_between_local_models_pays_no_price_and_says_so(
    tmp_path: Path, local_on_fake: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A second local model, served by the same fake server (the provider takes any model
    # LOCAL_MODELS names).
    monkeypatch.setitem(local_server.LOCAL_MODELS, TWIN, local_server.LOCAL_MODELS[MODEL])
    specs = write_project(tmp_path)
    spec = specs / "truth.yaml"
    spec.write_text(
        SPEC.replace(
            f"model: {{provider: local, name: {MODEL}}}",
            f"models:\n  - {{provider: local, name: {MODEL}}}\n"
            f"  - {{provider: local, name: {TWIN}}}",
        ).replace("  - name: judged\n    type: judge\n    prompt_file: judge.j2\n"
                  "    model: {provider: scripted, name: grader, answer_field: grade}\n", "")
    )  # fmt: skip
    out = cli_out(
        "run", str(spec), "--until-decided", "--model", TWIN, "--against", MODEL,
        "--chunk", "2", "--max-cost", "0.01", "--cache", str(tmp_path / "c.duckdb"),
        "--results", str(tmp_path / "results"),
    )  # fmt: skip
    assert f"paid {LOCAL_COST}, saved {LOCAL_COST}" in out
    assert local_on_fake.calls == 2 * SAMPLES  # every case of both: the budget never ran out
    (manifest_path, *_) = (tmp_path / "results").glob("until-decided/*/*/manifest.json")
    sequential = json.loads(manifest_path.read_text())["sequential"]
    assert sequential["local"] is True and sequential["cost_usd"] is None
