"""Benchmark of adaptive concurrency (not a test: prints figures).

    .venv/bin/python -m bench.bench_adaptive [--n 500] [--latency 0.2] [--cap 16] [--max 64]

A loopback fake API answers after L seconds and refuses (429, `retry-after: 0`) any
request arriving while `cap` are in progress; the cap is not announced. The local backend
with `--concurrency auto` up to `max` sends n requests. Reported: requests sent per sample
(1 + the refused ones), the share refused (target < 5 %), samples lost (target 0), the
limit it settled at, and the wall time over the floor n*L/cap (a client told the cap);
then, for reference, the same at a fixed concurrency equal to the cap.
"""

import argparse
import time

from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.policy import RetryPolicy
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.requests import addition_requests


def measure(backend: LocalBackend, n: int, latency_s: float, cap: int, tag: str) -> None:
    with FakeLLMServer(latency_s=latency_s) as server:
        server.inflight_cap = cap
        requests = addition_requests(f"{server.base_url}/v1", n, tag=tag)
        outcomes: list[tuple[ModelRequest, ModelResponse | ProviderError]] = []
        started = time.perf_counter()
        backend.run(requests, lambda r, o: outcomes.append((r, o)))
        wall = time.perf_counter() - started
        refused = sum(1 for r in server.requests if r["status"] == 429)
        sent = server.calls
    answered = sum(1 for _, o in outcomes if isinstance(o, ModelResponse))
    floor = n * latency_s / cap
    mode = backend.describe()
    settled = ", ".join(str(s["limit"]) for s in backend.limiter_stats().values()) or "-"
    print(
        f"{tag:>10}: concurrency {mode['concurrency']}"
        f"{' (max ' + str(mode['max_concurrency']) + ')' if backend.adaptive else ''}; "
        f"requests sent per sample {sent / n:.3f} (refused {refused}, "
        f"{100 * refused / sent:.2f} % of {sent}; target < 5 %); lost {n - answered} "
        f"(target 0); settled at {settled}; wall {wall:.2f} s over floor n*L/cap "
        f"{floor:.2f} s = {wall / floor:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--cap", type=int, default=16)
    parser.add_argument("--max", type=int, default=64)
    args = parser.parse_args()
    policy = RetryPolicy(timeout_s=30.0)
    print(f"n={args.n}, L={args.latency}s, hidden cap {args.cap}")
    measure(LocalBackend(args.max, policy, adaptive=True), args.n, args.latency, args.cap, "auto")
    measure(LocalBackend(args.cap, policy), args.n, args.latency, args.cap, "fixed-cap")


if __name__ == "__main__":
    main()
