"""Errors that point at the file, line and field a user has to fix."""


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


class UsageError(GradetrailError):
    """A setting or flag that cannot work (exit status 2, like bad input)."""


class UnknownModel(UsageError):
    """A model name (e.g. `--model`) that the spec neither lists nor matches by `watch`."""


class RunAborted(GradetrailError):
    """The run stopped early, e.g. after repeated identical fatal provider errors."""


class NotComparable(GradetrailError):
    """Two result sets cannot be paired: different samples, scorer or dataset."""
