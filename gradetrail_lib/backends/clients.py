"""The sending half shared by the asyncio backend and each Ray worker.

One `StreamTransport`: a connection per request in flight, kept alive between requests.
(httpx's default pool slows down sharply with many requests in flight, docs/performance.md;
this transport has no pool to contend for.)
"""

from gradetrail_lib.backends.transport import StreamTransport
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.caller import call_model
from gradetrail_lib.providers.policy import AttemptGate, RetryPolicy

Outcome = ModelResponse | ProviderError


class RequestSender:
    """Sends requests with the retry policy applied; keeps connections between them."""

    def __init__(self) -> None:
        self._transport = StreamTransport()

    async def send(
        self, request: ModelRequest, policy: RetryPolicy, gate: AttemptGate | None = None
    ) -> Outcome:
        """The request's response, or the ProviderError it finally failed with."""
        try:
            return await call_model(self._transport, request, policy, gate=gate)
        except ProviderError as error:
            return error

    async def aclose(self) -> None:
        await self._transport.aclose()
