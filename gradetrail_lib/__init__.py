"""gradetrail: LLM evals as tests. This module is the public API; every name in `__all__`
is importable from here and stays where it is.

`run_spec` does what `gradetrail run` does (a spec file, a folder of specs, or a spec in
memory, so a Python file can be a code-first eval with its own scorers) and returns each
model's `CompletedRun`; `load_run` reads a run directory back (its `Manifest` and its
`TraceRecord`s, streamed). `Spec`, `ModelConfig` and `Params` build a spec in Python;
`InputError` is what bad input raises, naming its file, line and field. `samples_needed`
says how many samples (`SampleSize`) a paired comparison on a spec needs to detect a
difference of pass rates, as `gradetrail plan --detect` prints it.

Names are loaded on first use, so `import gradetrail_lib` (and `gradetrail --version`)
stays cheap; this package never imports Dagster.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from gradetrail_lib._version import __version__ as __version__

if TYPE_CHECKING:
    from gradetrail_lib.analysis.sample_size import SampleSize
    from gradetrail_lib.config import Params
    from gradetrail_lib.engine.api import run_spec, samples_needed
    from gradetrail_lib.engine.run import CompletedRun
    from gradetrail_lib.errors import InputError
    from gradetrail_lib.providers.registry import ModelConfig
    from gradetrail_lib.results.runs import Run, load_run
    from gradetrail_lib.results.trace import Manifest, TraceRecord
    from gradetrail_lib.spec.spec import Spec

# Each public name and the module that defines it.
_HOMES = {
    "CompletedRun": "gradetrail_lib.engine.run",
    "InputError": "gradetrail_lib.errors",
    "Manifest": "gradetrail_lib.results.trace",
    "ModelConfig": "gradetrail_lib.providers.registry",
    "Params": "gradetrail_lib.config",
    "Run": "gradetrail_lib.results.runs",
    "SampleSize": "gradetrail_lib.analysis.sample_size",
    "Spec": "gradetrail_lib.spec.spec",
    "TraceRecord": "gradetrail_lib.results.trace",
    "load_run": "gradetrail_lib.results.runs",
    "run_spec": "gradetrail_lib.engine.api",
    "samples_needed": "gradetrail_lib.engine.api",
}

__all__ = [
    "CompletedRun",
    "InputError",
    "Manifest",
    "ModelConfig",
    "Params",
    "Run",
    "SampleSize",
    "Spec",
    "TraceRecord",
    "load_run",
    "run_spec",
    "samples_needed",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'gradetrail_lib' has no attribute {name!r}")
    return getattr(import_module(home), name)
