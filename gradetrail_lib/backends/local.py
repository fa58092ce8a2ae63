"""The asyncio backend: C worker tasks in this process, sharing one RequestSender.

With `adaptive` (`--concurrency auto`), C is the maximum and each endpoint's attempts
are admitted by an AIMD limiter of its own (`backends.adaptive`), kept for the backend's
life so that a second run to an endpoint starts where the first one settled."""

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from importlib import import_module

from gradetrail_lib.backends.adaptive import DEFAULT_INITIAL, AIMDLimiter
from gradetrail_lib.backends.base import ResultCallback, SendsAsItComes
from gradetrail_lib.errors import RunAborted
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ProviderError
from gradetrail_lib.providers.policy import AbortTracker, RetryPolicy
from gradetrail_lib.settings import DEFAULT_CONCURRENCY


def endpoint_label(endpoint: Endpoint) -> str:
    return f"{endpoint.provider}/{endpoint.model} at {endpoint.base_url}"


class LocalBackend(SendsAsItComes):
    name = "local"

    def __init__(
        self,
        concurrency: int = DEFAULT_CONCURRENCY,
        policy: RetryPolicy | None = None,
        *,
        adaptive: bool = False,
        initial: int = DEFAULT_INITIAL,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        # Adaptive: the most in flight (per endpoint); the workers of a run_queue.
        self.concurrency = concurrency
        self.policy = policy or RetryPolicy()
        self.adaptive = adaptive
        self.initial = initial
        self._limiters: dict[Endpoint, AIMDLimiter] = {}
        # Shared with every describe() result, filled in as runs end: a manifest is
        # written after its run, when this holds the limit its run settled at.
        self._settled: dict[str, int] = {}

    def limiter(self, endpoint: Endpoint) -> AIMDLimiter:
        if endpoint not in self._limiters:
            self._limiters[endpoint] = AIMDLimiter(self.concurrency, initial=self.initial)
        return self._limiters[endpoint]

    def limiter_stats(self) -> dict[str, dict[str, int]]:
        return {endpoint_label(e): lim.stats() for e, lim in self._limiters.items()}

    def prepare(self) -> None:
        import_module("gradetrail_lib.backends.clients")  # httpx and httptools: ~0.15 s

    def session(self) -> AbstractContextManager[None]:
        return nullcontext()  # nothing outlives a run

    def limited(self, max_concurrency: int) -> "LocalBackend":
        if self.concurrency <= max_concurrency:
            return self
        return LocalBackend(
            max_concurrency,
            self.policy,
            adaptive=self.adaptive and max_concurrency > 1,
            initial=self.initial,
        )

    def describe(self) -> dict[str, object]:
        if not self.adaptive:
            return {"backend": self.name, "concurrency": self.concurrency}
        return {
            "backend": self.name,
            "concurrency": "auto",
            "max_concurrency": self.concurrency,
            "settled_concurrency": self._settled,  # per endpoint, when the run ended
        }

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
                gate = self.limiter(request.endpoint) if self.adaptive else None
                outcome = await sender.send(request, self.policy, gate)
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
                    # the first request waits for all of them; one loop
                    # turn apart, each sends as soon as it is connected.
                    await asyncio.sleep(0)
        except* RunAborted as aborted:
            raise aborted.exceptions[0] from None
        finally:
            for endpoint, limiter in self._limiters.items():
                self._settled[endpoint_label(endpoint)] = limiter.limit
            await sender.aclose()
