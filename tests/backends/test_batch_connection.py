"""The batch backend's HTTP clients load the CA bundle once per process, as the request
transport does (`backends.transport.shared_ssl_context`): a client's own load costs
50-100 ms, which every batch run paid per endpoint, and each of its polls' processes."""

from contextlib import ExitStack

import pytest

from gradetrail_lib.backends.batch import open_connection
from gradetrail_lib.backends.transport import shared_ssl_context
from gradetrail_lib.providers.base import Endpoint


def test_batch_connections_share_the_processs_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADETRAIL_TEST_BATCH_KEY", "sk-test")
    endpoints = [
        Endpoint(
            provider=provider, model="m", base_url=base_url, api_key_env="GRADETRAIL_TEST_BATCH_KEY"
        )
        for provider, base_url in (
            ("openai", "https://api.openai.com/v1"),
            ("anthropic", "https://api.anthropic.com"),
        )
    ]
    with ExitStack() as stack:
        connections = [open_connection(stack, endpoint, None) for endpoint in endpoints]
        # httpx's client → its transport → httpcore's pool holds the context it verifies with.
        contexts = [c.client._transport._pool._ssl_context for c in connections]  # type: ignore[attr-defined]
    assert all(context is shared_ssl_context() for context in contexts)
