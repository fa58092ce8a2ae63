"""Runs of one spec on one cache started at one moment, some in processes of their own
and some in threads of the test's process: how the tests of runs that share a cache
(claims, many writers) start them."""

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from gradetrail_lib import run_spec
from tests.support.threads import InThread


def run_span(results_root: Path) -> tuple[datetime, datetime]:
    """When the run under `results_root` started and finished (its manifest)."""
    (run_dir,) = [p for p in results_root.iterdir() if not p.name.startswith(".")]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return (
        datetime.fromisoformat(manifest["started_at"]),
        datetime.fromisoformat(manifest["finished_at"]),
    )


# `gradetrail run` in a process of its own that makes its imports (a second or more of
# CPU) first, says so, and starts when told, so that the processes and the threads of a
# test start their runs at one moment.
GATED_CLI = """
import sys
from gradetrail_lib.cli import main
print("ready", flush=True)
sys.stdin.readline()
sys.exit(main())
"""


def run_together(
    spec: Path, tmp_path: Path, location: str, processes: int, threads: int, concurrency: int = 8
) -> None:
    """`processes` CLI runs and `threads` in-process runs (`run_spec`) of `spec` on the
    cache at `location`, started at one moment (the threads once every process is ready),
    each under `tmp_path / r<i>`; each must succeed. A thread needs no process of its own
    (the claims are an owner's, one per run and step), and no start-up; the processes
    keep the runs of separate processes, as on a shared machine."""
    command = [sys.executable, "-c", GATED_CLI, "run", str(spec), "--concurrency", str(concurrency)]
    env = {**os.environ, "GRADETRAIL_CACHE": location}
    started = [
        subprocess.Popen(
            [*command, "--results", str(tmp_path / f"r{i}")],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    for proc in started:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.communicate()
    for proc in started:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    in_threads = [
        InThread(
            run_spec,
            spec,
            results_root=tmp_path / f"r{processes + i}",
            cache=location,
            concurrency=concurrency,
        )
        for i in range(threads)
    ]
    for proc in started:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    for run in in_threads:
        run.join(240)
