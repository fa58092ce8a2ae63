"""Binding requests to endpoints that answer: a server the provider starts (a local
model's llama.cpp server, `Provider.serve`) runs meanwhile.

Requests to such a model are planned against its provider's `planned_base_url`
(`local://`: the port is not known before the server starts); here they get the started
server's URL. The server is shared in the process, so a target and a judge on the same
local model use one.
"""

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager

from gradetrail_lib.providers import registry
from gradetrail_lib.providers.base import ModelRequest

Served = tuple[str, str]  # (provider, model)


def _serves(provider: str) -> bool:
    return registry.get(provider).serve is not None


def served_models(requests: Sequence[ModelRequest]) -> list[Served]:
    """The (provider, model) pairs of `requests` whose provider starts their server."""
    # A log-likelihood request of such a provider is answered in-process (no server).
    return sorted(
        {
            (r.endpoint.provider, r.endpoint.model)
            for r in requests
            if r.kind == "chat" and _serves(r.endpoint.provider)
        }
    )


def serve(provider: str, model: str) -> AbstractContextManager[str]:
    """The provider's server of `model`, yielding its base URL."""
    start = registry.get(provider).serve
    assert start is not None, f"provider {provider} starts no server"
    return start(model)


@contextmanager
def live_requests(requests: Sequence[ModelRequest]) -> Iterator[list[ModelRequest]]:
    served = served_models(requests)
    if not served:
        yield list(requests)
        return
    with ExitStack() as stack:
        urls = {pair: stack.enter_context(serve(*pair)) for pair in served}
        yield [bind(r, urls) for r in requests]


def bind(request: ModelRequest, urls: dict[Served, str]) -> ModelRequest:
    where = urls.get((request.endpoint.provider, request.endpoint.model))
    if where is None:
        return request
    endpoint = dataclasses.replace(request.endpoint, base_url=where)
    return dataclasses.replace(request, endpoint=endpoint)
