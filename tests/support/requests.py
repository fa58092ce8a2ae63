"""Model requests for the fake server: one per sample "Q: i + 1000", keys unique per tag."""

from gradetrail_lib.providers.base import Endpoint, ModelRequest


def addition_requests(
    base_url: str,
    n: int,
    *,
    tag: str = "",
    provider: str = "openai_compatible",
    key_env: str | None = None,
) -> list[ModelRequest]:
    """`base_url` ends in /v1. The fake server answers each with "Answer: <i + 1000>"."""
    endpoint = Endpoint(provider, "fake-model", base_url, key_env)
    return [
        ModelRequest(
            key=f"{tag}{i:060x}",
            endpoint=endpoint,
            messages=[{"role": "user", "content": f"{tag}\nQ: {i} + 1000"}],
            params={"max_tokens": 16},
        )
        for i in range(n)
    ]
