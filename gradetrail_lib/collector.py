"""Pausing Python's cyclic garbage collector while a run computes without waiting.

A batch the cache answers whole allocates a few objects a sample (request, response,
record) that live until the batch is written: ~100,000 objects at once, which the
collector traverses again and again as they age, ~8 % of a fully cached run's time
(docs/performance.md). Reference counting still frees everything a batch drops; what
the collector alone finds (reference cycles, which a run's data does not make) waits
until it runs again, which it does while a run waits for a provider.
"""

import gc


class CollectorPause:
    """`pause()` and `resume()` the collector, each any number of times; `resume()` in
    the end leaves it as it was found (a host that disabled it keeps it disabled)."""

    def __init__(self) -> None:
        self._was_enabled = gc.isenabled()

    def pause(self) -> None:
        gc.disable()

    def resume(self) -> None:
        if self._was_enabled:
            gc.enable()
