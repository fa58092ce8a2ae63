"""Benchmark of the viewer's memory under concurrent loads (not a test: prints figures).

    .venv/bin/python -m bench.bench_viewer_memory [--loads 100] [--record-mb 2] [--samples 50]

A real run (run_spec on the in-process scripted provider) of `samples` samples, one of
which answers with a `record-mb` MB response (a wrong one, so the failures page shows it
too). One `gradetrail view` process serves it; `loads` clients then load the run page,
the failures page and that sample's page all at once (a thread each, one request each),
twice over. Reported: the server's RSS before the first request, after the loads, and
its peak (VmHWM), and the ratios of the last two to the first (what the loads cost, as a
multiple of an idle viewer).
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx

from gradetrail_lib import run_spec
from gradetrail_lib.viewer.links import sample_href

REPO = Path(__file__).resolve().parent.parent
SPEC = """name: viewer-memory
dataset: {path: data/qa.jsonl}
prompt: |
  Question {{ id }}: what is {{ expected }}?
model: {provider: scripted, name: x, answer_field: answer}
params: {temperature: 0, max_tokens: 16}
scorers:
  - {name: exact, type: exact, field: expected}
"""


def make_run(where: Path, samples: int, record_mb: float) -> str:
    specs = where / "specs"
    (specs / "data").mkdir(parents=True)
    huge = "word " * int(record_mb * (1 << 20) / 5)
    with open(specs / "data" / "qa.jsonl", "w") as out:
        for i in range(samples):
            answer = huge if i == 1 else str(i)
            out.write(json.dumps({"id": f"q{i:03d}", "expected": str(i), "answer": answer}))
            out.write("\n")
    (specs / "memory.yaml").write_text(SPEC)
    (run,) = run_spec(specs / "memory.yaml", results_root=where / "results",
                      cache=where / "cache.duckdb")  # fmt: skip
    return run.run_dir.name


def kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def load_all(base: str, paths: list[str], loads: int) -> int:
    """`loads` concurrent clients, each getting every path once; the bytes received."""
    got = [0] * loads

    def client(i: int) -> None:
        with httpx.Client(base_url=base, timeout=300) as http:
            for path in paths:
                response = http.get(path)
                response.raise_for_status()
                got[i] += len(response.content)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(loads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loads", type=int, default=100)
    parser.add_argument("--record-mb", type=float, default=2.0)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        name = make_run(where, args.samples, args.record_mb)
        server = subprocess.Popen(
            [sys.executable, "-m", "gradetrail_lib.cli", "view", str(where / "results"),
             "--port", "0"],
            stdout=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            match = re.search(r"(http://\S+)/", server.stdout.readline())
            assert match, "the viewer did not print its URL"
            base = match.group(1)
            httpx.get(base + "/", timeout=60).raise_for_status()  # imports done
            before = kib(server.pid, "VmRSS")
            paths = [f"/run/{name}", f"/run/{name}?failures=1", sample_href(name, "q001")]
            received = load_all(base, paths, args.loads) + load_all(base, paths, args.loads)
            after, peak = kib(server.pid, "VmRSS"), kib(server.pid, "VmHWM")
        finally:
            server.terminate()
            server.wait(timeout=60)
    print(
        f"{args.loads} concurrent loads x {len(paths)} pages, twice, of a run of "
        f"{args.samples} samples holding a {args.record_mb:g} MB response "
        f"({received / (1 << 20):.1f} MB sent)"
    )
    print(f"server RSS before {before / 1024:.0f} MB, after {after / 1024:.0f} MB "
          f"(ratio {after / before:.2f}), peak {peak / 1024:.0f} MB "
          f"(ratio {peak / before:.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
