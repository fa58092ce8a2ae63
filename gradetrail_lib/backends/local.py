"""The asyncio backend: C worker tasks in this process.

One httpx.AsyncClient slows down sharply with many requests in flight (see
notes/FACTS.md: 3.1x the floor at 64), so the workers are spread over several clients,
each with a small connection pool.
"""

import asyncio
import math
from collections.abc import Iterator, Sequence

import httpx

from gradetrail_lib.backends.base import ResultCallback
from gradetrail_lib.errors import RunAborted
from gradetrail_lib.providers.base import ProviderError
from gradetrail_lib.providers.caller import AbortTracker, RetryPolicy, call_model
from gradetrail_lib.request import ModelRequest


class LocalBackend:
    name = "local"

    def __init__(
        self,
        concurrency: int = 8,
        policy: RetryPolicy | None = None,
        requests_per_client: int = 4,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.policy = policy or RetryPolicy()
        self.requests_per_client = requests_per_client

    def limited(self, max_concurrency: int) -> "LocalBackend":
        if self.concurrency <= max_concurrency:
            return self
        return LocalBackend(max_concurrency, self.policy, self.requests_per_client)

    def describe(self) -> dict[str, object]:
        return {"backend": self.name, "concurrency": self.concurrency}

    def run(self, requests: Sequence[ModelRequest], on_result: ResultCallback) -> None:
        if requests:
            asyncio.run(self.run_async(requests, on_result))

    async def run_async(self, requests: Sequence[ModelRequest], on_result: ResultCallback) -> None:
        workers = min(self.concurrency, len(requests))
        n_clients = math.ceil(workers / self.requests_per_client)
        limits = httpx.Limits(
            max_connections=self.requests_per_client,
            max_keepalive_connections=self.requests_per_client,
        )
        clients = [httpx.AsyncClient(limits=limits) for _ in range(n_clients)]
        tracker = AbortTracker(self.policy.abort_after_identical)
        pending: Iterator[ModelRequest] = iter(requests)

        async def worker(client: httpx.AsyncClient) -> None:
            # One shared iterator: asyncio runs one worker at a time between awaits.
            for request in pending:
                try:
                    response = await call_model(client, request, self.policy)
                except ProviderError as error:
                    on_result(request, error)
                    tracker.failure(error)
                else:
                    tracker.success()
                    on_result(request, response)

        try:
            async with asyncio.TaskGroup() as group:
                for i in range(workers):
                    group.create_task(worker(clients[i % n_clients]))
        except* RunAborted as aborted:
            raise aborted.exceptions[0] from None
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))
