"""Pausing Python's cyclic garbage collector while a run computes without waiting.

A batch the cache answers whole allocates a few objects a sample (request, response,
record) that live until the batch is written: ~100,000 objects at once, which the
collector traverses again and again as they age, ~8 % of a fully cached run's time
(docs/performance.md). Reference counting still frees everything a batch drops; what
the collector alone finds (reference cycles, which a run's data does not make) waits
until it runs again, which it does while a run waits for a provider.
"""

import gc
import threading

# The pauses in force, process-wide (runs in two threads pause and resume in any order),
# and whether the collector ran before the first of them.
_LOCK = threading.Lock()
_PAUSING: set[int] = set()
_STATE = {"was_enabled": True}


class CollectorPause:
    """One run's pause: `pause()` and `resume()` any number of times, in any thread. The
    collector runs again when no pause is in force, and only if it ran before the first
    (a host that disabled it keeps it disabled)."""

    def pause(self) -> None:
        with _LOCK:
            if not _PAUSING:
                _STATE["was_enabled"] = gc.isenabled()
            _PAUSING.add(id(self))
            gc.disable()

    def resume(self) -> None:
        with _LOCK:
            if id(self) not in _PAUSING:
                return
            _PAUSING.discard(id(self))
            if not _PAUSING and _STATE["was_enabled"]:
                gc.enable()
