"""The forest plot's labels (step 12, item 7): the label column fits the longest label up
to its share of the plot, a longer label is cut with "…", and controls show as escapes.
Chromium measures the drawn boxes (tests/viewer/test_viewer_browser.py); these check the
drawing's arithmetic without a browser."""

import re

from gradetrail_lib.analysis.stats.intervals import proportion
from gradetrail_lib.report.svg import LABEL_SHARE, ForestRow, forest_plot, text_width


def _labels(svg: str) -> list[tuple[float, str]]:
    return [
        (float(x), text)
        for x, text in re.findall(r'<text x="([\d.]+)"[^>]*text-anchor="end">([^<]*)</text>', svg)
    ]


def test_labels_fit_their_column_and_a_long_one_is_cut() -> None:
    rate = proportion(3, 10)
    long = "provider/" + "a-very-long-model-name-" * 6
    rows = [ForestRow("m", rate), ForestRow(long, rate), ForestRow("\u202eevil", rate)]
    svg = str(forest_plot(rows, title="t", width=720))
    labels = dict((text, x) for x, text in _labels(svg))
    cut = next(text for text in labels if text.startswith("provider/"))
    assert cut.endswith("…") and len(cut) < len(long)
    assert "\\u202eevil" in labels and "\u202e" not in svg
    for text, right in labels.items():  # right-aligned at `right`: it starts at >= 0
        assert right <= 720 * LABEL_SHARE
        assert right - text_width(text, 12) >= 0, text


def test_short_labels_keep_a_narrow_column() -> None:
    svg = str(forest_plot([ForestRow("gpt-x", proportion(1, 2))], title="t", width=720))
    ((right, text),) = _labels(svg)
    assert text == "gpt-x" and right < 150
