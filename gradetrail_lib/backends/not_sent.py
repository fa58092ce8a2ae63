"""The backend of a step that must not call the target: Dagster's scores, after its
responses asset ran. A request the cache does not answer gets the error the responses
step had for it, or "no response"."""

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext

from gradetrail_lib.backends.base import ResultCallback, SendsAsItComes
from gradetrail_lib.providers.base import ModelRequest, ProviderError


class NotSent(SendsAsItComes):
    """Sends nothing: each request gets its known error, or "no response"."""

    name = "none"
    concurrency = 1

    def __init__(self, errors: Mapping[str, ProviderError]) -> None:
        self.errors = errors

    def run(self, requests: Sequence[ModelRequest], on_result: ResultCallback) -> None:
        for request in requests:
            error = self.errors.get(request.key)
            on_result(request, error or ProviderError("fatal", "no response (not sent)"))

    def prepare(self) -> None:
        pass

    def session(self) -> AbstractContextManager[None]:
        return nullcontext()

    def limited(self, max_concurrency: int) -> "NotSent":
        return self

    def describe(self) -> dict[str, object]:
        return {}
