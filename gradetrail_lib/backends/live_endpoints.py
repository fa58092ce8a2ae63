"""Binding requests to endpoints that answer: a local model's server runs meanwhile.

Requests to a local model are planned against `local://` (its port is not known before
its server starts); here they get the started server's URL. The server is shared in the
process, so a target and a judge on the same local model use one.
"""

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from gradetrail_lib.providers.request import ModelRequest


def local_models(requests: Sequence[ModelRequest]) -> list[str]:
    return sorted({r.endpoint.model for r in requests if r.endpoint.provider == "local"})


@contextmanager
def live_requests(requests: Sequence[ModelRequest]) -> Iterator[list[ModelRequest]]:
    names = local_models(requests)
    if not names:
        yield list(requests)
        return
    from gradetrail_lib.providers.local_server import shared_local_server

    with ExitStack() as stack:
        urls = {name: stack.enter_context(shared_local_server(name)) for name in names}
        yield [bind(r, urls) for r in requests]


def bind(request: ModelRequest, urls: dict[str, str]) -> ModelRequest:
    if request.endpoint.provider != "local":
        return request
    endpoint = dataclasses.replace(request.endpoint, base_url=urls[request.endpoint.model])
    return dataclasses.replace(request, endpoint=endpoint)
