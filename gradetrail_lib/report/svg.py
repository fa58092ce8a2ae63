"""Pictures drawn on the server as inline SVG: a forest plot (one row per model: the pass
rate as a dot, its interval as a line) and a history plot (one run after another: the
pass rate and its interval over time).

No chart library, no script, no style sheet: colours are presentation attributes, so a
picture looks the same in the viewer (whose CSP allows style sheets from itself only)
and in the self-contained report. Every label goes through `text.visible` and
`markupsafe.escape`: model, spec and run names are data. A label's width is estimated on
the generous side (`text_width`: no font metrics on the server) and the label column is
as wide as the longest label needs, up to `LABEL_SHARE` of the plot; a label longer than
that is cut with "…", so no label runs past the plot's edge.
"""

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

from gradetrail_lib.analysis.stats.intervals import Estimate
from gradetrail_lib.results.text import visible

INK = "#1d232b"
MUTED = "#5b6673"
GRID = "#d7dce2"
DOT = "#1f5fa8"
FONT = 'font-family="system-ui, sans-serif"'
TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)
LABEL_SHARE = 0.45  # of the forest plot's width, at most, for the model labels


@dataclass(frozen=True)
class ForestRow:
    label: str
    estimate: Estimate
    href: str | None = None  # the label links here (a run's page)
    note: str = ""  # shown in the row's tooltip


@dataclass(frozen=True)
class HistoryPoint:
    when: str  # ISO timestamp of the run
    estimate: Estimate
    href: str | None = None
    note: str = ""


def _f(x: float) -> str:
    return f"{x:.1f}"


def _clip(text: str, limit: int) -> str:
    text = visible(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _em(char: str) -> float:
    """A character's advance in em, on the wide side of common sans-serif fonts."""
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return 1.05
    if char in "MWmw@%":
        return 1.0
    if char.isupper():
        return 0.8
    return 0.64


def text_width(text: str, size: float) -> float:
    """`text`'s width at font size `size`, estimated generously."""
    return size * sum(_em(c) for c in text)


def _fit(text: str, size: float, room: float) -> str:
    """`text` (its controls made visible), cut with "…" to fit `room` at `size`."""
    text = visible(text)
    if text_width(text, size) <= room:
        return text
    room -= text_width("…", size)
    kept = []
    for char in text:
        room -= text_width(char, size)
        if room < 0:
            break
        kept.append(char)
    return "".join(kept) + "…"


def _figure(estimate: Estimate) -> str:
    if estimate.value is None or estimate.interval is None:
        return f"n/a ({estimate.n_text})"
    return f"{estimate.value:.3f} {estimate.interval.format(3)}"


def _tooltip(label: str, estimate: Estimate, note: str) -> str:
    text = f"{label}: {_figure(estimate)}, {estimate.n_text}"
    return visible(f"{text}; {note}" if note else text)


def _link(href: str | None, inner: str) -> str:
    return f'<a href="{escape(href)}">{inner}</a>' if href else inner


def forest_plot(rows: Sequence[ForestRow], *, title: str, width: int = 720) -> Markup:
    """One row per entry: label, the interval as a line with the estimate as a dot on a
    0-1 axis, and the figure as text. Rows with n = 0 say n/a."""
    value_w, row_h, top, bottom, gap, size = 150, 22, 26, 26, 10, 12
    widest = max((text_width(visible(r.label), size) for r in rows), default=0.0)
    # Rounded up: rounded down, the longest label lost its last character to a fraction.
    label_w = math.ceil(min(max(widest + gap + 2, 120), width * LABEL_SHARE))
    x0, x1 = label_w, width - value_w
    height = top + row_h * max(len(rows), 1) + bottom

    def x(value: float) -> float:
        return x0 + (x1 - x0) * min(max(value, 0.0), 1.0)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="forest" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-label="{escape(visible(title))}">',
        f"<title>{escape(visible(title))}</title>",
        f'<text x="0" y="15" {FONT} font-size="13" font-weight="600" fill="{INK}">'
        f"{escape(_fit(title, 13, width))}</text>",
    ]
    axis_y = top + row_h * max(len(rows), 1)
    for tick in TICKS:
        tx = _f(x(tick))
        parts.append(
            f'<line x1="{tx}" y1="{top}" x2="{tx}" y2="{axis_y}" stroke="{GRID}" '
            f'stroke-width="1"/>'
            f'<text x="{tx}" y="{axis_y + 16}" {FONT} font-size="11" fill="{MUTED}" '
            f'text-anchor="middle">{tick:g}</text>'
        )
    for i, row in enumerate(rows):
        cy = top + row_h * i + row_h / 2
        tip = escape(_tooltip(row.label, row.estimate, row.note))
        label = (
            f'<text x="{x0 - gap}" y="{_f(cy + 4)}" {FONT} font-size="{size}" fill="{INK}" '
            f'text-anchor="end">{escape(_fit(row.label, size, x0 - gap - 2))}</text>'
        )
        parts.append(f"<g><title>{tip}</title>{_link(row.href, label)}")
        est, ci = row.estimate, row.estimate.interval
        if est.value is not None and ci is not None:
            parts.append(
                f'<line x1="{_f(x(ci.low))}" y1="{_f(cy)}" x2="{_f(x(ci.high))}" '
                f'y2="{_f(cy)}" stroke="{DOT}" stroke-width="2"/>'
                f'<line x1="{_f(x(ci.low))}" y1="{_f(cy - 5)}" x2="{_f(x(ci.low))}" '
                f'y2="{_f(cy + 5)}" stroke="{DOT}" stroke-width="1.5"/>'
                f'<line x1="{_f(x(ci.high))}" y1="{_f(cy - 5)}" x2="{_f(x(ci.high))}" '
                f'y2="{_f(cy + 5)}" stroke="{DOT}" stroke-width="1.5"/>'
                f'<rect x="{_f(x(est.value) - 4)}" y="{_f(cy - 4)}" width="8" height="8" '
                f'fill="{DOT}"/>'
            )
        parts.append(
            f'<text x="{x1 + 10}" y="{_f(cy + 4)}" font-family="ui-monospace, monospace" '
            f'font-size="11" fill="{MUTED}">{escape(_figure(est))}</text></g>'
        )
    if not rows:
        parts.append(
            f'<text x="{x0}" y="{top + 15}" {FONT} font-size="12" fill="{MUTED}">no runs</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def labelled(count: int, most: int) -> list[int]:
    """Which of `count` evenly spaced points get a label: about `most`, the last always."""
    every = max(1, (count + most - 1) // most)
    return [i for i in range(count) if i % every == 0 or i == count - 1]


# A run's time in ever longer forms (its ISO timestamp, UTC, sliced): the axis takes the
# first that tells its labelled runs apart.
_DAY = (lambda w: w[5:10], 6)  # 12-06, and how many labels fit the axis
_FORMS = (
    (lambda w: w[11:16], 6),  # 14:05, all on one day
    (lambda w: w[11:19], 5),  # 14:05:09
    (lambda w: f"{w[5:10]} {w[11:16]}", 4),  # 12-06 14:05
    (lambda w: f"{w[5:10]} {w[11:19]}", 3),  # 12-06 14:05:09
)


def time_labels(whens: Sequence[str]) -> tuple[dict[int, str], str]:
    """The x labels of runs at ISO timestamps `whens` (oldest first), by position, and a
    caption for what they leave out: the day when every run is on one day (`12-06` on
    every label told nothing). Labels differ from one another: the shortest form that
    tells the labelled runs apart, else the runs' numbers."""
    days = {w[:10] for w in whens}
    one_day = len(days) == 1
    forms = _FORMS if one_day else (_DAY, *_FORMS[2:])
    caption = f"on {next(iter(days))} (UTC)" if one_day and whens else "UTC"
    for form, most in forms:
        shown = labelled(len(whens), most)
        texts = [form(whens[i]) for i in shown]
        if len(set(texts)) == len(texts):
            return dict(zip(shown, texts, strict=True)), caption
    shown = labelled(len(whens), 6)
    return {i: f"run {i + 1}" for i in shown}, f"runs in time order, {caption}"


def history_plot(
    points: Sequence[HistoryPoint], *, title: str, width: int = 420, height: int = 170
) -> Markup:
    """The runs in time order, evenly spaced: each pass rate a dot with its interval as
    a vertical bar, joined by a line; each point's tooltip holds its date and figures.
    The x labels tell the runs apart (`time_labels`), with the day in a caption when all
    are on one day."""
    left, right, top, bottom = 34, 26, 24, 46
    x0, x1, y0, y1 = left, width - right, top, height - bottom

    def y(value: float) -> float:
        return y1 - (y1 - y0) * min(max(value, 0.0), 1.0)

    def x(i: int) -> float:
        if len(points) == 1:
            return (x0 + x1) / 2
        return x0 + (x1 - x0) * i / (len(points) - 1)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="history" role="img" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'aria-label="{escape(visible(title))}">',
        f"<title>{escape(visible(title))}</title>",
        f'<text x="0" y="14" {FONT} font-size="12" font-weight="600" fill="{INK}">'
        f"{escape(_clip(title, 60))}</text>",
    ]
    for tick in (0.0, 0.5, 1.0):
        ty = _f(y(tick))
        parts.append(
            f'<line x1="{x0}" y1="{ty}" x2="{x1}" y2="{ty}" stroke="{GRID}" stroke-width="1"/>'
            f'<text x="{x0 - 6}" y="{_f(y(tick) + 4)}" {FONT} font-size="10" fill="{MUTED}" '
            f'text-anchor="end">{tick:g}</text>'
        )
    line = [
        f"{_f(x(i))},{_f(y(p.estimate.value))}"
        for i, p in enumerate(points)
        if p.estimate.value is not None
    ]
    if len(line) > 1:
        parts.append(
            f'<polyline points="{" ".join(line)}" fill="none" stroke="{DOT}" '
            f'stroke-width="1.5" stroke-opacity="0.6"/>'
        )
    ticks, caption = time_labels([p.when for p in points])
    parts.append(
        f'<text x="{_f((x0 + x1) / 2)}" y="{height - 4}" {FONT} font-size="10" '
        f'fill="{MUTED}" text-anchor="middle">{escape(caption)}</text>'
    )
    for i, p in enumerate(points):
        cx = _f(x(i))
        est, ci = p.estimate, p.estimate.interval
        mark = ""
        if est.value is not None and ci is not None:
            mark = (
                f'<line x1="{cx}" y1="{_f(y(ci.low))}" x2="{cx}" y2="{_f(y(ci.high))}" '
                f'stroke="{DOT}" stroke-width="2"/>'
                f'<circle cx="{cx}" cy="{_f(y(est.value))}" r="4" fill="{DOT}"/>'
            )
        tip = escape(_tooltip(p.when, est, p.note))
        parts.append(f"<g><title>{tip}</title>{_link(p.href, mark)}</g>")
        if i in ticks:
            # Centred under its point, but inside the picture (an end label is wide).
            half = text_width(ticks[i], 10) / 2
            tx = _f(min(max(x(i), half), width - half))
            parts.append(
                f'<text x="{tx}" y="{y1 + 16}" {FONT} font-size="10" fill="{MUTED}" '
                f'text-anchor="middle" class="tick">{escape(ticks[i])}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))
