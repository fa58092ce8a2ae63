"""The asyncio backend: C worker tasks in this process, sharing one RequestSender."""

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from importlib import import_module

from gradetrail_lib.backends.base import ResultCallback
from gradetrail_lib.errors import RunAborted
from gradetrail_lib.providers.base import ProviderError
from gradetrail_lib.providers.policy import AbortTracker, RetryPolicy
from gradetrail_lib.request import ModelRequest


class LocalBackend:
    name = "local"

    def __init__(
        self,
        concurrency: int = 8,
        policy: RetryPolicy | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.concurrency = concurrency
        self.policy = policy or RetryPolicy()

    def prepare(self) -> None:
        import_module("gradetrail_lib.backends.clients")  # httpx and httptools: ~0.15 s

    def session(self) -> AbstractContextManager[None]:
        return nullcontext()  # nothing outlives a run

    def limited(self, max_concurrency: int) -> "LocalBackend":
        if self.concurrency <= max_concurrency:
            return self
        return LocalBackend(max_concurrency, self.policy)

    def describe(self) -> dict[str, object]:
        return {"backend": self.name, "concurrency": self.concurrency}

    def run(self, requests: Sequence[ModelRequest], on_result: ResultCallback) -> None:
        if requests:
            asyncio.run(self.run_async(requests, on_result))

    async def run_async(self, requests: Sequence[ModelRequest], on_result: ResultCallback) -> None:
        pending: Iterator[ModelRequest] = iter(requests)

        async def next_request() -> ModelRequest | None:
            # One shared iterator: asyncio runs one worker at a time between awaits.
            return next(pending, None)

        await self._serve(min(self.concurrency, len(requests)), next_request, on_result)

    async def run_queue(
        self, queue: "asyncio.Queue[ModelRequest | None]", on_result: ResultCallback
    ) -> None:
        """Send what arrives on `queue` (requests that are found while others are sent,
        such as a judge's); ends when each of the `concurrency` workers has taken a None."""
        await self._serve(self.concurrency, queue.get, on_result)

    async def _serve(
        self,
        workers: int,
        next_request: Callable[[], Awaitable[ModelRequest | None]],
        on_result: ResultCallback,
    ) -> None:
        # Imported here (or by prepare()): the HTTP stack is a fifth of the start-up of
        # a fully cached run, which sends nothing.
        from gradetrail_lib.backends.clients import RequestSender

        sender = RequestSender()
        tracker = AbortTracker(self.policy.abort_after_identical)

        async def worker() -> None:
            while (request := await next_request()) is not None:
                outcome = await sender.send(request, self.policy)
                on_result(request, outcome)
                if isinstance(outcome, ProviderError):
                    tracker.failure(outcome)
                else:
                    tracker.success()

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(workers):
                    group.create_task(worker())
                    # Started together, all C workers open their connections first and
                    # the first request waits for all of them (~15 ms at C=64); one loop
                    # turn apart, each sends as soon as it is connected.
                    await asyncio.sleep(0)
        except* RunAborted as aborted:
            raise aborted.exceptions[0] from None
        finally:
            await sender.aclose()
