"""Benchmark of the cache's burst writer (not a test: prints figures).

    .venv/bin/python -m bench.bench_writer [--n 2000] [--latency 0.2]

Answers are put into the writer of a fresh DuckDB cache file as a run's arrive, at
concurrency C = 8 and 64: in rounds (C answers together every L seconds, as a server with
a fixed latency answers C workers) and as a steady stream (one every L/C). Reported for
each: the time from `put` to the commit of the answer's burst (median, 99th percentile,
maximum: how long an answer is in memory only, what a kill cost before the journal),
the transactions, and `put`'s own time with the journal and without it (what the
journal's write adds to the sending thread, per answer).
"""

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from gradetrail_lib.cache.bursts import CacheWriter
from gradetrail_lib.cache.journal import Journal
from gradetrail_lib.cache.responses import ResponseCache, response_row
from gradetrail_lib.providers.base import Endpoint, ModelRequest, ModelResponse

ENDPOINT = Endpoint("openai_compatible", "fake-1", "http://127.0.0.1:1/v1", None)


def answer(i: int) -> tuple[ModelRequest, ModelResponse]:
    request = ModelRequest(f"{i:064x}", ENDPOINT, [{"role": "user", "content": f"Q {i}"}], {})
    text = f"The answer is {i}."
    raw = {"id": f"chatcmpl-{i}", "choices": [{"message": {"content": text}}], "usage": {}}
    response = ModelResponse(
        text=text, served_model="fake-1", stop_reason="stop", input_tokens=12,
        output_tokens=6, latency_s=0.2, raw=raw,
    )  # fmt: skip
    return request, response


class TimedCache(ResponseCache):
    """Records when each key's burst was committed."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.committed: dict[str, float] = {}
        self.transactions = 0

    def put_many(self, items: Sequence[tuple[ModelRequest, ModelResponse]]) -> None:
        super().put_many(items)
        done = time.perf_counter()
        self.transactions += 1
        for request, _ in items:
            self.committed[request.key] = done


def measure(n: int, latency_s: float, concurrency: int, rounds: bool, journal: bool) -> str:
    with tempfile.TemporaryDirectory(prefix="bench-writer-") as work:
        cache = TimedCache(Path(work) / "c.duckdb")
        writer = CacheWriter(
            cache, journal=Journal(cache.journals, response_row) if journal else None
        )
        answers = [answer(i) for i in range(n)]
        put_at: dict[str, float] = {}
        put_cost: list[float] = []
        started = time.perf_counter()
        for i, (request, response) in enumerate(answers):
            # When the i-th answer arrives: its round's end, or its place in the stream.
            due = started + (
                (i // concurrency + 1) * latency_s if rounds else i * latency_s / concurrency
            )
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            before = time.perf_counter()
            writer.put(request, response)
            put_cost.append(time.perf_counter() - before)
            put_at[request.key] = before
        writer.close()
        delays = sorted(cache.committed[k] - t for k, t in put_at.items())
        p99 = delays[int(0.99 * (len(delays) - 1))]
        return (
            f"put to commit median {statistics.median(delays) * 1000:.1f} ms, p99 "
            f"{p99 * 1000:.1f} ms, max {delays[-1] * 1000:.1f} ms; {cache.transactions} "
            f"transactions; put() {statistics.median(put_cost) * 1e6:.1f} µs median"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    for concurrency in (8, 64):
        n = min(args.n, concurrency * 40)  # about 40 rounds of L each
        for rounds in (True, False):
            pattern = "rounds" if rounds else "stream"
            for journal in (True, False):
                figures = measure(n, args.latency, concurrency, rounds, journal)
                tag = "journal" if journal else "no journal"
                print(f"C={concurrency} n={n} {pattern:>6} {tag:>10}: {figures}", flush=True)


if __name__ == "__main__":
    main()
