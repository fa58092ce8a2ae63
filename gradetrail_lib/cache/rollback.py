"""Rolling a transaction back after an exception without hiding that exception."""

import contextlib
from typing import Protocol


class _Executes(Protocol):
    def execute(self, sql: str, /) -> object: ...


def roll_back(connection: _Executes) -> None:
    """ROLLBACK after an exception, which the caller raises again as it came. A ROLLBACK
    that fails must not put its own error in its place: a Ctrl-C often lands just after
    COMMIT ended the transaction, and then "no transaction is active" took the place of
    the interrupt (exit 1 and a traceback, not the CLI's "interrupted" and 130)."""
    with contextlib.suppress(Exception):
        connection.execute("ROLLBACK")
