"""The HTML report: one self-contained file (embedded CSS, no script, nothing fetched).

Every value reaches the page through jinja2 with autoescape on, so a model response
such as `<script>...</script>` is shown as text. Autoescape is set explicitly: the
template is `*.html.j2`, which `select_autoescape` would not recognise as HTML. The
page's Content-Security-Policy forbids scripts and fetches as a second line of defence.
Every value is also written through `text.visible` (the environment's `finalize`), so a
bidirectional override or a NUL in an id or a response shows as its escape (`\\u202e`)
and never reorders or hides the text around it.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from gradetrail_lib.analysis.calibration import Calibration, Figure, run_calibrations
from gradetrail_lib.analysis.pairwise import Pairing, every_pair, rank_runs
from gradetrail_lib.analysis.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_THRESHOLD,
    BootstrapSettings,
    ProportionMethod,
    RunStats,
    run_stats,
)
from gradetrail_lib.analysis.stats.ranking import RANK_INTERVAL
from gradetrail_lib.analysis.stats.repeats import RepeatStats, has_repeats, repeat_stats
from gradetrail_lib.analysis.stats.run_stats import percent
from gradetrail_lib.analysis.summary import (
    RunSummary,
    format_cost,
    format_judge_errors,
    format_savings,
    format_tokens,
    format_total_cost,
)
from gradetrail_lib.errors import NotComparable
from gradetrail_lib.providers.media import message_text
from gradetrail_lib.providers.pricing import format_call_cost, format_usd
from gradetrail_lib.report.media import MediaView, media_files, media_views
from gradetrail_lib.report.svg import ForestRow, forest_plot
from gradetrail_lib.results.runs import Run, distinct_labels, load_runs
from gradetrail_lib.results.text import visible
from gradetrail_lib.results.totals import RunTotals
from gradetrail_lib.results.trace import AGENT_STOPS, AgentStep, CallTotals, Manifest, TraceRecord

REPORT_FILE = "report.html"
# Records read at a time: the report holds a run's totals and its failures' views, not
# its records (the calls its totals count are the manifest's, so any size does).
READ_BATCH = 8192
TEMPLATE = "report.html.j2"

FAILURE_LABELS = {
    "truncated": "truncated (hit max_tokens)",
    "wrong_answer": "wrong answer",
    "provider_error": "provider error",
    "scorer_error": "scorer error",
    "judge_error": "judge error",
    "tool_error": "tool error",
    "thrash": "thrash (same call, nothing new)",
    "budget_exhausted": "over the step budget",
}
# An agent stopped early has failed that way whatever its last words scored.


@dataclass(frozen=True)
class Message:
    role: str
    text: str
    # Its images and documents (`report.media`), after the text.
    media: tuple[MediaView, ...] = ()


@dataclass(frozen=True)
class ScoreLine:
    scorer: str
    score: float | None
    reason: str
    error: str | None
    # A judge's whole output, for the scorers that called one.
    judge_output: list[str]


@dataclass(frozen=True)
class ToolCallView:
    """One tool call of an agent step, and its result (None: the tool was not run)."""

    id: str
    name: str
    arguments: str  # pretty JSON
    ran: bool
    content: str | None
    error: str | None
    documents: list[str]  # the ids of the documents the result carried


@dataclass(frozen=True)
class StepView:
    number: int  # from 1
    anchor: str  # the step's element id, unique in the page
    summary: str
    content: str
    calls: list[ToolCallView]
    request_key: str
    tokens: str
    latency_s: float | None
    cache_hit: bool
    stop_reason: str | None
    error: str | None
    # Why the agent was stopped after this step (its last), if it was.
    stopped: str | None


@dataclass(frozen=True)
class FailedSample:
    id: str
    kind: str  # a FAILURE_LABELS key, or "below_threshold"
    label: str
    score: float | None
    messages: list[Message]
    response: str | None
    stop_reason: str | None
    reason: str
    tokens: str
    latency_s: float | None
    scores: list[ScoreLine]
    # An agent's steps (empty for a single request), and the error of a last call that
    # failed (it has no step).
    trajectory: list[StepView]
    trajectory_error: str | None


@dataclass(frozen=True)
class RunView:
    label: str
    stats: RunStats  # the primary scorer's
    scorers: list[RunStats]  # every scorer's, the primary first
    judge: CallTotals
    facts: list[tuple[str, str]]
    warnings: list[str]
    failures: list[FailedSample]
    # With repeats (a case with more than one record): every scorer's pass@k and pass^k.
    repeats: list[RepeatStats] = field(default_factory=list)
    # The judges with human labels on the run's responses.
    calibrations: list[Calibration] = field(default_factory=list)
    # The run's summary (its manifest's): the counts and costs every surface shows.
    summary: RunSummary | None = None


@dataclass(frozen=True)
class FigureCell:
    """One figure of the judges-against-labels table: `0.021 [-0.203, 0.245]`, the method
    that made it, and the number of its footnote (a warning, or why it is not shown)."""

    text: str
    method: str
    note: int | None = None


@dataclass(frozen=True)
class CalibrationRow:
    scorer: str
    labels: int
    random: int
    figures: list[FigureCell]  # kappa, sensitivity, specificity, judge, corrected


@dataclass(frozen=True)
class CalibrationTable:
    """The judges against human labels, with every warning and every reason a figure is
    withheld as a numbered footnote under the table: inline, one warning made the table
    2,400 px wide."""

    rows: list[CalibrationRow]
    notes: list[str]


def calibration_table(calibrations: Sequence[Calibration]) -> CalibrationTable:
    notes: list[str] = []

    def note(text: str | None) -> int | None:
        if not text:
            return None
        if text not in notes:
            notes.append(text)
        return notes.index(text) + 1

    def cell(name: str, figure: Figure) -> FigureCell:
        warning = f"{name}: {figure.warning}" if figure.warning else None
        return FigureCell(figure.figure(), figure.method, note(warning))

    rows = []
    for c in calibrations:
        figures = [
            cell("kappa", c.kappa),
            cell("sensitivity", c.sensitivity),
            cell("specificity", c.specificity),
            cell("judge pass rate", c.judge_pass_rate),
        ]
        corrected = c.corrected_pass_rate
        figures.append(
            cell("corrected pass rate", corrected)
            if corrected is not None
            else FigureCell(
                "not shown", "", note(f"corrected pass rate not shown: {c.why_uncorrected}")
            )
        )
        rows.append(CalibrationRow(c.scorer, c.n_labeled, c.n_random, figures))
    return CalibrationTable(rows, notes)


def _messages(raw: Any, files: Mapping[str, str] | None = None) -> list[Message]:
    """The messages as shown: a text, or with media the text parts and each medium
    (`files`: the media files found by hash, for thumbnails)."""
    if not isinstance(raw, list):
        return []
    out = []
    for m in raw:
        if isinstance(m, Mapping):
            content = m.get("content")
            media = tuple(media_views(content, files or {}))
            if isinstance(content, str):
                text = content
            elif media:
                text = message_text(content)
            else:
                text = json.dumps(content, indent=2)
            out.append(Message(str(m.get("role", "?")), text, media))
    return out


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _tokens(input_tokens: int | None, output_tokens: int | None) -> str:
    def count(n: int | None) -> str:
        return "?" if n is None else str(n)

    return f"{count(input_tokens)} in / {count(output_tokens)} out"


def _tool_calls(step: AgentStep) -> list[ToolCallView]:
    # A step's results are in the order of its calls, one each, or none at all when the
    # agent was stopped before running them (a thrash).
    results = step.tool_results if len(step.tool_results) == len(step.tool_calls) else None
    views = []
    for i, call in enumerate(step.tool_calls):
        result = results[i] if results is not None else None
        documents = result.documents if result is not None else []
        views.append(
            ToolCallView(
                id=str(call.get("id", "")),
                name=str(call.get("name", "?")),
                arguments=_json(call.get("arguments", {})),
                ran=result is not None,
                content=result.content if result is not None else None,
                error=result.error if result is not None else None,
                documents=[str(d.get("id", "?")) if isinstance(d, Mapping) else "?"
                           for d in documents],
            )
        )  # fmt: skip
    return views


def _step_summary(step: AgentStep, calls: list[ToolCallView]) -> str:
    if not calls:
        return "answered" if step.content else "answered (no text)"
    names = ", ".join(c.name for c in calls)
    errors = sum(c.error is not None for c in calls)
    return f"called {names}" + (
        f" ({errors} tool error{'s' if errors > 1 else ''})" if errors else ""
    )


def _trajectory(record: TraceRecord, anchor: str) -> list[StepView]:
    steps = []
    last = len(record.trajectory) - 1
    stopped = record.failure_mode if record.failure_mode in AGENT_STOPS else None
    for i, step in enumerate(record.trajectory):
        calls = _tool_calls(step)
        steps.append(
            StepView(
                number=i + 1,
                anchor=f"{anchor}-step{i + 1}",
                summary=_step_summary(step, calls),
                content=step.content,
                calls=calls,
                request_key=step.request_key,
                tokens=_tokens(step.input_tokens, step.output_tokens),
                latency_s=step.latency_s,
                cache_hit=step.cache_hit,
                stop_reason=step.stop_reason,
                error=step.error,
                stopped=FAILURE_LABELS[stopped] if stopped and i == last else None,
            )
        )
    return steps


def _trajectory_error(record: TraceRecord) -> str | None:
    """An agent's last call that failed: it made no step (the calls are one per step)."""
    target = list(record.calls_of("target"))
    if record.trajectory and len(target) > len(record.trajectory):
        return target[-1].error
    return None


def sample_view(
    record: TraceRecord,
    primary: str,
    threshold: float,
    anchor: str,
    media: Mapping[str, str] | None = None,
) -> FailedSample:
    """A sample as the report shows a failed one (and the viewer any one): its kind of
    failure, if it failed, and everything `sample.html.j2` renders; `anchor` prefixes
    the ids of its steps' elements, unique within a page; `media`: the run's media files
    by hash (`report.media.media_files`), for its images' thumbnails."""
    # Truncation first: a cut-off answer is a budget problem, not a wrong answer.
    kind = "truncated" if record.truncated else (record.failure_mode or "below_threshold")
    label = FAILURE_LABELS.get(kind, "below the pass threshold")
    found = record.scorer_error()
    # Listed for another scorer's error (not for an agent stopped early).
    if record.passes(primary, threshold) and kind not in AGENT_STOPS and found is not None:
        name, entry = found
        kind = entry.error or kind
        label = f"{FAILURE_LABELS.get(kind, kind)} ({name})"
    target = record.target
    tokens = (
        f"{target.input_tokens} in / {target.output_tokens} out"
        if record.answered and target is not None
        else "no response"
    )
    latency = target.latency_s if target is not None else None
    steps = [c for c in record.calls_of("target") if c.error is None]
    if record.trajectory and record.answered and len(steps) > 1:  # an agent: every step
        used = _tokens(sum(c.input_tokens or 0 for c in steps),
                       sum(c.output_tokens or 0 for c in steps))  # fmt: skip
        tokens = f"{used} over {len(steps)} calls"
        latency = sum(c.latency_s or 0.0 for c in steps)
    lines = []
    for name, entry in record.scores.items():
        outputs = [c.text or c.error or "" for c in record.calls if c.scorer == name]
        lines.append(ScoreLine(name, entry.score, entry.reason, entry.error, outputs))
    primary_entry = record.scores.get(primary)
    return FailedSample(
        id=record.id if record.repeat == 0 else f"{record.id}#{record.repeat}",
        kind=kind,
        label=label,
        score=record.score_of(primary),
        messages=_messages(record.messages, media),
        response=record.response,
        stop_reason=record.stop_reason,
        reason=primary_entry.reason if primary_entry else "",
        tokens=tokens,
        latency_s=latency,
        scores=lines,
        trajectory=_trajectory(record, anchor),
        trajectory_error=_trajectory_error(record),
    )


def _text(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | dict):
        return json.dumps(value, sort_keys=True) if value else "none"
    return str(value)


def reproducibility_facts(model: Manifest) -> list[tuple[str, str]]:
    manifest = model.model_dump(mode="json")

    def get(*path: str) -> Any:
        node: Any = manifest
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        return node

    sha, dirty = get("git", "sha"), get("git", "dirty")
    git = "not a git checkout" if sha is None else f"{sha}{' (dirty work tree)' if dirty else ''}"
    timings = get("timings_s") or {}
    return [
        ("identity", _text(get("identity"))),
        ("spec", f"{_text(get('spec', 'name'))} ({_text(get('spec', 'path'))})"),
        ("spec hash", _text(get("spec", "hash"))),
        ("dataset", f"{_text(get('dataset', 'path'))} sha256 {_text(get('dataset', 'hash'))}"),
        ("scorers", ", ".join(f"{i.name} ({i.type}, {i.hash[:12]})" for i in model.scorers)),
        ("scorer hash", _text(get("scorer_hash"))),
        ("scorer files", _text(get("scorer_files"))),
        ("judge hashes", _text(get("judge_hashes"))),
        ("requests hash", _text(get("requests_hash"))),
        ("repeats", _text(get("repeats"))),
        ("provider", _text(get("model", "provider"))),
        ("requested model", _text(get("model", "requested"))),
        ("served model", _text(get("model", "served"))),
        ("base URL", _text(get("model", "base_url"))),
        ("git", git),
        ("gradetrail version", _text(get("gradetrail_version"))),
        (
            "pricing",
            f"{_text(get('pricing', 'version'))} of {_text(get('pricing', 'effective_date'))}",
        ),
        ("execution", _text(get("execution"))),
        ("started / finished", f"{_text(get('started_at'))} / {_text(get('finished_at'))}"),
        ("timings (s)", ", ".join(f"{k} {float(v):.2f}" for k, v in timings.items()) or "unknown"),
        ("calls / cache hits", f"{model.target.calls} / {model.target.cache_hits}"),
        ("cost", format_cost(model.target)),
        (
            "judge calls / cache hits / failed calls",
            f"{model.judge.calls} / {model.judge.cache_hits} / {model.judge.errors}",
        ),
        ("judge errors (no usable grade)", format_judge_errors(RunSummary.of(model)) or "none"),
        ("judge cost", format_cost(model.judge)),
        *_usage_facts(model),
        *_release_facts(model),
    ]


def _release_facts(model: Manifest) -> list[tuple[str, str]]:
    """A run of a release check (`run --until-decided`): its verdict, with the method, the
    sequence and the cases used, so the report of its few cases says why they are few."""
    check = model.sequential
    if not check:
        return []
    sequence = check.get("confidence_sequence")
    bounds = (
        f"[{float(sequence['low']):+.3f}, {float(sequence['high']):+.3f}]"  # type: ignore[arg-type]
        if isinstance(sequence, Mapping)
        else "unknown"
    )
    return [
        (
            "release check (until decided)",
            f"{_text(check.get('verdict'))} (winner {_text(check.get('winner'))}): "
            f"{_text(check.get('challenger'))} against {_text(check.get('incumbent'))}, "
            f"confidence sequence {bounds} ({_text(check.get('method'))}), "
            f"{_text(check.get('cases_used'))} of {_text(check.get('cases_available'))} cases",
        )
    ]


def _usage_facts(model: Manifest) -> list[tuple[str, str]]:
    """What batch and prompt caching saved, and the reasoning tokens (only when a call
    went by batch, touched a prompt cache or reasoned)."""
    facts = []
    for label, totals in (("", model.target), ("judge ", model.judge)):
        saved = format_savings(totals)
        if saved is not None:
            facts.append((f"{label}batch and prompt caching", saved))
        if totals.reasoning_tokens:
            facts.append((f"{label}tokens", format_tokens(totals)))
    return facts


def _usd(value: Any) -> str:
    """A manifest's cost field: a number, or null when a price was unknown."""
    return format_usd(float(value) if isinstance(value, int | float) else None)


def _check_one_identity(runs: Sequence[Run], labels: Sequence[str]) -> None:
    identities = {r.manifest.identity for r in runs}
    if len(identities) > 1:
        pairs = zip(labels, runs, strict=True)
        listed = "; ".join(f"{label}: {r.manifest.identity[:12]}" for label, r in pairs)
        raise NotComparable(
            f"a report covers runs of one identity (one spec, dataset and scorer); got {listed}"
        )


def build_views(
    runs: Sequence[Run],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
) -> tuple[list[RunView], list[Pairing]]:
    labels = distinct_labels(runs)
    options: dict[str, Any] = {
        "threshold": threshold, "confidence": confidence, "method": method, "settings": settings,
    }  # fmt: skip
    views = []
    for number, (label, run) in enumerate(zip(labels, runs, strict=True)):
        primary = run.manifest.primary_scorer
        totals = RunTotals(run.manifest.scorer_names)
        failures: list[FailedSample] = []
        records = iter(run)  # streamed: the totals and the failures' views are kept
        files = media_files(run.manifest)
        position = 0
        while batch := list(islice(records, READ_BATCH)):
            totals.add_all(batch)
            # Failing the primary scorer, or with any scorer's error (a judge that could
            # not grade, a Python scorer that raised), or an agent stopped early: all need
            # a reader's eyes.
            failures += [
                sample_view(r, primary, threshold, f"run{number}-sample{position + i}", files)
                for i, r in enumerate(batch)
                if not r.passes(primary, threshold)
                or r.scorer_error() is not None
                or r.failure_mode in AGENT_STOPS
            ]
            position += len(batch)
        every = [run_stats(totals, name, **options) for name in run.manifest.scorer_names]
        repeats = (
            [repeat_stats(totals, name, **options) for name in run.manifest.scorer_names]
            if has_repeats(totals)
            else []
        )
        views.append(
            RunView(
                label, every[0], every, run.manifest.judge,
                reproducibility_facts(run.manifest), list(run.manifest.warnings), failures,
                repeats, run_calibrations(run.path) if run.path is not None else [],
                RunSummary.of(run.manifest),
            )
        )  # fmt: skip
    return views, every_pair(list(zip(labels, runs, strict=True)), **options)


def _shown(value: Any) -> Any:
    """Every `{{ value }}` of a page: text with its bidirectional controls and NULs as
    escapes. Markup too (an SVG plot, already escaped): an escape holds no HTML
    metacharacter, so it stays markup. A form field that must carry a record's exact text
    carries it percent-encoded, as links do (`links.segment`)."""
    if isinstance(value, Markup):
        return Markup(visible(str(value)))
    if isinstance(value, str):
        return visible(value)
    return value


def environment(*loaders: jinja2.BaseLoader) -> jinja2.Environment:
    """The report's templates and filters, autoescaped, every value shown through
    `visible`; `loaders` are searched first (the viewer's pages, which import the
    report's `sample.html.j2`)."""
    own = jinja2.PackageLoader("gradetrail_lib.report", "templates")
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader([*loaders, own]) if loaders else own,
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    env.filters["usd"] = _usd
    # A role's calls' cost (a local model's has no price), and one call's.
    env.filters["total_cost"] = format_total_cost
    env.filters["call_cost"] = lambda call: format_call_cost(call.provider, call.cost_usd)
    env.filters["num"] = lambda x, d=3: "n/a" if x is None else f"{float(x):.{d}f}"
    env.filters["percent"] = percent
    env.globals["calibration_table"] = calibration_table
    return env


def render_report(
    runs: Sequence[Run],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    confidence: float = DEFAULT_CONFIDENCE,
    method: ProportionMethod = "wilson",
    settings: BootstrapSettings | None = None,
    title: str | None = None,
) -> str:
    """The report for one or more runs of one identity (e.g. one per model)."""
    if not runs:
        raise ValueError("a report needs at least one run")
    labels = distinct_labels(runs)
    _check_one_identity(runs, labels)
    views, pairs = build_views(
        runs, threshold=threshold, confidence=confidence, method=method, settings=settings
    )
    spec = runs[0].manifest.spec.name
    primary = runs[0].manifest.primary_scorer
    ranking, not_ranked = None, None
    if len(runs) > 1:
        # Tiers and rank intervals on the primary scorer, or why there are none.
        try:
            ranking, _ = rank_runs(
                list(zip(labels, runs, strict=True)), primary, threshold=threshold,
                confidence=confidence, settings=settings,
            )  # fmt: skip
        except NotComparable as exc:
            not_ranked = str(exc)
    forest = forest_plot(
        [ForestRow(v.label, v.stats.pass_rate) for v in views],
        title=f"{primary} pass rate per model, {percent(confidence)} CI ({method})",
    )
    return (
        environment()
        .get_template(TEMPLATE)
        .render(
            title=title or f"gradetrail report: {spec}",
            spec_name=spec,
            identity=runs[0].manifest.identity,
            runs=views,
            pairs=pairs,
            ranking=ranking,
            not_ranked=not_ranked,
            rank_interval_method=RANK_INTERVAL,
            forest=forest,
            threshold=threshold,
            confidence=confidence,
            method=method,
            bootstrap=settings or BootstrapSettings(),
        )
    )


def write_report(
    run_dir: Path | Sequence[Path],
    output: Path | None = None,
    **options: Any,
) -> Path:
    """Render the report for one run directory (or several of one identity) and write it,
    by default to <first run dir>/report.html. Returns the path written."""
    dirs = [run_dir] if isinstance(run_dir, Path) else list(run_dir)
    runs = load_runs(dirs)
    target = output or dirs[0] / REPORT_FILE
    html = render_report(runs, **options)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Written whole and renamed, so a browser never opens half a report.
    staging = target.with_name(f".{target.name}.tmp")
    staging.write_text(html, encoding="utf-8")
    staging.replace(target)
    return target
