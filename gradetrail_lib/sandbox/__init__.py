"""Running untrusted programs: bubblewrap with no network, an empty environment, the
interpreter and its standard library bound read-only, a fresh tmpfs working directory,
rlimits and a wall-clock timeout (see `run`)."""

from gradetrail_lib.sandbox.run import (
    LANGUAGES,
    Execution,
    Language,
    Limits,
    SandboxMode,
    SandboxUnavailable,
    bwrap_problem,
    run_program,
)

__all__ = [
    "LANGUAGES",
    "Execution",
    "Language",
    "Limits",
    "SandboxMode",
    "SandboxUnavailable",
    "bwrap_problem",
    "run_program",
]
