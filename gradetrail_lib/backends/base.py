"""The backend interface shared by the asyncio and Ray backends."""

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

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
