"""The leaderboard of a spec: models ranked by pass rate, with paired verdicts."""

from itertools import combinations
from pathlib import Path
from typing import Any

import dagster as dg

from gradetrail_lib.errors import NotComparable
from gradetrail_lib.runs import load_run
from gradetrail_lib.stats import check_comparable, compare


def build_leaderboard(stats_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Plain data: the ranking, and a verdict for every pair of comparable runs."""
    ranked = sorted(stats_rows, key=lambda r: (-(r["pass_rate"] or 0.0), r["model"]))
    runs = {r["model"]: load_run(Path(r["run_dir"])) for r in ranked}
    pairs = []
    for a, b in combinations([r["model"] for r in ranked], 2):
        try:
            check_comparable(runs[a].manifest, runs[b].manifest, labels=(a, b))
            result = compare(runs[a].rows, runs[b].rows, labels=(a, b))
        except NotComparable as exc:
            pairs.append({"a": a, "b": b, "refused": str(exc)})
            continue
        interval = result.difference.interval
        pairs.append(
            {
                "a": a,
                "b": b,
                "n": result.n,
                "difference": result.difference.value,
                "low": interval.low if interval else None,
                "high": interval.high if interval else None,
                "mcnemar_p": result.mcnemar_p,
                "verdict": result.verdict,
                "winner": {"A": a, "B": b}.get(result.verdict),
            }
        )
    models = [
        {k: r[k] for k in ("model", "n", "passed", "pass_rate", "pass_low", "pass_high")}
        for r in ranked
    ]
    return {"models": models, "pairs": pairs}


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def leaderboard_metadata(board: dict[str, Any]) -> dict[str, Any]:
    rows = "\n".join(
        f"| {i} | {m['model']} | {m['passed']}/{m['n']} | {_fmt(m['pass_rate'])} "
        f"| {_fmt(m['pass_low'])}–{_fmt(m['pass_high'])} |"
        for i, m in enumerate(board["models"], start=1)
    )
    table = "| rank | model | passed | pass rate | 95% CI |\n|---|---|---|---|---|\n" + rows
    verdicts = [
        f"| {p['a']} vs {p['b']} | refused: {p['refused']} | | |"
        if "refused" in p
        else f"| {p['a']} vs {p['b']} | {_fmt(p['difference'])} "
        f"({_fmt(p['low'])}–{_fmt(p['high'])}, n={p['n']}) | {p['mcnemar_p']:.4g} "
        f"| {p['winner'] or 'no winner'} |"
        for p in board["pairs"]
    ]
    if verdicts:
        table += (
            "\n\n| pair (A vs B) | difference B−A | McNemar p | winner |\n|---|---|---|---|\n"
            + "\n".join(verdicts)
        )
    return {
        "leaderboard": dg.MetadataValue.md(table),
        "models": dg.MetadataValue.int(len(board["models"])),
        "board": dg.MetadataValue.json(board),
    }
