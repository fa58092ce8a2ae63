"""What the engine asks of a response cache: answers by request key, and a writer that
stores each new answer as it arrives. Two kinds satisfy it: the DuckDB file shared by
every run (`responses.ResponseCache`), and a run's own answers in memory
(`memory.MemoryCache`, what a run without the file uses).

Either way a run sends a request key at most once: a later batch (or a judge's later
call) finds in the cache what an earlier one sent."""

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from gradetrail_lib.providers.base import ModelRequest, ModelResponse


class Writer(Protocol):
    def put(self, request: ModelRequest, response: ModelResponse) -> None:
        """A successful answer, stored (at once or soon: a lookup after the writer is
        closed finds it)."""
        ...

    def finish(self) -> None:
        """No more answers will come: store what is waiting without delay."""
        ...


class Cache(Protocol):
    def lookup(self, keys: Sequence[str]) -> dict[str, ModelResponse]:
        """The stored answers of `keys`, by key (without the provider's raw body)."""
        ...

    def cached_keys(self, keys: Sequence[str]) -> set[str]:
        """Which of `keys` are stored (without reading the answers)."""
        ...

    def count(self) -> int:
        """Distinct request keys stored."""
        ...

    def writer(self) -> AbstractContextManager[Writer]:
        """A writer for the answers of one step; what it took is stored by its exit."""
        ...
