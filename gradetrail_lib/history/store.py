"""Which store holds the run history: the file under the results root, or a Postgres
table (`postgres`). Apart from both stores, so that neither imports the other."""

from pathlib import Path

from gradetrail_lib.cache.location import store_location
from gradetrail_lib.history.entries import FileHistory, HistoryStore
from gradetrail_lib.history.postgres import PostgresHistory


def open_history(results_root: Path, *, store: str | None, cache: str | Path) -> HistoryStore:
    """The history of runs under `results_root`: in Postgres when `store` (a URL, or
    `local`) or else the cache location `cache` says so (`store_location`), else the
    file under the root. A Postgres store is reached (its table made) here, so a wrong
    URL fails before a run starts."""
    location = store_location(store, cache)
    if location is None:
        return FileHistory(results_root)
    return PostgresHistory(location.url or "", where=location.where, results_root=results_root)
