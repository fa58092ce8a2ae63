"""The sending half shared by the asyncio backend and each Ray worker.

One httpx.AsyncClient slows down sharply with many requests in flight (see
notes/FACTS.md: 3.1x the floor at 64), so requests are spread over several clients,
each with a small connection pool and never more requests than connections.
"""

import asyncio
import math
import ssl
from functools import cache

import httpx

from gradetrail_lib.providers.base import ModelResponse, ProviderError
from gradetrail_lib.providers.caller import RetryPolicy, call_model
from gradetrail_lib.request import ModelRequest

Outcome = ModelResponse | ProviderError


@cache
def shared_ssl_context() -> ssl.SSLContext:
    """One CA bundle load per process: each client loading its own costs ~19 ms, which at
    16 clients is a tenth of a 64-wide run's floor."""
    return httpx.create_ssl_context()


class ClientPool:
    """ceil(concurrency / per_client) httpx clients; each request goes to the least busy.

    With at most `concurrency` requests in flight no client ever carries more than
    `per_client`, so none queues inside httpx's pool.
    """

    def __init__(self, concurrency: int, per_client: int = 4) -> None:
        if concurrency < 1 or per_client < 1:
            raise ValueError("concurrency and per_client must be at least 1")
        n_clients = math.ceil(concurrency / per_client)
        limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
        self._clients = [
            httpx.AsyncClient(limits=limits, verify=shared_ssl_context()) for _ in range(n_clients)
        ]
        self._busy = [0] * n_clients

    async def send(self, request: ModelRequest, policy: RetryPolicy) -> Outcome:
        """The request's response, or the ProviderError it finally failed with."""
        # No await between choosing and counting: asyncio cannot interleave another pick.
        i = min(range(len(self._busy)), key=self._busy.__getitem__)
        self._busy[i] += 1
        try:
            return await call_model(self._clients[i], request, policy)
        except ProviderError as error:
            return error
        finally:
            self._busy[i] -= 1

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._clients))
