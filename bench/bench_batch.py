"""Benchmark of `run --batch` (not a test: prints ratios).

    .venv/bin/python -m bench.bench_batch [--n 10000] [--delay 2]

n distinct requests to an OpenAI model sent by batch to a loopback fake whose batches take
`delay` seconds to process (the fake in a process of its own):

1. The floor: the same number of requests (other keys) uploaded, waited for and downloaded
   by the provider's batch adapter alone: upload + delay + download.
2. `gradetrail run --batch` of the n samples (polls every 0.25 s growing to 1 s, set by
   GRADETRAIL_BATCH_POLL_S / _MAX_S: the default 5 s first poll would measure the poll):
   its responses step over the floor, its peak RSS (target <= 300 MB), and the fake's count
   of custom_ids submitted more than once (target 0).
3. The same samples sent the ordinary way (another cache): the batch run's cost over the
   ordinary run's (the manifests' paid cost, each call priced from its own usage),
   against the price list's batch price over its ordinary price for the same tokens.
"""

import argparse
import json
import os
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import httpx

from bench.bench_pipeline import GRADETRAIL, manifest_of, start_server
from bench.bench_scale import measured_tree
from gradetrail_lib.providers import registry
from gradetrail_lib.providers.batch import Connection
from gradetrail_lib.providers.pricing import load_prices
from tests.conftest import write_addition_dataset
from tests.support.requests import addition_requests

MODEL = "gpt-5-mini"
KEY_ENV = "GT_BENCH_KEY"
POLL = {"GRADETRAIL_BATCH_POLL_S": "0.25", "GRADETRAIL_BATCH_POLL_MAX_S": "1"}


def write_project(case: Path, url: str, n: int) -> Path:
    write_addition_dataset(case / "data" / "add.jsonl", n)
    spec = case / "add.yaml"
    spec.write_text(
        "name: add\ndataset: {path: data/add.jsonl}\nprompt: 'Q: {{ a }} + {{ b }}'\n"
        f'model: {{provider: openai, name: {MODEL}, base_url: "{url}", api_key_env: {KEY_ENV}}}\n'
        "params: {temperature: 0, max_tokens: 16}\n"
        "scorers:\n  - {name: sum, type: numeric}\n"
    )
    return spec


def floor_s(url: str, n: int) -> tuple[float, float, float]:
    """(upload, wait, download) seconds of n requests by the adapter alone."""
    api = registry.batch_api("openai")
    assert api is not None
    requests = addition_requests(url, n, tag="floor", provider="openai", key_env=KEY_ENV)
    lines = [api.line(r) for r in requests]
    with httpx.Client(timeout=300) as client:
        conn = Connection(client=client, endpoint=requests[0].endpoint, api_key="sk-bench")
        started = time.perf_counter()
        batch_id = api.submit(conn, lines, "gt-floor")
        uploaded = time.perf_counter()
        status = api.status(conn, batch_id)
        while not status.final:
            time.sleep(0.01)
            status = api.status(conn, batch_id)
        ended = time.perf_counter()
        answered = sum(1 for r in api.results(conn, status) if r.outcome is not None)
        downloaded = time.perf_counter()
    assert answered == n
    return uploaded - started, ended - uploaded, downloaded - ended


def stats(url: str) -> dict[str, int]:
    root = url.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(f"{root}/_stats") as answer:
        return dict(json.loads(answer.read()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=2.0)
    args = parser.parse_args()
    n, delay = args.n, args.delay
    os.environ[KEY_ENV] = "sk-bench-not-a-secret"
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server, url = start_server(0.0, workdir, batch_delay=delay)
        try:
            upload, wait, download = floor_s(url, n)
            floor = upload + wait + download
            case = workdir / "batch"
            spec = write_project(case, url, n)
            os.environ.update(POLL)
            run = [*GRADETRAIL, "run", str(spec), "--results", str(case / "results")]
            _, peaks, out = measured_tree(
                [*run, "--batch", "--cache", str(case / "b.duckdb")], case
            )
            batch = manifest_of(out, case)
            counted = stats(url)
            _, _, out = measured_tree(
                [*run, "--concurrency", "64", "--cache", str(case / "s.duckdb")], case
            )
            ordinary = manifest_of(out, case)
        finally:
            server.terminate()
            server.wait()
    responses_s = batch["timings_s"]["responses"]  # type: ignore[index]
    assert batch["target"]["calls"] == n and ordinary["target"]["calls"] == n  # type: ignore[index]
    print(
        f"batch of {n} requests, processing delay {delay:g} s: responses step "
        f"{responses_s:.2f} s / (upload {upload:.2f} + delay {wait:.2f} + download "
        f"{download:.2f} = {floor:.2f} s) = {responses_s / floor:.2f}x (polls 0.25 s -> 1 s)"
    )
    peak_mb = max(peaks) / 2**20
    met = "met" if peak_mb <= 300 else "MISSED"
    print(f"  peak RSS {peak_mb:.0f} MB (target <= 300: {met})")
    duplicates = counted["batch_duplicates"]
    print(
        f"  custom_ids submitted: {counted['batch_requests']} in {counted['batches']} batches "
        f"(the floor's and the run's), {duplicates} submitted twice (target 0: "
        f"{'met' if duplicates == 0 else 'MISSED'})"
    )
    print(cost_line(batch, ordinary))


def cost_line(batch: dict[str, Any], ordinary: dict[str, Any]) -> str:
    """The batch run's cost over the ordinary run's (the manifests': each call priced from
    its own usage), against the price list's batch price over its ordinary price for the
    same tokens."""
    prices = load_prices()
    by_batch, sync = batch["target"]["cost_paid_usd"], ordinary["target"]["cost_paid_usd"]
    tokens_in, tokens_out = ordinary["target"]["input_tokens"], ordinary["target"]["output_tokens"]
    listed_batch = prices.cost("openai", MODEL, tokens_in, tokens_out, batch=True)
    listed = prices.cost("openai", MODEL, tokens_in, tokens_out)
    assert by_batch is not None and sync and listed_batch is not None and listed
    ratio, listed_ratio = by_batch / sync, listed_batch / listed
    met = "met" if abs(ratio - listed_ratio) < 1e-9 else "MISSED"
    return (
        f"  cost: by batch ${by_batch:.6f} / ordinary ${sync:.6f} = {ratio:.6f}; "
        f"the price list ({prices.version}) for openai/{MODEL}: {listed_ratio:.6f} "
        f"(equal: {met})"
    )


if __name__ == "__main__":
    main()
