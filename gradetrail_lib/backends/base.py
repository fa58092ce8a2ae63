"""The backend interface: requests in, answers out. The asyncio and Ray backends send each
request as it comes; the batch sender (`batch`) holds the ones a provider batch API takes
and sends them as batch jobs. What a run asks of a backend beyond sending (requests to
expect, steps that cannot wait for a batch, an interrupt) is part of the interface, so
the engine never asks which backend it has."""

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, Self

from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError

# Called in the driver process, once per request, as soon as its outcome is known.
ResultCallback = Callable[[ModelRequest, ModelResponse | ProviderError], None]


class Backend(Protocol):
    name: str
    concurrency: int

    def run(self, requests: Sequence[ModelRequest], on_result: ResultCallback) -> None:
        """Send every request; raise RunAborted when the abort rule fires."""
        ...

    def prepare(self) -> None:
        """Load what sending needs, for a command that will send: as part of its start-up
        rather than inside the first run's responses step. A fully cached run skips it."""
        ...

    def session(self) -> AbstractContextManager[None]:
        """A scope in which several run() calls share what a backend sets up (a Ray
        cluster started on demand), released at its end instead of after each run."""
        ...

    def limited(self, max_concurrency: int) -> "Backend":
        """The same backend with at most `max_concurrency` requests in flight."""
        ...

    def describe(self) -> dict[str, object]:
        """What the manifest records about how the requests were sent."""
        ...

    def expect(self, parts: Iterable[Sequence[ModelRequest]]) -> None:
        """The requests later `run` calls will be given, a run's part at a time (made as
        they are iterated): a backend that sends by batch submits them now, so that every
        part runs at the provider at once; one that sends each request as it comes does
        not iterate them."""
        ...

    def stepwise(self, model: tuple[str, str], reason: str) -> "Backend":
        """The backend for requests that each wait for the last one's answer (an agent's
        steps): never held for a batch. Where that changes how `model`'s requests go,
        `reason` is said once."""
        ...

    def interrupted(self) -> None:
        """The run stops (Ctrl-C): say what keeps running elsewhere, and how to resume."""
        ...


class SendsAsItComes:
    """What a backend that sends each request as it comes (every one but the batch
    sender) does beyond sending: nothing."""

    def expect(self, parts: Iterable[Sequence[ModelRequest]]) -> None:
        return None

    def stepwise(self, model: tuple[str, str], reason: str) -> Self:
        return self

    def interrupted(self) -> None:
        return None
