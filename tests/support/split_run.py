"""A run with `split` in a fresh process, as `gradetrail run` makes it (one thread, no test
harness around it), with small batches so that a small dataset is cut in two:

    python -m tests.support.split_run SPEC CACHE RESULTS BATCH [--kill-fork] [--one-core]

`--kill-fork` kills the fork as it starts its half; `--one-core` runs on one core (no
fork). Prints one JSON object: the run directory, the manifest's execution, the target
calls and the history's fingerprint; or, exiting 2, the input errors.
"""

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from gradetrail_lib import run as run_module
from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.cache import ResponseCache
from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.pipeline import plan
from gradetrail_lib.spec import load_spec


def _killed(*_args: Any) -> Any:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    spec, cache, results, batch, *flags = sys.argv[1:]
    if "--kill-fork" in flags:
        run_module._replay = _killed  # type: ignore[assignment]
    if "--one-core" in flags:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    loaded = load_spec(Path(spec))
    deferred = plan(loaded, loaded.spec.models[0], defer_check=True)
    try:
        done = run_module.run_model(
            deferred, ResponseCache(Path(cache)), LocalBackend(), Path(results),
            batch_samples=int(batch), split=True,
        )  # fmt: skip
    except (InputError, InputErrors) as exc:
        errors = exc.errors if isinstance(exc, InputErrors) else [exc]
        print(json.dumps({"errors": [str(e) for e in errors]}))
        return 2
    manifest = done.manifest
    print(
        json.dumps(
            {
                "run_dir": str(done.run_dir),
                "execution": manifest.execution,
                "calls": manifest.target.calls,
                "cache_hits": manifest.target.cache_hits,
                "fingerprint": done.history.fingerprint,
                "scores": manifest.model_dump(mode="json")["scores"],
                "outcomes": manifest.outcomes,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
