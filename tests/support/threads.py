"""A call run in a thread of the test's own process, its exception kept for `join`: how a
test runs one of several runs at once when that run needs no process of its own (its
imports are made already, so it starts at once instead of after a second's start-up)."""

import threading
from collections.abc import Callable
from typing import Any


class InThread:
    """`target(*args, **kwargs)` started now in a thread of this process."""

    def __init__(self, target: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.error: BaseException | None = None

        def call() -> None:
            try:
                target(*args, **kwargs)
            except BaseException as exc:  # raised again by join, in the test's thread
                self.error = exc

        self._thread = threading.Thread(target=call, daemon=True)
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        """Waits for the call to end (at most `timeout` seconds) and raises what it raised."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"still running after {timeout:g}s"
        if self.error is not None:
            raise self.error
