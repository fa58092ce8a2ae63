"""Benchmark of `gradetrail view` (not a test: prints figures).

    .venv/bin/python -m bench.bench_viewer [--n 100000] [--small 100] [--rounds 30]

Two runs under one results root: a real run of `small` samples (run_spec on the
in-process scripted provider, four scorers, a quarter of the answers wrong), and a run
of `n` samples made of its records repeated under new ids (RecordWriter and
write_run_dir, with a manifest summarised from them). One `gradetrail view` process
serves both. For each run, the time to first byte (request sent to status line and
headers received, on a kept-alive connection) of the run page and of the failures page
(`?failures=1`), as the median of `rounds` requests after the first (the first builds
the run's index and is reported apart, as "cold"); the figure is the ratio of the big
run's median to the small one's (target <= 5). Also reported: a few other pages of the
big run (search, sort, a sample, page 500 of the failures), and the server's peak RSS
(VmHWM) after serving everything, against its RSS before the first request.
"""

import argparse
import dataclasses
import hashlib
import http.client
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gradetrail_lib import load_run, run_spec
from gradetrail_lib.analysis.summary import summarize
from gradetrail_lib.engine.rundir import write_run_dir

REPO = Path(__file__).resolve().parent.parent
SPEC = """name: viewer-bench
dataset: {path: data/qa.jsonl}
prompt: |
  Question {{ id }}: what is {{ expected }}? Answer with the number only.
model: {provider: scripted, name: x, answer_field: answer}
params: {temperature: 0, max_tokens: 16}
scorers:
  - {name: exact, type: exact, field: expected}
  - {name: digits, type: regex, pattern: '^\\d+$'}
  - {name: short, type: python, ref: "short.py:fn"}
  - name: judged
    type: judge
    prompt_file: judge.j2
    model: {provider: scripted, name: judge, answer_field: grade}
"""


def make_runs(where: Path, small: int, n: int) -> tuple[str, str]:
    specs = where / "specs"
    (specs / "data").mkdir(parents=True)
    (specs / "short.py").write_text("def fn(response):\n    return len(response) <= 4\n")
    (specs / "judge.j2").write_text("Is {{ response }} {{ expected }}? GRADE: C or I\n")
    with open(specs / "data" / "qa.jsonl", "w") as out:
        for i in range(small):
            right = i % 4 != 0
            answer = str(i) if right else f"I think it is {i + 1}, or maybe not"
            out.write(
                json.dumps({
                    "id": f"q{i:06d}", "expected": str(i), "answer": answer,
                    "grade": f"GRADE: {'C' if right else 'I'}",
                }) + "\n"
            )  # fmt: skip
    (spec,) = [specs / "viewer.yaml"]
    spec.write_text(SPEC)
    root = where / "results"
    (done,) = run_spec(spec, results_root=root, cache=where / "cache.duckdb")
    records = load_run(done.run_dir).records
    big = [
        dataclasses.replace(records[i % small], id=f"b{i:07d}") for i in range(n)
    ]  # fmt: skip
    summary = summarize(big, [(s.name, s.type) for s in done.manifest.scorers])
    manifest = done.manifest.model_copy(
        update={
            "identity": hashlib.sha256(f"big-{n}".encode()).hexdigest(),
            "samples": summary.samples,
            "outcomes": summary.outcomes,
            "failure_modes": summary.failure_modes,
            "scores": summary.scorers,
            "target": summary.target,
            "judge": summary.judge,
        }
    )
    big_dir = write_run_dir(root, big, manifest)
    return done.run_dir.name, big_dir.name


def status_of(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line)


class Client:
    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def ttfb(self, path: str) -> tuple[float, int, int]:
        """Seconds to the status line and headers; the status; the body's size."""
        start = time.perf_counter()
        self.conn.request("GET", path)
        response = self.conn.getresponse()
        first = time.perf_counter() - start
        body = response.read()
        return first, response.status, len(body)


def measure(client: Client, path: str, rounds: int) -> tuple[float, float, int]:
    cold, status, size = client.ttfb(path)
    assert status == 200, (path, status)
    warm = [client.ttfb(path)[0] for _ in range(rounds)]
    return cold, statistics.median(warm), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-viewer-") as tmp:
        started = time.perf_counter()
        small, big = make_runs(Path(tmp), args.small, args.n)
        size = (Path(tmp) / "results" / big / "results.jsonl").stat().st_size
        print(
            f"runs: {small} ({args.small} samples), {big} ({args.n} samples, "
            f"results.jsonl {size / 1e6:.0f} MB), made in {time.perf_counter() - started:.1f} s"
        )
        server = subprocess.Popen(
            [sys.executable, "-m", "gradetrail_lib.cli", "view", str(Path(tmp) / "results"),
             "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            line = server.stdout.readline()
            found = re.search(r"127\.0\.0\.1:(\d+)", line)
            assert found, line
            client = Client(int(found.group(1)))
            before = status_of(server.pid)["VmRSS"].strip()
            figures = {}
            for label, path in [("run page", ""), ("failures page", "?failures=1")]:
                for name, which in ((small, "small"), (big, "big")):
                    figures[label, which] = measure(client, f"/run/{name}{path}", args.rounds)
            print(f"\nTime to first byte, median of {args.rounds} (first request apart):")
            for label in ("run page", "failures page"):
                (c_s, w_s, z_s), (c_b, w_b, z_b) = figures[label, "small"], figures[label, "big"]
                print(
                    f"  {label:14} {args.small:>7}: {w_s * 1e3:6.2f} ms ({z_s // 1024} KiB)   "
                    f"{args.n}: {w_b * 1e3:6.2f} ms ({z_b // 1024} KiB)   ratio {w_b / w_s:.2f}"
                    f"   (first request: {c_s * 1e3:.0f} ms / {c_b * 1e3:.0f} ms)"
                )
            print(f"\nOther pages of the {args.n}-sample run (first request / median after):")
            for label, path in [
                ("failures, page 500", "?failures=1&page=500"),
                ("failing one scorer, sorted by it", "?scorer=judged&sort=-score:judged"),
                ("text search", "?q=maybe%20not"),
                ("search, failures only", "?failures=1&q=b0099999"),
                ("a sample", "/sample/b0054321"),
            ]:
                cold, warm, _ = measure(client, f"/run/{big}{path}", max(5, args.rounds // 3))
                print(f"  {label:34} {cold * 1e3:8.1f} ms / {warm * 1e3:6.2f} ms")
            cold, warm, _ = measure(client, "/", max(5, args.rounds // 3))
            print(f"  {'runs page (both runs)':34} {cold * 1e3:8.1f} ms / {warm * 1e3:6.2f} ms")
            peak = status_of(server.pid)["VmHWM"].strip()
            print(f"\nServer RSS: {before} before the first request; peak (VmHWM) {peak}")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
