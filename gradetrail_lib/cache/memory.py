"""A run's own answers in memory: the cache of a run that neither reads nor writes the
cache file (`gradetrail run --no-cache`, `run_spec(read_cache=False)`).

It starts empty and holds what the run sends, so a request key is still sent at most
once in the run (a later batch, or a judge's later call, finds the answer here), and
nothing touches the file. The provider's raw body is not kept: only the file keeps it,
for audit, and here it would be most of what a cold run holds."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from gradetrail_lib.providers.base import ModelRequest, ModelResponse


class MemoryCache:
    location = None  # nothing is kept past the run

    def __init__(self) -> None:
        self._responses: dict[str, ModelResponse] = {}

    def lookup(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        held = self._responses
        return {key: held[key] for key in keys if key in held}

    def cached_keys(self, keys: Sequence[str]) -> set[str]:
        return {key for key in keys if key in self._responses}

    def count(self) -> int:
        return len(self._responses)

    @contextmanager
    def writer(self) -> Iterator["MemoryWriter"]:
        yield MemoryWriter(self._responses)

    def batch_store(self) -> None:
        return None  # nothing outlives the run: a batch would be paid again after a kill

    def exec_cache(self) -> None:
        return None

    def claims(self) -> None:
        return None  # one run's own answers: nobody else to pay twice


class MemoryWriter:
    """Stores each answer at once (the sending thread's and the judges' alike: one dict
    assignment, atomic under the GIL). The first answer of a key stays, as in the file."""

    def __init__(self, responses: dict[str, ModelResponse]) -> None:
        self._responses = responses

    def put(self, request: ModelRequest, response: ModelResponse) -> None:
        self._responses.setdefault(request.key, replace(response, raw={}))

    def finish(self) -> None:
        pass
