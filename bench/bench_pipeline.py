"""Benchmark of the request path and of the cache (not a test: prints ratios).

    .venv/bin/python -m bench.bench_pipeline [--n 500] [--latency 0.2] [--warm-n 10000]

1. Cold runs of n samples against a loopback fake server answering after L seconds, at
   concurrency C = 8 and 64: the responses step's wall time over the floor n*L/C, median
   of `repeats` runs (single runs on this shared 2-core machine vary by +-0.02). After each,
   the same n requests from a bare asyncio client (C keep-alive sockets, prebuilt bytes,
   no HTTP library, no cache) over the same floor: what this server and machine allow at
   all. n/C rounds that are not whole put the floor itself out of reach (n=500, C=64:
   8 rounds of L for 7.8, at best 1.024).
2. A warm re-run and a scorer-only re-score of `warm-n` cached samples: whole-process wall
   time over the wall time of a bare `gradetrail --version`, measured in turn in each of
   `repeats` rounds (medians; each round's own ratios in brackets).

The fake server runs in its own process so that it does not share this process's GIL.
"""

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.conftest import write_addition_dataset, write_spec

REPO = Path(__file__).resolve().parent.parent
GRADETRAIL = [sys.executable, "-m", "gradetrail_lib.cli"]


def start_server(
    latency_s: float, workdir: Path, responder: str | None = None, batch_delay: float = 0.0
) -> tuple[subprocess.Popen[bytes], str]:
    port_file = workdir / "port"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.fake_llm_server",
            "--port",
            "0",
            "--latency",
            str(latency_s),
            "--port-file",
            str(port_file),
            *(["--responder", responder] if responder else []),
            *(["--batch-delay", str(batch_delay)] if batch_delay else []),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while not port_file.exists():
        if time.monotonic() > deadline or server.poll() is not None:
            raise RuntimeError("fake server did not start")
        time.sleep(0.02)
    return server, f"http://127.0.0.1:{port_file.read_text().strip()}/v1"


def timed(args: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{args} failed: {done.stderr[-2000:]}")
    return wall, done.stdout


def manifest_of(stdout: str, cwd: Path) -> dict[str, object]:
    (line,) = [x for x in stdout.splitlines() if x.startswith("Run: ")]
    run_dir = cwd / line.split(" -> ", 1)[1]
    return dict(json.loads((run_dir / "manifest.json").read_text()))


def bare_client_ratio(n: int, latency_s: float, concurrency: int, url: str) -> float:
    """Wall time over n*L/C of n POSTs from C raw keep-alive sockets (the reference)."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    body = json.dumps(
        {"model": "fake-1", "messages": [{"role": "user", "content": "Q: 1 + 2"}]}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    request = head.encode() + body

    async def send_all() -> None:
        pending = iter(range(n))

        async def worker() -> None:
            reader, writer = await asyncio.open_connection(host, int(port))
            for _ in pending:
                writer.write(request)
                lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
                (length,) = [x for x in lines if x.lower().startswith(b"content-length:")]
                await reader.readexactly(int(length.split(b":")[1]))
            writer.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    started = time.perf_counter()
    asyncio.run(send_all())
    return (time.perf_counter() - started) / (n * latency_s / concurrency)


def cold_ratio(n: int, latency_s: float, concurrency: int, case: Path, url: str) -> float:
    """The responses step's wall time (from the run's manifest) over n*L/C."""
    write_addition_dataset(case / "data" / "add.jsonl", n)
    # A prompt of its own per case: every request misses the cache.
    spec = write_spec(
        case / "add.yaml", base_url=url, prompt=f"[{case.name}] Q: {{{{ a }}}} + {{{{ b }}}}"
    )
    _, out = timed(
        [
            *GRADETRAIL,
            "run",
            str(spec),
            "--cache",
            str(case / "c.duckdb"),
            "--concurrency",
            str(concurrency),
        ],
        case,
    )
    responses_s = float(manifest_of(out, case)["timings_s"]["responses"])  # type: ignore[index]
    return responses_s / (n * latency_s / concurrency)


def cold_ratios(
    n: int, latency_s: float, concurrency: int, workdir: Path, url: str, repeats: int
) -> None:
    """`repeats` cold runs, each followed by the bare client, so both see the same machine."""
    ours, bare = [], []
    for i in range(repeats):
        case = workdir / f"cold-c{concurrency}-{i}"
        ours.append(cold_ratio(n, latency_s, concurrency, case, url))
        bare.append(bare_client_ratio(n, latency_s, concurrency, url))
    print(
        f"cold n={n} L={latency_s * 1000:.0f}ms C={concurrency}: responses step / floor = "
        f"{statistics.median(ours):.3f} median of {repeats} ({_spread(ours)}); "
        f"bare asyncio client / floor = {statistics.median(bare):.3f} ({_spread(bare)})"
    )


def _spread(values: list[float]) -> str:
    return " ".join(f"{v:.3f}" for v in values)


NUMERIC = "{type: numeric}"
REGEX = "{type: regex, pattern: 'Answer: {{ answer }}'}"


def warm_ratios(n: int, workdir: Path, url: str, repeats: int = 5) -> None:
    """Each repeat times `--version`, an identical re-run, and a re-run whose only change
    is the scorer, one after the other, so that all three see the same machine."""
    case = workdir / "warm"
    write_addition_dataset(case / "data" / "add.jsonl", n)
    spec = write_spec(case / "add.yaml", base_url=url, scorer=NUMERIC)
    run = [*GRADETRAIL, "run", str(spec), "--cache", str(case / "c.duckdb")]
    out = timed([*run, "--concurrency", "64"], case)[1]  # seed
    assert manifest_of(out, case)["target"]["calls"] == n  # type: ignore[index]
    version, warm, rescore = [], [], []
    for _ in range(repeats):
        version.append(timed([*GRADETRAIL, "--version"], case)[0])
        wall, out = timed(run, case)
        warm.append(wall)
        write_spec(case / "add.yaml", base_url=url, scorer=REGEX)
        wall, out = timed(run, case)
        rescore.append(wall)
        assert manifest_of(out, case)["target"]["calls"] == 0  # type: ignore[index]
        write_spec(case / "add.yaml", base_url=url, scorer=NUMERIC)
        timed(run, case)  # back to the first scorer, so the next warm run is a re-run
    base = statistics.median(version)
    print(
        f"warm re-run of {n} cached samples / `gradetrail --version` = "
        f"{statistics.median(warm) / base:.2f} median of {repeats} "
        f"({_spread([w / v for w, v in zip(warm, version, strict=True)])})"
    )
    print(
        f"scorer-only re-score of {n} cached samples / `gradetrail --version` = "
        f"{statistics.median(rescore) / base:.2f} median of {repeats} "
        f"({_spread([r / v for r, v in zip(rescore, version, strict=True)])})"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--warm-n", type=int, default=10_000)
    parser.add_argument(
        "--repeats", type=int, default=5, help="cold runs per concurrency, and warm rounds"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server, url = start_server(args.latency, workdir)
        try:
            for concurrency in (8, 64):
                cold_ratios(args.n, args.latency, concurrency, workdir, url, args.repeats)
        finally:
            server.terminate()
            server.wait()
        server, url = (
            start_server(0.0, workdir / "fast")
            if (workdir / "fast").mkdir() is None
            else (None, "")
        )
        try:
            warm_ratios(args.warm_n, workdir, url, args.repeats)
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
