"""Benchmark of the Postgres cache against the DuckDB file on the same work (not a test:
prints figures).

    .venv/bin/python -m bench.bench_cache_pg [--n 500] [--latency 0.2] \
        [--warm 10000 100000] [--rounds 3] [--writers 4] [--writer-n 2000] \
        [--parts cold warm writers claims]

The same runs, once with `--cache FILE.duckdb` and once with `--cache postgresql://...`
(a throwaway server on this machine, `tests.support.postgres`: loopback TCP, fsync off,
as the tests run it):

1. Cold: n samples, every one a miss, against a loopback fake server answering after L
   seconds, at concurrency 64: the responses step's wall time over the floor n*L/C
   (median of `rounds`; n=500 at C=64 cannot reach 1.0: 8 rounds of L for 7.8).
2. Warm: a fully cached re-run of each `--warm` size (filled by a cold run at latency 0
   first): whole-process wall time, past a bare `gradetrail --version`, and the peak
   resident memory of the run's processes (median wall of `rounds`).
3. Writers: `writers` processes run one spec of `writer-n` samples at once on one empty
   cache (latency 0.05 s, concurrency 16 each): wall until the last ends, the fake
   server's calls against the distinct requests (how many were sent more than once),
   and the keys stored.
4. Claims: the cold run of 1. with claims (as shipped) and without (the cache's
   `claims()` made to return None, as before claims), alternating, `rounds` of each: the
   responses step's time with claims over the time without (median of the rounds'
   ratios; each round's pair ran back to back).

The fake server runs in its own process, so its CPU and memory are not the runs'. Needs
Debian's postgresql and psycopg (`pip install -e '.[postgres]'`).
"""

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.bench_pipeline import GRADETRAIL, manifest_of, start_server, timed
from bench.bench_scale import MB, measured_tree
from tests.conftest import write_addition_dataset, write_spec
from tests.support.postgres import PostgresServer, postgres_problem, running_postgres

PARTS = ("cold", "warm", "writers", "claims")

# A cache location for a case, per engine: a fresh DuckDB file or a fresh database.
Fresh = Callable[[str], str]


def cold(n: int, latency_s: float, rounds: int, fresh: Fresh, work: Path, url: str) -> str:
    ratios = []
    for i in range(rounds):
        case = work / f"cold-{i}"
        write_addition_dataset(case / "data" / "add.jsonl", n)
        spec = write_spec(case / "add.yaml", base_url=url)
        _, out = timed(
            [*GRADETRAIL, "run", str(spec), "--concurrency", "64", "--cache", fresh(f"cold{i}")],
            case,
        )
        manifest = manifest_of(out, case)
        assert manifest["target"]["calls"] == n  # type: ignore[index]
        responses_s = float(manifest["timings_s"]["responses"])  # type: ignore[index]
        ratios.append(responses_s / (n * latency_s / 64))
    spread = " ".join(f"{r:.3f}" for r in ratios)
    return f"cold n={n} C=64: responses step / floor = {statistics.median(ratios):.3f} ({spread})"


# A run as `GRADETRAIL` starts it, with no claims on either cache: what a run did before
# claims, for the claims' overhead (part 4).
UNCLAIMED = [
    sys.executable,
    "-c",
    "import sys; from gradetrail_lib.cache import postgres, responses;"
    " postgres.PostgresCache.claims = lambda self: None;"
    " responses.ResponseCache.claims = lambda self: None;"
    " from gradetrail_lib.cli import main; sys.exit(main())",
]


def claims_overhead(
    n: int, latency_s: float, rounds: int, fresh: Fresh, work: Path, url: str
) -> str:
    def responses_s(command: list[str], name: str) -> float:
        case = work / name
        write_addition_dataset(case / "data" / "add.jsonl", n)
        spec = write_spec(case / "add.yaml", base_url=url)
        run = [*command, "run", str(spec), "--concurrency", "64", "--cache", fresh(name)]
        manifest = manifest_of(timed(run, case)[1], case)
        assert manifest["target"]["calls"] == n  # type: ignore[index]
        return float(manifest["timings_s"]["responses"])  # type: ignore[index]

    ratios, claimed, unclaimed = [], [], []
    for i in range(rounds):
        # Which goes first alternates, so neither always meets a warmer machine.
        order = [("claimed", GRADETRAIL), ("unclaimed", UNCLAIMED)]
        if i % 2:
            order.reverse()
        times = {label: responses_s(command, f"{label}{i}") for label, command in order}
        claimed.append(times["claimed"])
        unclaimed.append(times["unclaimed"])
        ratios.append(times["claimed"] / times["unclaimed"])
    spread = " ".join(f"{r:.3f}" for r in ratios)
    return (
        f"cold n={n} C=64, claims: responses step with claims / without = "
        f"{statistics.median(ratios):.3f} ({spread}); medians {statistics.median(claimed):.2f} s"
        f" / {statistics.median(unclaimed):.2f} s"
    )


def warm(n: int, rounds: int, fresh: Fresh, work: Path, url: str) -> str:
    case = work / f"warm-{n}"
    write_addition_dataset(case / "data" / "add.jsonl", n)
    spec = write_spec(case / "add.yaml", base_url=url)
    run = [*GRADETRAIL, "run", str(spec), "--concurrency", "64", "--cache", fresh(f"warm{n}")]
    out = timed(run, case)[1]  # fills the cache
    assert manifest_of(out, case)["target"]["calls"] == n  # type: ignore[index]
    walls, versions, lookups, peak = [], [], [], 0
    for _ in range(rounds):
        versions.append(timed([*GRADETRAIL, "--version"], case)[0])
        wall, peaks, out = measured_tree(run, case)
        manifest = manifest_of(out, case)
        assert manifest["target"]["calls"] == 0  # type: ignore[index]
        lookups.append(float(manifest["timings_s"]["cache_lookup"]))  # type: ignore[index]
        walls.append(wall)
        peak = max(peak, sum(peaks))
    wall, version = statistics.median(walls), statistics.median(versions)
    return (
        f"warm n={n}: wall {wall:.2f} s ({wall - version:.2f} s past --version {version:.2f} s)"
        f", cache lookup {statistics.median(lookups):.2f} s; peak RSS {peak / MB:.0f} MB"
    )


def writers(count: int, n: int, fresh: Fresh, work: Path, server_dir: Path) -> str:
    case = work / "writers"
    server, url = start_server(0.05, server_dir)
    try:
        write_addition_dataset(case / "data" / "add.jsonl", n)
        spec = write_spec(case / "add.yaml", base_url=url)
        location = fresh("writers")
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [
                    *GRADETRAIL,
                    "run",
                    str(spec),
                    "--concurrency",
                    "16",
                    "--cache",
                    location,
                    "--results",
                    str(case / f"r{i}"),
                ],
                cwd=case,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            for i in range(count)
        ]
        for proc in procs:
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"a writer failed: {err[-2000:]}")
        wall = time.perf_counter() - started
        calls = sum(
            json.loads((d / "manifest.json").read_text())["target"]["calls"]
            for i in range(count)
            for d in (case / f"r{i}").iterdir()
            if d.is_dir()
        )
    finally:
        server.terminate()
        server.wait()
    from gradetrail_lib.cache.location import open_cache

    stored = open_cache(location).count()
    return (
        f"{count} writers x n={n} at once: wall {wall:.1f} s; {calls} calls for {n} "
        f"distinct requests ({calls / n:.2f}x: {calls - n} sent again); "
        f"{stored} keys stored"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--warm", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--writer-n", type=int, default=2000)
    parser.add_argument(
        "--parts", nargs="+", choices=PARTS, default=list(PARTS), help="which parts to run"
    )
    args = parser.parse_args()
    # A SIGTERM unwinds like an exception, so the server and the fake stop with the bench.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    problem = postgres_problem()
    if problem is not None:
        sys.exit(f"cannot run: {problem}")
    with tempfile.TemporaryDirectory() as tmp, running_postgres() as pg:
        root = Path(tmp)
        engines: dict[str, Fresh] = {
            "duckdb": lambda name: str(root / "duckdb" / f"{name}.duckdb"),
            "postgres": lambda name: _database(pg),
        }
        for engine, fresh in engines.items():
            work = root / engine
            work.mkdir()
            print(engine)
            cold_parts = [p for p in ("cold", "claims") if p in args.parts]
            if cold_parts:
                (work / "slow").mkdir()
                server, url = start_server(args.latency, work / "slow")
                try:
                    if "cold" in cold_parts:
                        print(f"  {cold(args.n, args.latency, args.rounds, fresh, work, url)}")
                    if "claims" in cold_parts:
                        overhead = claims_overhead(
                            args.n, args.latency, args.rounds, fresh, work, url
                        )
                        print(f"  {overhead}")
                finally:
                    server.terminate()
                    server.wait()
            if "warm" in args.parts:
                (work / "fast").mkdir()
                server, url = start_server(0.0, work / "fast")
                try:
                    for n in args.warm:
                        print(f"  {warm(n, args.rounds, fresh, work, url)}")
                finally:
                    server.terminate()
                    server.wait()
            if "writers" in args.parts:
                (work / "wserver").mkdir()
                print(f"  {writers(args.writers, args.writer_n, fresh, work, work / 'wserver')}")
            sys.stdout.flush()


def _database(pg: PostgresServer) -> str:
    return pg.create_database()


if __name__ == "__main__":
    main()
