"""Benchmark of a run at scale: memory and the warm path (not a test: prints figures).

    .venv/bin/python -m bench.bench_scale [--n 100000] [--big 1000000] [--rounds 3]

1. A cold run of n samples against a loopback fake server answering at once (latency 0,
   concurrency 64), then a fully cached re-run of it: the peak resident memory of the
   `gradetrail run` process (its high-water mark, /proc's VmHWM, read as it runs).
   Target: <= 300 MB each run.
2. The fully cached re-run's wall time past a bare `gradetrail --version` measured in
   the same rounds (medians of `rounds`), zero provider calls, reported beside
   `bench/bare_replay.py`: the least a cached re-run can do in one process of Python
   (read, render, key, look up, score, write a line a sample, nothing else), the floor
   the run's figure is measured against. No target: a ratio to watch.
3. The readers of the cached run: `gradetrail report` of it and `gradetrail compare` of
   it with a copy of itself, their peak memory. Target: <= 300 MB each, as the run's.
4. With --big N: a cold then a fully cached run of N samples (default 1,000,000); the
   cached run's peak memory over the n-sample cached run's. Target: <= 1.5x.

The fake server runs in its own process, so its memory is not counted.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.bench_pipeline import REPO, manifest_of, start_server
from tests.conftest import write_addition_dataset, write_spec

GRADETRAIL = [sys.executable, "-m", "gradetrail_lib.cli"]
MB = 1024 * 1024


def measured(args: list[str], cwd: Path) -> tuple[float, int, str]:
    """(wall seconds, peak RSS bytes, stdout) of one process."""
    wall, peaks, stdout = measured_tree(args, cwd)
    return wall, peaks[0], stdout


def _peak_rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _comm(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    """The process's children that run what it runs (its forks; not the `git` it asks for
    the manifest)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listed:
            children = [int(p) for p in listed.read().split()]
    except OSError:
        return []
    own = _comm(pid)
    return [child for child in children if _comm(child) == own]


def measured_tree(args: list[str], cwd: Path) -> tuple[float, list[int], str]:
    """(wall seconds, peak RSS bytes of the process then of each child it had, stdout):
    each one's high-water mark, read every 10 ms while it runs (a last rise just before
    it exits may be missed), the process's own at least its rusage's (wait4: the most of
    its own and its waited-for children's, so no more than that when it had one)."""
    started = time.perf_counter()
    peaks: dict[int, int] = {}
    # The command's output goes to files of their own, never into the working directory.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=err)
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.01):
                for pid in [child.pid, *_children(child.pid)]:
                    peak = _peak_rss(pid)
                    if peak is not None:
                        peaks[pid] = max(peaks.get(pid, 0), peak)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, status, usage = os.wait4(child.pid, 0)
        done.set()
        watcher.join()
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{args} failed: {stderr[-2000:]}")
    rusage = usage.ru_maxrss * 1024
    own = peaks.pop(child.pid, 0)
    if not peaks:  # no child: the rusage is the process's own
        own = max(own, rusage)
    return wall, [own, *peaks.values()], stdout


def run_args(spec: Path, workdir: Path) -> list[str]:
    return [
        *GRADETRAIL, "run", str(spec), "--concurrency", "64",
        "--cache", str(workdir / "cache.duckdb"), "--results", str(workdir / "results"),
    ]  # fmt: skip


def prepare(workdir: Path, n: int, url: str) -> Path:
    write_addition_dataset(workdir / "data" / "add.jsonl", n)
    return write_spec(workdir / "spec.yaml", base_url=url)


def calls_of(stdout: str, workdir: Path) -> int:
    manifest = manifest_of(stdout, workdir)
    target = manifest["target"]
    assert isinstance(target, dict)
    return int(target["calls"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--big", type=int, nargs="?", const=1_000_000, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server, url = start_server(0.0, root)
        try:
            work = root / "n"
            work.mkdir()
            spec = prepare(work, args.n, url)
            cold_wall, cold_rss, _ = measured(run_args(spec, work), work)
            warm_walls, version_walls, bare_walls = [], [], []
            warm_peaks: list[int] = []
            bare = [
                sys.executable, "-m", "bench.bare_replay", str(work / "data" / "add.jsonl"),
                str(work / "cache.duckdb"), url, str(root / "bare.jsonl"),
            ]  # fmt: skip
            for _ in range(args.rounds):
                version_walls.append(measured([*GRADETRAIL, "--version"], work)[0])
                wall, peaks, stdout = measured_tree(run_args(spec, work), work)
                if calls_of(stdout, work) != 0:
                    raise RuntimeError("the cached re-run called the provider")
                warm_walls.append(wall)
                if sum(peaks) > sum(warm_peaks):
                    warm_peaks = peaks
                bare_walls.append(measured(bare, REPO)[0])
            warm, version = statistics.median(warm_walls), statistics.median(version_walls)
            floor = statistics.median(bare_walls)
            warm_rss = sum(warm_peaks)
            print(f"n={args.n}")
            print(
                f"  cold run:   peak RSS {cold_rss / MB:.0f} MB (target <= 300); "
                f"wall {cold_wall:.1f} s"
            )
            print(f"  cached run: peak RSS {sum(warm_peaks) / MB:.0f} MB (target <= 300)")
            print(
                f"  cached run wall {warm:.2f} s, --version {version:.2f} s: "
                f"{warm - version:.2f} s past it, {warm / version:.1f}x; "
                f"rounds {' '.join(f'{w:.2f}' for w in warm_walls)}"
            )
            past = floor - version  # none at a small n: the replay imports less
            ratio = f"{(warm - version) / past:.2f}x" if past > 0 else "(no ratio)"
            print(
                f"  bare replay (the floor, one process) {floor:.2f} s: {past:.2f} s past "
                f"--version; the cached run is {ratio} the floor past it"
            )
            (run_dir,) = [p for p in (work / "results").iterdir() if p.is_dir()]
            copy = root / "copy"
            shutil.copytree(run_dir, copy)
            report_rss = measured([*GRADETRAIL, "report", str(run_dir)], work)[1]
            compare_rss = measured([*GRADETRAIL, "compare", str(run_dir), str(copy)], work)[1]
            print(
                f"  readers: report peak RSS {report_rss / MB:.0f} MB, compare (with a copy) "
                f"{compare_rss / MB:.0f} MB (target <= 300 each)"
            )
            if args.big:
                big = root / "big"
                big.mkdir()
                big_spec = prepare(big, args.big, url)
                big_cold_wall, big_cold_rss, _ = measured(run_args(big_spec, big), big)
                big_wall, big_peaks, stdout = measured_tree(run_args(big_spec, big), big)
                big_rss = sum(big_peaks)
                if calls_of(stdout, big) != 0:
                    raise RuntimeError("the cached re-run called the provider")
                print(f"n={args.big}")
                print(
                    f"  cold run:   peak RSS {big_cold_rss / MB:.0f} MB; wall {big_cold_wall:.1f} s"
                )
                print(
                    f"  cached run: peak RSS {' + '.join(f'{p / MB:.0f}' for p in big_peaks)} "
                    f"MB = {big_rss / MB:.0f} MB, {big_rss / warm_rss:.2f}x the n={args.n} "
                    f"cached run's (target <= 1.5); wall {big_wall:.1f} s"
                )
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
