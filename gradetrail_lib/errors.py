"""Errors that point at the file, line and field a user has to fix."""

import errno
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError

# Where pydantic found an error: keys and list indexes, outermost first.
Loc = tuple[int | str, ...]


class GradetrailError(Exception):
    """Base class for errors reported to the user without a traceback."""


class InputError(GradetrailError):
    """Bad input in a spec or dataset file: `path:line: field: message`."""

    def __init__(self, path: str, line: int | None, field: str | None, message: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.message = message
        where = path if line is None else f"{path}:{line}"
        what = f"{field}: {message}" if field else message
        super().__init__(f"{where}: {what}")


class InputErrors(GradetrailError):
    """Several input errors found in one pass, reported together, one per line."""

    def __init__(self, errors: list[InputError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def one_or_all(errors: list[InputError]) -> InputError | InputErrors:
    """What to raise for errors found together: the one, or all of them."""
    return errors[0] if len(errors) == 1 else InputErrors(errors)


def first_of(errors: list[InputError]) -> InputError:
    """The first error, saying how many more there are: `... (and 2 more)`."""
    first = errors[0]
    if len(errors) == 1:
        return first
    more = f" (and {len(errors) - 1} more)"
    return InputError(first.path, first.line, first.field, first.message + more)


def dotted(loc: Loc) -> str:
    """A field as pydantic's `loc`, its parts joined with dots: `scorers.0.pattern`."""
    return ".".join(str(p) for p in loc)


def indexed(loc: Loc) -> str:
    """A field as code would name it, list indexes in brackets: `scorers[0].pattern`."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


# A `loc`'s field, as the user wrote it, and its line.
Locate = Callable[[Loc], tuple[str, int | None]]


def on_line(line: int | None, name: Callable[[Loc], str] = dotted) -> Locate:
    """Every field on one line (a JSON record's), named by `name`."""
    return lambda loc: (name(loc), line)


# A field where pydantic puts it, no line (an object in memory).
NOWHERE = on_line(None)


# pydantic's error types put in a file's own words: a spec file's (YAML keys)...
KEY_WORDS: Mapping[str, str] = {"extra_forbidden": "unknown key"}
# ...and a JSON record's (a results.jsonl line, a history entry); other errors keep
# pydantic's message.
FIELD_WORDS: Mapping[str, str] = {
    "extra_forbidden": "unknown field",
    "unexpected_keyword_argument": "unknown field",
    "missing": "missing",
    "missing_argument": "missing",
}


def input_errors(
    exc: "ValidationError",
    file: str,
    locate: Locate = NOWHERE,
    *,
    words: Mapping[str, str] = KEY_WORDS,
) -> list[InputError]:
    """pydantic's errors as `file:line: field: message`, in pydantic's order. `locate`
    gives a `loc`'s field, as the user wrote it, and its line (by default: `dotted`, no
    line). A message is pydantic's, less the "Value error, " it puts before a
    validator's ValueError, or the entry of its error type in `words`."""
    errors = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        field, line = locate(loc)
        message = words.get(error["type"], str(error["msg"]).removeprefix("Value error, "))
        errors.append(InputError(file, line, field or None, message))
    return errors


class UsageError(GradetrailError):
    """A setting or flag that cannot work (exit status 2, like bad input)."""


class UnknownModel(UsageError):
    """A model name (e.g. `--model`) that the spec neither lists nor matches by `watch`."""


class RunAborted(GradetrailError):
    """The run stopped early, e.g. after repeated identical fatal provider errors."""


class NotComparable(GradetrailError):
    """Two result sets cannot be paired: different samples, scorer or dataset."""


# A full device (ENOSPC) or a spent quota (EDQUOT): the user frees space, nothing to fix.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_full(exc: BaseException) -> OSError | None:
    """The OSError ENOSPC or EDQUOT that `exc` is, was raised from or while handling, or
    groups (an ExceptionGroup's members); None when there is none. Writing a file raises
    again when the file is closed, so the error that reaches the top is often the close's,
    the write's in its context."""
    pending, seen = [exc], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_FULL_ERRNOS:
            return current
        if isinstance(current, BaseExceptionGroup):
            pending += current.exceptions
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]
    return None


def disk_full_message(error: OSError, destination: object | None) -> str:
    """One line: what (`no space left on device`, `disk quota exceeded`) and where: the
    file when the error names one (opening it, renaming it), else `destination`, where
    the command writes (a write to an open file names none)."""
    what = os.strerror(error.errno or errno.ENOSPC)
    what = what[:1].lower() + what[1:]
    where = error.filename if error.filename is not None else destination
    if where is None:
        return f"{what}; free some space and run again"
    return f"{what} writing to {where}; free some space there and run again"
