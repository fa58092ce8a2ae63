"""The LLM judge end to end: a real loopback provider grades by comparing the reference
and the response it finds in the judge prompt, so its scores must equal a regex scorer's;
judge calls are ordinary cached requests."""

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib import load_run
from tests.conftest import run_cli, run_cli_process, write_addition_dataset
from tests.support.fake_llm_server import FakeLLMServer, Fault, default_responder, last_user_message

N = 12
JUDGE_PROMPT = """Grade the response against the reference.
Reference: {{ answer }}
Response: {{ response }}
End with GRADE: C (correct) or GRADE: I (incorrect).
"""
_GRADED = re.compile(r"Reference: (.*)\nResponse: (.*)\n")


def grading_responder(body: dict[str, Any]) -> str:
    """The target model (`fake-1`) adds; the judge (`judge-1`) checks the reference is in
    the response, as the regex scorer does."""
    if body.get("model") != "judge-1":
        return default_responder(body)
    found = _GRADED.search(last_user_message(body))
    assert found is not None, last_user_message(body)
    reference, response = found.groups()
    return "Looks right. GRADE: C" if reference in response else "Not it. GRADE: I"


def write_judged_spec(
    tmp_path: Path,
    base_url: str,
    *,
    judge_base_url: str | None = None,
    judge_model: str = "judge-1",
    extra_judge: str = "",
    max_tokens: int = 16,
) -> Path:
    judge_url = judge_base_url or base_url
    (tmp_path / "judges").mkdir(exist_ok=True)
    prompt = tmp_path / "judges" / "correct.j2"
    if not prompt.exists():
        prompt.write_text(JUDGE_PROMPT)
    spec = tmp_path / "add.yaml"
    spec.write_text(
        f"""name: add
dataset: {{path: data/add.jsonl}}
prompt: "Q: {{{{ a }}}} + {{{{ b }}}}"
model: {{provider: openai_compatible, name: fake-1, base_url: "{base_url}"}}
params: {{temperature: 0, max_tokens: {max_tokens}}}
scorers:
  - {{name: exact_answer, type: regex}}
  - name: correct
    type: judge
    prompt_file: judges/correct.j2
    model: {{provider: openai_compatible, name: {judge_model}, base_url: "{judge_url}"}}
    params: {{temperature: 0, max_tokens: 32}}{extra_judge}
"""
    )
    return spec


def calls_by_model(server: FakeLLMServer) -> dict[str, int]:
    counts: dict[str, int] = {}
    for request in server.requests:
        model = str(request["body"].get("model"))
        counts[model] = counts.get(model, 0) + 1
    return counts


def run(tmp_path: Path, spec: Path, *args: str) -> Any:
    done = run_cli("run", str(spec), "--cache", str(tmp_path / "cache.duckdb"), *args, cwd=tmp_path)
    return done


def run_dir(done: Any) -> Path:
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("Run: ")]
    return Path(line.split(" -> ", 1)[1])


@pytest.fixture
def server():
    with FakeLLMServer(responder=grading_responder) as srv:
        yield srv


def test_judge_grades_like_the_regex_scorer_and_a_rerun_calls_nothing(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    spec = write_judged_spec(tmp_path, f"{server.base_url}/v1")
    cold = run(tmp_path, spec)
    assert cold.returncode == 0, cold.stderr
    assert calls_by_model(server) == {"fake-1": N, "judge-1": N}
    assert f"Judge: {N} calls, 0 cache hits, 0 errors" in cold.stdout
    records = load_run(tmp_path / run_dir(cold)).records
    regex = [r.score_of("exact_answer") for r in records]
    assert regex == [0.0 if i % 4 == 0 else 1.0 for i in range(N)]  # the scorer can fail
    assert [r.score_of("correct") for r in records] == regex
    judged = records[0].calls[1]
    assert (judged.role, judged.scorer, judged.model) == ("judge", "correct", "judge-1")
    assert judged.text == "Not it. GRADE: I" and judged.cache_hit is False
    assert records[0].scores["correct"].reason == "judge grade I"
    manifest = json.loads((tmp_path / run_dir(cold) / "manifest.json").read_text())
    assert list(manifest["judge_hashes"]) == ["judges/correct.j2"]
    assert manifest["judge"]["calls"] == N and manifest["target"]["calls"] == N

    warm = run(tmp_path, spec)
    assert warm.returncode == 0, warm.stderr
    assert server.calls == 2 * N, "a re-run makes no target and no judge call"
    assert f"Judge: 0 calls, {N} cache hits, 0 errors" in warm.stdout
    assert f"Cache hits: {N}/{N}" in warm.stdout


def test_a_judge_file_edit_resends_only_judge_calls(tmp_path: Path, server: FakeLLMServer) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    spec = write_judged_spec(tmp_path, f"{server.base_url}/v1")
    cold = run(tmp_path, spec)
    assert cold.returncode == 0, cold.stderr
    prompt = tmp_path / "judges" / "correct.j2"
    prompt.write_text("Be strict.\n" + JUDGE_PROMPT)
    edited = run(tmp_path, spec)
    assert edited.returncode == 0, edited.stderr
    assert calls_by_model(server) == {"fake-1": N, "judge-1": 2 * N}
    assert f"Cache hits: {N}/{N}" in edited.stdout
    # The judge file is part of the identity: a new run directory, a new judge hash.
    assert run_dir(edited) != run_dir(cold)
    hashes = [
        json.loads((tmp_path / run_dir(d) / "manifest.json").read_text())["judge_hashes"]
        for d in (cold, edited)
    ]
    assert hashes[0] != hashes[1]


def test_an_unchanged_response_is_not_judged_again(tmp_path: Path, server: FakeLLMServer) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", N)
    cold = run(tmp_path, write_judged_spec(tmp_path, f"{server.base_url}/v1"))
    assert cold.returncode == 0, cold.stderr
    # Another max_tokens: every target request is new, but the answers come out the same,
    # so the judge's requests are too.
    again = run(tmp_path, write_judged_spec(tmp_path, f"{server.base_url}/v1", max_tokens=17))
    assert again.returncode == 0, again.stderr
    assert calls_by_model(server) == {"fake-1": 2 * N, "judge-1": N}
    assert f"Judge: 0 calls, {N} cache hits" in again.stdout


def test_a_changed_response_is_judged_again(tmp_path: Path, server: FakeLLMServer) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 4)
    spec = write_judged_spec(tmp_path, f"{server.base_url}/v1")
    assert run(tmp_path, spec).returncode == 0
    server.responder = lambda body: (
        grading_responder(body) if body.get("model") == "judge-1" else "Answer: 0"
    )
    again = run(tmp_path, spec, "--no-cache")
    assert again.returncode == 0, again.stderr
    assert calls_by_model(server) == {"fake-1": 8, "judge-1": 8}


def test_a_judge_of_the_model_under_test_is_refused(tmp_path: Path, server: FakeLLMServer) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 3)
    spec = write_judged_spec(tmp_path, f"{server.base_url}/v1", judge_model="fake-1")
    done = run(tmp_path, spec)
    assert done.returncode == 2
    assert f"{spec}:11: scorers[1].model: the judge openai_compatible/fake-1" in done.stderr
    assert "force_same_model" in done.stderr
    assert server.calls == 0 and not (tmp_path / "results").exists()

    forced = write_judged_spec(
        tmp_path, f"{server.base_url}/v1", judge_model="fake-1",
        extra_judge="\n    force_same_model: true",
    )  # fmt: skip
    done = run(tmp_path, forced)
    assert done.returncode == 0, done.stderr
    assert calls_by_model(server) == {"fake-1": 6}  # 3 answers, 3 gradings by itself
    records = load_run(tmp_path / run_dir(done)).records
    assert all(r.calls[1].model == "fake-1" for r in records)


def test_unparseable_judge_output_is_a_judge_error_with_the_text_kept(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 4)
    server.responder = lambda body: (
        "I would rather not say." if body.get("model") == "judge-1" else default_responder(body)
    )
    spec = write_judged_spec(tmp_path, f"{server.base_url}/v1")
    done = run(tmp_path, spec)
    assert done.returncode == 0, done.stderr
    for record in load_run(tmp_path / run_dir(done)):
        entry = record.scores["correct"]
        assert (entry.score, entry.error) == (None, "judge_error")
        assert "does not match" in entry.reason
        assert record.calls[1].text == "I would rather not say."
        assert record.outcome == "scored"  # the primary (regex) scorer scored
        assert record.scores["exact_answer"].error is None
    assert "Scorer correct [judge]: mean n/a (n=0)" in done.stdout


def test_a_failed_judge_call_is_a_judge_error_of_that_sample_only(tmp_path: Path) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 4)
    with (
        FakeLLMServer(responder=grading_responder) as target,
        FakeLLMServer(responder=grading_responder) as judge,
    ):
        judge.script = [Fault(status=400, message="bad judge request")]
        spec = write_judged_spec(
            tmp_path, f"{target.base_url}/v1", judge_base_url=f"{judge.base_url}/v1"
        )
        done = run(tmp_path, spec, "--concurrency", "1")
        assert done.returncode == 0, done.stderr
        assert (target.calls, judge.calls) == (4, 4)
    errors = [r for r in load_run(tmp_path / run_dir(done)) if r.error_of("correct")]
    (failed,) = errors
    assert failed.scores["correct"].reason.startswith("judge call failed: HTTP 400")
    assert failed.calls[1].error is not None and failed.calls[1].text is None
    assert "Judge: 4 calls, 0 cache hits, 1 errors" in done.stdout


def test_judging_overlaps_the_targets_sending_on_its_own_slots(tmp_path: Path) -> None:
    """Pipelined: the first judge call is sent while target calls are still going, and
    the judge's calls do not take the target's slots (both run C at a time)."""
    arrivals: list[tuple[float, str]] = []
    lock = threading.Lock()

    def timed(body: dict[str, Any]) -> str:
        with lock:
            arrivals.append((time.monotonic(), str(body.get("model"))))
        return grading_responder(body)

    write_addition_dataset(tmp_path / "data" / "add.jsonl", 16)
    with FakeLLMServer(latency_s=0.1, responder=timed) as srv:
        spec = write_judged_spec(tmp_path, f"{srv.base_url}/v1")
        done = run(tmp_path, spec, "--concurrency", "4")
        assert done.returncode == 0, done.stderr
        max_inflight = srv.max_inflight
    last_target = max(t for t, m in arrivals if m == "fake-1")
    first_judge = min(t for t, m in arrivals if m == "judge-1")
    assert first_judge < last_target
    assert max_inflight > 4, "judge calls ran beside the target's 4, not in their slots"


@pytest.mark.timeout(180)
@pytest.mark.slow  # a local Ray cluster
def test_judge_calls_go_through_the_ray_backend_too(tmp_path: Path, server: FakeLLMServer) -> None:
    """With Ray the judge's misses are sent when the target's are done, by the same
    backend (a local cluster the command starts); the records match the local backend's."""
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 8)
    spec = write_judged_spec(tmp_path, f"{server.base_url}/v1")
    args = ("--backend", "ray", "--workers", "1", "--results", str(tmp_path / "ray"))
    # A process of its own: the command starts Ray's driver, which this one must not host.
    done = run_cli_process("run", str(spec), "--cache", str(tmp_path / "ray.duckdb"), *args,
                           cwd=tmp_path, timeout=170)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert calls_by_model(server) == {"fake-1": 8, "judge-1": 8}
    local = run(tmp_path, spec)
    assert local.returncode == 0, local.stderr
    (ray_dir,) = [p for p in (tmp_path / "ray").iterdir() if p.is_dir()]
    ray_records = load_run(ray_dir).records
    local_records = load_run(tmp_path / run_dir(local)).records
    assert [r.scores for r in ray_records] == [r.scores for r in local_records]
    assert [[c.request_key for c in r.calls] for r in ray_records] == [
        [c.request_key for c in r.calls] for r in local_records
    ]


def test_adding_a_scorer_rescores_with_zero_target_and_judge_calls(
    tmp_path: Path, server: FakeLLMServer
) -> None:
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 4)
    spec = write_judged_spec(tmp_path, f"{server.base_url}/v1")
    assert run(tmp_path, spec).returncode == 0
    spec.write_text(spec.read_text() + "  - {name: valid, type: json_valid}\n")
    done = run(tmp_path, spec)
    assert done.returncode == 0, done.stderr
    assert server.calls == 8
    assert (
        "Scorer valid [json_valid]" in done.stdout and "Judge: 0 calls, 4 cache hits" in done.stdout
    )


def test_an_aborted_run_keeps_the_judge_answers_that_came(tmp_path: Path) -> None:
    """The target fails for good after some answers (three identical fatal errors abort the
    run); the judge answers received by then are in the cache for the re-run."""
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 6)
    with (
        FakeLLMServer(responder=grading_responder, latency_s=0.1) as target,
        FakeLLMServer(responder=grading_responder, latency_s=0.05) as judge,
    ):
        spec = write_judged_spec(
            tmp_path, f"{target.base_url}/v1", judge_base_url=f"{judge.base_url}/v1"
        )
        target.script = []
        answered = 0

        def then_fail(body: dict[str, Any]) -> str:
            nonlocal answered
            answered += 1
            if answered > 2:  # the next three fail alike: the abort rule
                target.fail_always = Fault(status=401, message="key revoked")
            return grading_responder(body)

        target.responder = then_fail
        done = run(tmp_path, spec, "--concurrency", "1")
        assert done.returncode == 1 and "aborted" in done.stderr
        judged_before = judge.calls
        assert judged_before >= 1
        target.fail_always = None
        target.responder = grading_responder
        again = run(tmp_path, spec, "--concurrency", "1")
        assert again.returncode == 0, again.stderr
    found = re.search(r"Judge: (\d+) calls, (\d+) cache hits", again.stdout)
    assert found is not None
    sent, hits = int(found.group(1)), int(found.group(2))
    assert hits >= 1, "a judge answer received before the abort was cached"
    assert sent + hits == 6 and sent == judge.calls - judged_before
