"""`openai_compatible` log-likelihoods from a completions endpoint that echoes the prompt's
log-probabilities (vLLM's format), against the loopback fake server, whose "model" gives
each token -0.5 per character (`fake_logprob`)."""

import json
from pathlib import Path

from gradetrail_lib import run_spec
from gradetrail_lib.config import Params
from gradetrail_lib.providers.completions_logprobs import CompletionsLogprobsAdapter
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.providers.request import RequestBuilder
from tests.support.fake_llm_server import (
    COMPLETIONS_PATH,
    FakeLLMServer,
    echo_logprobs,
    fake_logprob,
    fake_tokens,
)

ROWS = [
    {"id": "a", "q": "The sky is", "opts": ["blue", "made of green cheese"], "key": 0},
    {"id": "b", "q": "Two plus two is ", "opts": ["four", "five"], "key": 0},
]


def expected(context: str, option: str) -> tuple[float, int, bool]:
    """The continuation's tokens by the fake's tokenizer: those not wholly in the context
    (without its trailing whitespace)."""
    prompt = context + " " + option
    boundary = len(context.rstrip())
    at, total, count, greedy = 0, 0.0, 0, True
    for token in fake_tokens(prompt):
        if at + len(token) > boundary:
            total += fake_logprob(token)
            count += 1
            greedy = greedy and len(token) <= 3
        at += len(token)
    return total, count, greedy


def test_the_adapter_reads_the_continuations_tokens() -> None:
    model = ModelConfig(provider="openai_compatible", name="m", base_url="http://127.0.0.1:1/v1")
    builder = RequestBuilder(model, Params())
    adapter = CompletionsLogprobsAdapter()
    for context, option in [("The sky is", "blue"), ("Two plus two is ", "four")]:
        request = builder.loglikelihood(context, " " + option)
        body = json.loads(adapter.build(request, None).read())
        assert body["echo"] is True and body["logprobs"] == 1
        assert body["prompt"] == context + " " + option
        parsed = adapter.parse_for(request, echo_logprobs(body))
        want, count, greedy = expected(context, option)
        assert parsed.loglikelihood == want
        assert parsed.continuation_tokens == count
        assert parsed.is_greedy == greedy
    # The trailing space of "is " goes with the continuation: "  four" is one token.
    request = builder.loglikelihood("Two plus two is ", " four")
    assert (
        adapter.parse_for(
            request, echo_logprobs({"prompt": "Two plus two is  four", "echo": True})
        ).continuation_tokens
        == 1
    )  # noqa: E501


def test_a_spec_by_loglikelihood_runs_against_the_server_and_caches(tmp_path: Path) -> None:
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with FakeLLMServer(latency_s=0.0) as server:
        spec = {
            "name": "mc-http",
            "dataset": {"path": "data.jsonl"},
            "prompt": "{{ q }}",
            "choices": "{{ opts }}",
            "gold": "{{ key }}",
            "models": [
                {"provider": "openai_compatible", "name": "fake-1",
                 "base_url": f"{server.base_url}/v1"}
            ],
        }  # fmt: skip
        args = {"base_dir": tmp_path, "cache": tmp_path / "c.duckdb"}
        (cold,) = run_spec(spec, results_root=tmp_path / "r1", **args)  # type: ignore[arg-type]
        assert server.calls_by_path[COMPLETIONS_PATH] == 4
        for record, row in zip(cold.records, ROWS, strict=True):
            assert record.choices is not None
            for option, text in zip(record.choices.options, row["opts"], strict=True):  # type: ignore[call-overload]
                want, count, greedy = expected(row["q"], text)  # type: ignore[arg-type]
                assert option.loglikelihood == want and option.tokens == count
                assert option.is_greedy == greedy
        # acc picks the likelier option ("blue" is shorter, so likelier to the fake).
        assert [r.scores["acc"].score for r in cold.records] == [1.0, 1.0]
        (warm,) = run_spec(spec, results_root=tmp_path / "r2", **args)  # type: ignore[arg-type]
        assert server.calls_by_path[COMPLETIONS_PATH] == 4  # no call: all from the cache
        assert all(c.cache_hit for r in warm.records for c in r.calls)
