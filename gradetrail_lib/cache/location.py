"""Where a cache lives: the one place a cache location (`--cache`, `GRADETRAIL_CACHE`, the
Dagster resource's `database`) is read and opened.

A location is a path (the DuckDB file; the default) or a URL of a scheme listed in
`SCHEMES` (`postgresql://user@host:5432/db`: `postgres.PostgresCache`). Any other
`scheme://` is refused before anything is written: a typo such as `postgressql://` or an
engine gradetrail does not speak must not become a folder named `postgressql:` with a
DuckDB file in it.

A URL may carry a password; it never reaches a message, a log line or a file: `redact`
gives the form that may (`where`). The password is better kept out of the URL altogether,
in libpq's `PGPASSWORD` or `~/.pgpass`, which psycopg reads.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gradetrail_lib.cache.responses import ResponseCache
from gradetrail_lib.cache.urls import redact
from gradetrail_lib.errors import UsageError
from gradetrail_lib.settings import Settings

if TYPE_CHECKING:
    from gradetrail_lib.cache.postgres import PostgresCache

# The URL schemes of a cache location, and the engine of each.
SCHEMES = {"postgresql": "postgres", "postgres": "postgres"}

# `scheme://` as RFC 3986 spells a scheme; a Windows drive (`C:\...`) has no `//`.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True, kw_only=True)
class CacheLocation:
    """A parsed location: a DuckDB file (`path`) or a Postgres URL (`url`)."""

    path: Path | None = None
    url: str | None = None

    @property
    def where(self) -> str:
        """The location as messages name it: the path, or the URL without a password."""
        return str(self.path) if self.path is not None else redact(self.url or "")

    @property
    def is_file(self) -> bool:
        return self.path is not None


_A_CACHE = "a cache is a file path (DuckDB) or a URL of a known scheme"


def parse_location(
    text: str | Path, what: str = "cache location", expected: str = _A_CACHE
) -> CacheLocation:
    """A location from its text; raises UsageError for a scheme not in `SCHEMES` (the
    message calls the text `what` and says what is `expected`)."""
    if isinstance(text, Path):
        return CacheLocation(path=text)
    found = _SCHEME.match(text)
    if found is None:
        return CacheLocation(path=Path(text))
    scheme = found.group(1).lower()
    if scheme not in SCHEMES:
        accepted = ", ".join(f"{s}://" for s in SCHEMES)
        raise UsageError(
            f"{what} {redact(text)!r}: unknown scheme {scheme!r}; {expected} ({accepted})"
        )
    return CacheLocation(url=text)


def default_cache_location() -> str:
    """`GRADETRAIL_CACHE`, else the project's DuckDB file (relative to the working
    directory)."""
    return Settings.from_environment(only=("database",)).database


# `GRADETRAIL_STORE`'s value that keeps the history and the tables on this machine.
LOCAL_STORE = "local"


def store_location(store: str | None, cache: str | Path) -> CacheLocation | None:
    """Where the run history and Dagster's `scores`/`stats` tables live: the one place
    this is decided. `store` (`GRADETRAIL_STORE`) is a postgresql:// URL, or `local`;
    unset, the cache's database when the cache (`cache`) is a URL, so that a team
    sharing a cache shares its history too. None is local: the history file under the
    results root and the tables in the DuckDB file. A store that is a path is refused:
    a history file lives under its results root, and the tables in the cache's file."""
    if store is None or not store.strip():
        location = parse_location(cache)
        return None if location.is_file else location
    if store.strip() == LOCAL_STORE:
        return None
    expected = f"a store is {LOCAL_STORE!r} or a URL of a known scheme"
    location = parse_location(store, what="GRADETRAIL_STORE", expected=expected)
    if location.is_file:
        raise UsageError(
            f"GRADETRAIL_STORE {store!r}: a store is a postgresql:// URL, or "
            f"{LOCAL_STORE!r} (the history under the results root, the tables in the "
            "DuckDB file); unset, it follows the cache"
        )
    return location


def open_cache(location: str | Path | CacheLocation) -> "ResponseCache | PostgresCache":
    """The cache at `location`, its tables made on first use (nothing is created for a
    refused location). A Postgres URL needs the `postgres` extra."""
    parsed = location if isinstance(location, CacheLocation) else parse_location(location)
    if parsed.path is not None:
        return ResponseCache(parsed.path)
    from gradetrail_lib.cache.postgres import PostgresCache

    return PostgresCache(parsed.url or "", where=parsed.where)


def existing_cache(location: str | Path) -> "ResponseCache | PostgresCache | None":
    """The cache at `location` if there is one: a DuckDB file that exists, or a Postgres
    database (which is reached, so a wrong URL is an error, not an empty cache). For
    commands that only read, so that a mistyped path creates nothing."""
    parsed = parse_location(location)
    if parsed.path is not None and not parsed.path.exists():
        return None
    return open_cache(parsed)
