"""Log-likelihoods over HTTP from a server's completions endpoint that echoes the prompt's
log-probabilities (vLLM's `/v1/completions` with `echo: true` and `logprobs`).

The prompt is context + continuation, sent whole; one token is generated (servers want at
least one) and left out. The server's answer lists each token with its text offset: the
continuation's tokens are those from the first one that does not lie entirely within the
context (after its trailing whitespace moved to the continuation, as lm-eval splits), up
to the end of the prompt. So a token the join merges is the continuation's, as with the
local model. A token is greedy when it is the most likely in its `top_logprobs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradetrail_lib.providers.adapter import json_post
from gradetrail_lib.providers.base import ParsedBody
from gradetrail_lib.providers.openai_chat import OpenAIChatAdapter

if TYPE_CHECKING:
    import httpx

    from gradetrail_lib.providers.base import ModelRequest


def continuation_span(context: str, continuation: str) -> tuple[int, int]:
    """Where the continuation is in the prompt, in characters: after the context without
    its trailing whitespace, to the prompt's end."""
    return len(context.rstrip()), len(context) + len(continuation)


class CompletionsLogprobsAdapter:
    """The adapter of log-likelihood requests (`ModelRequest.kind`)."""

    def build(self, request: ModelRequest, api_key: str | None) -> httpx.Request:
        body = {
            "model": request.endpoint.model,
            "prompt": request.context + request.continuation,
            "max_tokens": 1,
            "temperature": 0,
            "echo": True,
            "logprobs": 1,
        }
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        return json_post(f"{request.endpoint.base_url}/completions", headers, body)

    def parse(self, body: Any) -> ParsedBody:
        raise TypeError("a log-likelihood answer is read with its request (parse_for)")

    def parse_for(self, request: ModelRequest, body: Any) -> ParsedBody:
        logprobs = body["choices"][0]["logprobs"]
        tokens: list[str] = logprobs["tokens"]
        offsets: list[int] = logprobs["text_offset"]
        start, end = continuation_span(request.context, request.continuation)
        ends = [*offsets[1:], end]
        picked = [i for i in range(len(tokens)) if offsets[i] < end and ends[i] > start]
        if not picked:
            raise KeyError("no token of the continuation in the answer")
        total = 0.0
        greedy = True
        for i in picked:
            value = logprobs["token_logprobs"][i]
            if value is None:  # the prompt's first token: nothing predicts it
                raise ValueError("the continuation's first token has no log-probability")
            total += float(value)
            top: dict[str, float] = (logprobs.get("top_logprobs") or [None] * len(tokens))[i] or {}
            best = max(top.items(), key=lambda item: item[1])[0] if top else None
            greedy = greedy and best == tokens[i]
        usage = body.get("usage") or {}
        return ParsedBody(
            text=request.continuation,
            served_model=body.get("model"),
            stop_reason="stop",
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=0,
            loglikelihood=total,
            continuation_tokens=len(picked),
            is_greedy=greedy,
        )

    def reset_after_s(self, headers: httpx.Headers) -> float | None:
        return OpenAIChatAdapter().reset_after_s(headers)
