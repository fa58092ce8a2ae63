"""What the engine asks of a response cache: answers by request key, and a writer that
stores each new answer as it arrives. Three kinds satisfy it: the DuckDB file shared by
every run on a machine (`responses.ResponseCache`), a Postgres database shared by a team
(`postgres.PostgresCache`; `location.open_cache` opens either from `--cache`), and a
run's own answers in memory (`memory.MemoryCache`, what a run without a cache uses).

What a run by batch and the code scorer need are part of the interface too: the batch
records (`batch_store`) and the execution cache (`exec_cache`), which only a kept cache
has (a run's memory returns None for both), so nothing asks which cache it was given.
The two kept caches also give whole rows out and take them in (`read_rows`,
`write_rows`: bundles).

Either way a run sends a request key at most once: a later batch (or a judge's later
call) finds in the cache what an earlier one sent."""

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from gradetrail_lib.providers.base import ModelRequest, ModelResponse

if TYPE_CHECKING:
    from gradetrail_lib.cache.batches import BatchStore
    from gradetrail_lib.cache.claims import Claims
    from gradetrail_lib.cache.executions import Executions


class Writer(Protocol):
    def put(self, request: ModelRequest, response: ModelResponse) -> None:
        """A successful answer, stored (at once or soon: a lookup after the writer is
        closed finds it)."""
        ...

    def finish(self) -> None:
        """No more answers will come: store what is waiting without delay."""
        ...


class Cache(Protocol):
    @property
    def location(self) -> str | None:
        """Where the answers are kept, as a run's manifest records it (a file's absolute
        path, a URL without its password); None: nowhere past the run."""
        ...

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

    def batch_store(self) -> "BatchStore | None":
        """Where provider batches are recorded beside the answers (a run by batch claims
        its keys there, so a killed run never pays twice); None: this cache keeps
        nothing past the run."""
        ...

    def claims(self) -> "Claims | None":
        """Claims on the requests a run is about to send, so that runs sharing the cache
        pay for each once (`claims.Claims`); None: this cache offers none."""
        ...

    def exec_cache(self) -> "Executions | None":
        """Program executions by key (the code scorer's, an agent's builtin tools'), so a
        re-score runs no program again; None: this cache keeps none."""
        ...
