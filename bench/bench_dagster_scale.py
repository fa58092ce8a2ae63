"""Benchmark of a Dagster partition at scale: peak memory (not a test: prints figures).

    .venv/bin/python -m bench.bench_dagster_scale [--n 100000] [--executor in_process]

A spec of n samples against a loopback fake server answering at once (latency 0,
concurrency 64): its partition's dataset → responses → scores → stats → report materialized from
the definitions `dagster dev` loads (`gradetrail_assets.definitions:defs`, configured by
GRADETRAIL_* variables) on a Dagster instance in a temporary folder, cold and then fully
cached (the same instance, cache and tables), each time in a child process:

* `in_process` (default): the job's `execute_in_process`, every step in that one
  process, as the tests run them;
* `multiprocess`: `dagster asset materialize`, Dagster's default executor, a process per
  step as a deployment runs them (the peak is the largest step's).

Printed: the child's peak resident memory (its rusage from wait4, which covers the step
processes it waited for) against the CLI's target for a run of that size (<= 300 MB,
`bench/bench_scale.py`), its wall time, and the provider calls and cache hits the
responses asset recorded (the cached materialization must send none).

The fake server runs in its own process, so its memory is not counted.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_pipeline import REPO, start_server
from tests.conftest import write_addition_dataset, write_spec

MB = 1024 * 1024
MODEL = "fake-1"
STEPS = ("dataset", "responses", "scores", "stats", "report")
TARGET_MB = 300
EXECUTORS = ("in_process", "multiprocess")


def child(project: Path) -> None:
    """Materialize the partition's steps in this process (DAGSTER_HOME is the instance)."""
    import dagster as dg

    from gradetrail_assets.definitions import defs

    with dg.instance_for_test(temp_dir=os.environ["DAGSTER_HOME"]) as instance:
        result = defs.resolve_job_def("add__eval").execute_in_process(
            instance=instance,
            partition_key=MODEL,
            asset_selection=[dg.AssetKey(["add", step]) for step in STEPS],
            resources={"io_manager": dg.FilesystemIOManager(base_dir=str(project / "storage"))},
        )
    if not result.success:
        raise SystemExit("the materialization failed")


def environment(project: Path, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DAGSTER_HOME": str(home),
        "GRADETRAIL_SPECS": str(project / "specs"),
        "GRADETRAIL_CACHE": str(project / "gradetrail.duckdb"),
        "GRADETRAIL_RESULTS": str(project / "results"),
        "GRADETRAIL_CONCURRENCY": "64",
    }


def measured(project: Path, home: Path, executor: str) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of one child process and those it waited for."""
    if executor == "in_process":
        args = [sys.executable, "-m", "bench.bench_dagster_scale", "--child", str(project)]
    else:
        args = [
            str(Path(sys.executable).parent / "dagster"), "asset", "materialize",
            "-m", "gradetrail_assets.definitions", "--partition", MODEL,
            "--select", ",".join(f"add/{step}" for step in STEPS),
        ]  # fmt: skip
    log = project / "child.log"
    started = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(
            args, cwd=project, env=environment(project, home), stdout=out, stderr=out
        )
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the child failed: {log.read_text()[-3000:]}")
    return wall, usage.ru_maxrss * 1024


def recorded(home: Path) -> dict[str, object]:
    """The latest materializations' figures: responses' calls and cache hits, stats' n."""
    import dagster as dg

    figures: dict[str, object] = {}
    with dg.instance_for_test(temp_dir=str(home)) as instance:
        for step, names in (("responses", ("provider_calls", "cache_hits")), ("stats", ("n",))):
            found = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(["add", step])), limit=1
            ).records
            event = found[0].asset_materialization if found else None
            assert event is not None, f"no materialization of {step}"
            figures.update({name: event.metadata[name].value for name in names})
    return figures


def prepare(project: Path, home: Path, n: int, url: str) -> None:
    specs = project / "specs"
    specs.mkdir(parents=True)
    write_addition_dataset(specs / "data" / "add.jsonl", n)
    write_spec(specs / "add.yaml", base_url=url, model=MODEL)
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    import dagster as dg

    with dg.instance_for_test(temp_dir=str(home)) as instance:
        instance.add_dynamic_partitions("add__models", [MODEL])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--executor", choices=EXECUTORS, default="in_process")
    parser.add_argument("--child", metavar="PROJECT", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server, url = start_server(0.0, root)
        try:
            project, home = root / "project", root / "dagster_home"
            prepare(project, home, args.n, url)
            print(
                f"n={args.n}, {args.executor}: dataset → responses → scores → stats → report "
                "of one partition"
            )
            for label, calls in (("cold", args.n), ("cached", 0)):
                wall, rss = measured(project, home, args.executor)
                figures = recorded(home)
                if figures["provider_calls"] != calls or figures["n"] != args.n:
                    raise RuntimeError(f"the {label} materialization recorded {figures}")
                print(
                    f"  {label + ':':7} peak RSS {rss / MB:.0f} MB (target <= {TARGET_MB}); "
                    f"wall {wall:.1f} s; provider calls {figures['provider_calls']}, "
                    f"cache hits {figures['cache_hits']}"
                )
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
