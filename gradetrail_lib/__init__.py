"""gradetrail engine: specs, request keys, providers, cache, scorers and run directories.

This package never imports Dagster; `gradetrail_assets` builds the asset graph on top of it.
The public API: `run_spec` (what `gradetrail run` does: a spec file, a folder of specs,
or a spec in memory, so a Python file can be a code-first eval with its own scorers) and
`load_run` (a run directory's manifest and its trace records, see `gradetrail_lib.results.trace`).
"""

from typing import TYPE_CHECKING, Any

from gradetrail_lib._version import __version__ as __version__  # re-exported

__all__ = ["load_run", "run_spec"]

if TYPE_CHECKING:
    from gradetrail_lib.engine.run import run_spec
    from gradetrail_lib.results.runs import load_run


def __getattr__(name: str) -> Any:
    # Lazily: `gradetrail --version` and every submodule import this package first.
    if name == "run_spec":
        from gradetrail_lib.engine.run import run_spec

        return run_spec
    if name == "load_run":
        from gradetrail_lib.results.runs import load_run

        return load_run
    raise AttributeError(f"module 'gradetrail_lib' has no attribute {name!r}")
