"""Benchmark of the Ray backend against the local one (not a test: prints ratios).

    .venv/bin/python -m bench.bench_ray [--n 2000] [--latency 0.2] [--workers 4]
                                        [--concurrency 16]

Against a loopback fake server (its own process, so it does not share this process's
GIL) answering after L seconds:

1. Ray: a cold `RayBackend(W, C).run` of n requests, starting its own local cluster.
   Start-up (ray.init + every actor ready) and shutdown are reported separately; the
   ratio is the sending time (first submission to last outcome) over the floor
   n*L/(W*C). Target: <= 1.25.
2. Local: `LocalBackend(W*C).run` of the same n, wall time over the same floor.

Requests carry a per-phase tag so no phase can profit from another's work.
"""

import argparse
import tempfile
import time
from pathlib import Path

from bench.bench_pipeline import start_server
from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.backends.ray_backend import RayBackend
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError
from tests.support.requests import addition_requests


class Counter:
    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0

    def __call__(self, request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
        if isinstance(outcome, ProviderError):
            self.failed += 1
        else:
            self.ok += 1


def bench_ray(url: str, n: int, latency_s: float, workers: int, concurrency: int) -> None:
    backend = RayBackend(workers=workers, concurrency=concurrency)
    counter = Counter()
    started = time.perf_counter()
    backend.run(addition_requests(url, n, tag="ray"), counter)
    total = time.perf_counter() - started
    stats = backend.last_run
    assert stats.started_cluster, "RAY_ADDRESS is set: this measures a local cluster"
    floor = n * latency_s / (workers * concurrency)
    startup = stats.connect_s + stats.workers_ready_s
    shutdown = total - startup - stats.send_s
    print(
        f"ray W={workers} C={concurrency} n={n} L={latency_s * 1000:.0f}ms: "
        f"send / floor = {stats.send_s:.2f}s / {floor:.2f}s = {stats.send_s / floor:.3f}; "
        f"start-up {startup:.2f}s (ray.init {stats.connect_s:.2f}s + actors ready "
        f"{stats.workers_ready_s:.2f}s), shutdown {shutdown:.2f}s, whole run {total:.2f}s; "
        f"ok={counter.ok} failed={counter.failed} max in flight={stats.max_in_flight}"
    )


def bench_local(url: str, n: int, latency_s: float, concurrency: int) -> None:
    counter = Counter()
    started = time.perf_counter()
    LocalBackend(concurrency=concurrency).run(addition_requests(url, n, tag="local"), counter)
    wall = time.perf_counter() - started
    floor = n * latency_s / concurrency
    print(
        f"local C={concurrency} n={n} L={latency_s * 1000:.0f}ms: "
        f"wall / floor = {wall:.2f}s / {floor:.2f}s = {wall / floor:.3f}; "
        f"ok={counter.ok} failed={counter.failed}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16, help="per worker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, url = start_server(args.latency, Path(tmp))
        try:
            bench_ray(url, args.n, args.latency, args.workers, args.concurrency)
            bench_local(url, args.n, args.latency, args.workers * args.concurrency)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
