"""The leaderboard of a spec: models ranked by the primary scorer's pass rate, with the
other scorers' figures beside it and paired verdicts (on the primary scorer) between them.

Model names, run labels, scorer names and refusals reach the Markdown through
`markdown_text` (a name is data: never a link, HTML or a table's end); the board's JSON
keeps them as they are."""

from pathlib import Path
from typing import Any

import dagster as dg

from gradetrail_lib.analysis.pairwise import Pairing, every_pair
from gradetrail_lib.errors import InputError
from gradetrail_lib.results.runs import Run, load_run
from gradetrail_lib.results.text import markdown_text

FIGURES = ("n", "passed", "pass_rate", "pass_low", "pass_high", "mean_score")


def _figures(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in FIGURES}


def build_leaderboard(stats_rows: list[dict[str, Any]], primary: str) -> dict[str, Any]:
    """Plain data: the ranking on scorer `primary` (the spec's primary scorer), every other
    scorer's figures per model, and a verdict for every pair of comparable runs.

    A model whose stats have no row for `primary` (written before the spec's scorers
    changed) is listed last, without a rank figure, until its stats are re-materialized."""
    by_model: dict[str, dict[str, dict[str, Any]]] = {}
    for row in stats_rows:
        by_model.setdefault(row["model"], {})[row["scorer"]] = row
    models = []
    for model, rows in by_model.items():
        main = rows.get(primary)
        entry: dict[str, Any] = {"model": model, "scorer": primary}
        entry.update(_figures(main) if main else dict.fromkeys(FIGURES))
        entry["others"] = {name: _figures(r) for name, r in rows.items() if name != primary}
        if main is None:
            entry["missing"] = f"no figures for scorer {primary!r}; re-materialize its stats"
        models.append(entry)
    models.sort(key=lambda m: (m["pass_rate"] is None, -(m["pass_rate"] or 0.0), m["model"]))

    runs: list[tuple[str, Run | InputError]] = []
    for m in models:
        if "missing" in m:
            continue
        try:
            runs.append((m["model"], load_run(Path(by_model[m["model"]][primary]["run_dir"]))))
        except InputError as exc:
            runs.append((m["model"], exc))
    pairs = [_pair(p) for p in every_pair(runs, [primary])]
    others = sorted({name for m in models for name in m["others"]})
    return {"primary": primary, "scorers": [primary, *others], "models": models, "pairs": pairs}


def _pair(pairing: Pairing) -> dict[str, Any]:
    a, b, result = pairing.label_a, pairing.label_b, pairing.comparison
    if result is None:
        return {"a": a, "b": b, "refused": pairing.refused}
    interval = result.difference.interval
    return {
        "a": a,
        "b": b,
        "scorer": pairing.scorer,
        "n": result.n,
        "difference": result.difference.value,
        "low": interval.low if interval else None,
        "high": interval.high if interval else None,
        "warning": result.difference.warning,
        "paired_test": result.test,
        "paired_p": result.p_value,
        "verdict": result.verdict,
        "winner": pairing.winner,
        # The smallest difference the pair could detect with 80 % power (see stats.power).
        "minimum_detectable_effect": result.mde,
    }


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _rate(figures: dict[str, Any] | None) -> str:
    if figures is None or figures["pass_rate"] is None:
        return "n/a"
    return (
        f"{_fmt(figures['pass_rate'])} ({_fmt(figures['pass_low'])}–{_fmt(figures['pass_high'])})"
    )


def leaderboard_metadata(board: dict[str, Any]) -> dict[str, Any]:
    primary = board["primary"]
    md = markdown_text
    others = [s for s in board["scorers"] if s != primary]
    header = (
        f"| rank | model | passed ({md(primary)}) | pass rate ({md(primary)}) | 95% CI |"
        + "".join(f" {md(name)} pass rate (95% CI) |" for name in others)
    )
    rule = "|---|---|---|---|---|" + "---|" * len(others)
    lines = []
    for i, m in enumerate(board["models"], start=1):
        rank = "–" if "missing" in m else str(i)
        passed = "n/a" if m["passed"] is None else f"{m['passed']}/{m['n']}"
        lines.append(
            f"| {rank} | {md(m['model'])} | {passed} | {_fmt(m['pass_rate'])} "
            f"| {_fmt(m['pass_low'])}–{_fmt(m['pass_high'])} |"
            + "".join(f" {_rate(m['others'].get(name))} |" for name in others)
        )
    table = "\n".join([header, rule, *lines])
    verdicts = [
        f"| {md(p['a'])} vs {md(p['b'])} | refused: {md(p['refused'])} | | |"
        if "refused" in p
        else f"| {md(p['a'])} vs {md(p['b'])} | {_fmt(p['difference'])} "
        f"({_fmt(p['low'])}–{_fmt(p['high'])}, n={p['n']}"
        f"{'; warning: ' + md(p['warning']) if p.get('warning') else ''}) "
        f"| {p['paired_p']:.4g} ({p['paired_test']}) "
        f"| {md(p['winner']) if p['winner'] else 'no winner'} |"
        for p in board["pairs"]
    ]
    if verdicts:
        table += (
            f"\n\nPaired on {md(primary)}:\n\n"
            "| pair (A vs B) | difference B−A | paired test p | winner |\n|---|---|---|---|\n"
            + "\n".join(verdicts)
        )
    return {
        "leaderboard": dg.MetadataValue.md(table),
        "primary_scorer": dg.MetadataValue.text(primary),
        "models": dg.MetadataValue.int(len(board["models"])),
        "board": dg.MetadataValue.json(board),
    }
