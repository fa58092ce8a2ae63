"""The leaderboard of a spec: models ranked on the primary scorer with the family-wise
error held (`rank_runs`: every pair's paired test, Holm's adjustment, a simultaneous rank
interval and a tier per model), the other scorers' figures beside them, and every pair's
paired difference with its raw and adjusted p. A model is shown in a tier and with a
rank interval rather than at a bare position: models of one tier cannot be told apart.

Model names, run labels, scorer names and refusals reach the Markdown through
`markdown_text` (a name is data: never a link, HTML or a table's end); the board's JSON
keeps them as they are."""

from pathlib import Path
from typing import Any

import dagster as dg

from gradetrail_lib.analysis.pairwise import Pairing, every_pair, rank_runs
from gradetrail_lib.analysis.stats.ranking import HOLM, RANK_INTERVAL, Ranking
from gradetrail_lib.errors import InputError, NotComparable
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
    board: dict[str, Any] = {
        "primary": primary,
        "scorers": [primary, *others],
        "models": models,
        "pairs": pairs,
    }
    board["ranking"] = _rank(board, runs, primary)
    return board


def _rank(
    board: dict[str, Any], runs: list[tuple[str, Run | InputError]], primary: str
) -> dict[str, Any]:
    """Tiers and rank intervals on the board's models and the adjusted p on its pairs;
    the ranking's JSON, or why there is none (`refused`: a run unread, runs that cannot
    be paired, fewer than two)."""
    readable = [(label, run) for label, run in runs if isinstance(run, Run)]
    unread = [f"{label}: {run}" for label, run in runs if isinstance(run, InputError)]
    if unread:
        return {"refused": "; ".join(unread)}
    try:
        ranking, _ = rank_runs(readable, primary)
    except NotComparable as exc:
        return {"refused": str(exc)}
    _annotate(board, ranking)
    return ranking.to_json()


def _annotate(board: dict[str, Any], ranking: Ranking) -> None:
    ranked = {m.label: m for m in ranking.models}
    for entry in board["models"]:
        m = ranked.get(entry["model"])
        if m is not None:
            entry["tier"] = m.tier
            entry["rank_interval"] = {
                "best": m.best_rank,
                "worst": m.worst_rank,
                "method": RANK_INTERVAL,
            }
    # Ranked models by tier, then by the ranking's order; unranked (missing) ones last.
    order = {m.label: m.rank for m in ranking.models}
    board["models"].sort(
        key=lambda e: (e.get("tier") is None, e.get("tier") or 0, order.get(e["model"], 0))
    )
    tested = {(p.a, p.b): p for p in ranking.pairs}
    for pair in board["pairs"]:
        p = tested.get((pair["a"], pair["b"]))
        if p is not None and "refused" not in pair:
            pair["adjusted_p"] = p.adjusted_p
            pair["adjustment"] = HOLM
            pair["separated"] = p.separated is not None
            pair["better"] = p.separated


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


def _interval(m: dict[str, Any]) -> str:
    interval = m.get("rank_interval")
    if interval is None:
        return "–"
    best, worst = interval["best"], interval["worst"]
    return str(best) if best == worst else f"{best}–{worst}"


def _separated(p: dict[str, Any]) -> str:
    if "adjusted_p" not in p:
        return "n/a | not ranked"
    better = f"{markdown_text(p['better'])} is better" if p["better"] else "no"
    return f"{p['adjusted_p']:.4g} | {better}"


def leaderboard_metadata(board: dict[str, Any]) -> dict[str, Any]:
    primary = board["primary"]
    md = markdown_text
    others = [s for s in board["scorers"] if s != primary]
    header = (
        f"| tier | rank interval ({RANK_INTERVAL}) | model | passed ({md(primary)}) "
        f"| pass rate ({md(primary)}) | 95% CI |"
        + "".join(f" {md(name)} pass rate (95% CI) |" for name in others)
    )
    rule = "|---|---|---|---|---|---|" + "---|" * len(others)
    lines = []
    for m in board["models"]:
        tier = "–" if m.get("tier") is None else str(m["tier"])
        passed = "n/a" if m["passed"] is None else f"{m['passed']}/{m['n']}"
        lines.append(
            f"| {tier} | {_interval(m)} | {md(m['model'])} | {passed} | {_fmt(m['pass_rate'])} "
            f"| {_fmt(m['pass_low'])}–{_fmt(m['pass_high'])} |"
            + "".join(f" {_rate(m['others'].get(name))} |" for name in others)
        )
    table = "\n".join([header, rule, *lines])
    ranking = board.get("ranking") or {}
    if "method" in ranking:
        table += (
            f"\n\nTiers and rank intervals on {md(primary)}: "
            f"{md(ranking['method']['text'])}. With "
            f"{ranking['confidence']:.0%} confidence every model's rank (1 = best) lies in its "
            "interval at once; models of one tier are not told apart."
        )
    elif "refused" in ranking:
        table += f"\n\nNot ranked: {md(ranking['refused'])}"
    verdicts = [
        f"| {md(p['a'])} vs {md(p['b'])} | refused: {md(p['refused'])} | | | |"
        if "refused" in p
        else f"| {md(p['a'])} vs {md(p['b'])} | {_fmt(p['difference'])} "
        f"({_fmt(p['low'])}–{_fmt(p['high'])}, n={p['n']}"
        f"{'; warning: ' + md(p['warning']) if p.get('warning') else ''}) "
        f"| {p['paired_p']:.4g} ({p['paired_test']}) "
        f"| {_separated(p)} |"
        for p in board["pairs"]
    ]
    if verdicts:
        table += (
            f"\n\nPaired on {md(primary)} (p adjusted over every pair by Holm's step-down; "
            "a pair is separated when its adjusted p is below alpha):\n\n"
            "| pair (A vs B) | difference B−A (95% CI, per pair) | paired test p "
            "| adjusted p (holm) | separated |\n|---|---|---|---|---|\n" + "\n".join(verdicts)
        )
    return {
        "leaderboard": dg.MetadataValue.md(table),
        "primary_scorer": dg.MetadataValue.text(primary),
        "models": dg.MetadataValue.int(len(board["models"])),
        "board": dg.MetadataValue.json(board),
    }
