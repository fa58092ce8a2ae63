"""Runs of one spec on one cache started at one moment, some in processes of their own
and some in threads of the test's process: how the tests of runs that share a cache
(claims, many writers) start them."""

import json
from datetime import datetime
from pathlib import Path

from gradetrail_lib import run_spec
from tests.conftest import release, start_cli_process
from tests.support.threads import InThread


def run_span(results_root: Path) -> tuple[datetime, datetime]:
    """When the run under `results_root` started and finished (its manifest)."""
    (run_dir,) = [p for p in results_root.iterdir() if not p.name.startswith(".")]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    return (
        datetime.fromisoformat(manifest["started_at"]),
        datetime.fromisoformat(manifest["finished_at"]),
    )


def run_together(
    spec: Path, tmp_path: Path, location: str, processes: int, threads: int, concurrency: int = 8
) -> None:
    """`processes` CLI runs and `threads` in-process runs (`run_spec`) of `spec` on the
    cache at `location`, started at one moment (the threads once every process is ready),
    each under `tmp_path / r<i>`; each must succeed. A thread needs no process of its own
    (the claims are an owner's, one per run and step), and no start-up; the processes
    keep the runs of separate processes, as on a shared machine."""
    started = [
        start_cli_process(
            "run",
            str(spec),
            "--concurrency",
            str(concurrency),
            "--results",
            str(tmp_path / f"r{i}"),
            cwd=tmp_path,
            env={"GRADETRAIL_CACHE": location},
            gated=True,
        )  # fmt: skip
        for i in range(processes)
    ]
    release(started)
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
