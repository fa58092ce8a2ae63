"""A sending step's claims (`cache.claims`), as every step that sends uses them: the
target's responses step, an agent's steps, the scorers' calls (a judge's).

Before a step sends the requests it found missing it claims them; it sends the ones it
got, and of the others, which runs sharing the cache are sending, it takes each answer
from the cache once stored (`poll`), or claims and sends one whose claim lapsed (its
owner died) or was released without an answer (its call failed). A step's claims are
renewed from their first claim until the step ends (`close`, after its writer stored its
answers, so a waiter finds them), and released then; a claim whose call failed is
released as soon as the failure is known (`settled`), so a run waiting for it claims and
sends it at its next look instead of when this step ends.
"""

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from gradetrail_lib.backends.base import Backend
from gradetrail_lib.backends.live_endpoints import live_requests
from gradetrail_lib.cache.base import Cache
from gradetrail_lib.cache.claims import POLL_S, Renewal
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError

if TYPE_CHECKING:
    from gradetrail_lib.engine.responses import ResponseListener, Responses

OnResult = Callable[[ModelRequest, ModelResponse | ProviderError], None]


class StepClaims:
    """One step's claims on a cache (none when the cache offers none: then every miss is
    this step's to send, as before claims)."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self._claims = cache.claims()
        self._renewal: Renewal | None = None

    def split(
        self,
        missing: Sequence[ModelRequest],
        result: "Responses",
        listener: "ResponseListener | None" = None,
    ) -> tuple[list[ModelRequest], list[ModelRequest]]:
        """Of requests the cache did not answer: those this step is to send, and those
        another run claimed, to wait for. One stored meanwhile is taken as a hit."""
        if self._claims is None or not missing:
            return list(missing), []
        if self._renewal is None:
            self._renewal = Renewal(self._claims).__enter__()
        held = self._claims.claim([r.key for r in missing])
        waiting = [r for r in missing if r.key not in held]
        send = _not_stored_since(
            self._cache, [r for r in missing if r.key in held], result, listener
        )
        return send, waiting

    def poll(
        self,
        pending: dict[str, ModelRequest],
        result: "Responses",
        listener: "ResponseListener | None" = None,
    ) -> list[ModelRequest]:
        """One look at requests another run claimed (`pending`, by key): the answers stored
        since are taken (and leave `pending`), and those whose claim this step could take
        (lapsed, or released unanswered) leave it too, returned for this step to send."""
        assert self._claims is not None, "nothing is waited for without claims"
        stored = self._cache.lookup(list(pending))
        _take_stored(stored, result, listener)
        for key in stored:
            del pending[key]
        if not pending:
            return []
        taken = self._claims.claim(list(pending))
        return _not_stored_since(
            self._cache, [pending.pop(k) for k in sorted(taken)], result, listener
        )

    def wait(
        self,
        waiting: Sequence[ModelRequest],
        backend: Backend,
        result: "Responses",
        listener: "ResponseListener | None",
        on_result: OnResult,
        report: Callable[[], None] | None = None,
    ) -> None:
        """Until every request of `waiting` has an answer (another run's, or this step's
        call for one whose claim it took over); `report` is called when answers were
        taken (the step's progress)."""
        pending = {r.key: r for r in waiting}
        while pending:
            before = len(result.responses)
            send = self.poll(pending, result, listener)
            if report is not None and len(result.responses) != before:
                report()
            if send:
                with live_requests(send) as live:
                    backend.run(live, on_result)
            elif pending:
                time.sleep(POLL_S)

    def send(
        self,
        missing: Sequence[ModelRequest],
        backend: Backend,
        result: "Responses",
        on_result: OnResult,
        listener: "ResponseListener | None" = None,
    ) -> None:
        """`missing` answered: this step's claims sent, the others' waited for."""
        send, waiting = self.split(missing, result, listener)
        if send:
            with live_requests(send) as live:
                backend.run(live, on_result)
        if waiting:
            self.wait(waiting, backend, result, listener, on_result)

    def settled(self, request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
        """A call of this step ended (every sending step's `on_result` says so): a failed
        one's claim is released now, by the renewal's thread (no answer will be stored, so
        holding it would only keep a waiting run from sending it); an answered one's is
        kept until `close`, after its writer stored the answer."""
        if isinstance(outcome, ProviderError) and self._renewal is not None:
            self._renewal.release(request.key)

    def close(self) -> None:
        """The step is over and its answers stored: its claims go (if it took any)."""
        if self._renewal is None:
            return
        self._renewal.__exit__(None, None, None)
        self._renewal = None
        assert self._claims is not None
        self._claims.release()


def _not_stored_since(
    cache: Cache,
    claimed: list[ModelRequest],
    result: "Responses",
    listener: "ResponseListener | None",
) -> list[ModelRequest]:
    """Of requests just claimed, those still to send: another run may have stored one
    between this step's lookup and its claim (then released it), and it is taken as that
    run's answer (a cache hit here)."""
    if not claimed:
        return claimed
    stored = cache.lookup([r.key for r in claimed])
    _take_stored(stored, result, listener)
    return [r for r in claimed if r.key not in stored]


def _take_stored(
    stored: dict[str, ModelResponse], result: "Responses", listener: "ResponseListener | None"
) -> None:
    for key, response in stored.items():
        result.responses[key] = response
        result.cache_hits.add(key)
        if listener is not None:
            listener.on_response(key, response, True)
