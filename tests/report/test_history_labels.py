"""The history plot's x labels tell its runs apart (every label of a day's runs read
"12-06"), and the forest plot's longest label is drawn whole (its column was rounded
down, cutting the last character)."""

import re

import pytest

from gradetrail_lib.analysis.stats.intervals import proportion
from gradetrail_lib.report.svg import (
    ForestRow,
    HistoryPoint,
    forest_plot,
    history_plot,
    text_width,
    time_labels,
)


def at(day: int, clock: str) -> str:
    return f"2026-12-{day:02d}T{clock}.123456+00:00"


@pytest.mark.parametrize(
    ("whens", "labels", "caption"),
    [
        # Days apart: the day says it.
        ([at(4, "09:00:00"), at(5, "09:00:00"), at(6, "09:00:00")],
         ["12-04", "12-05", "12-06"], "UTC"),
        # One day: the time, the day in the caption.
        ([at(6, "09:00:00"), at(6, "14:05:00")], ["09:00", "14:05"], "on 2026-12-06 (UTC)"),
        # One minute: the seconds.
        ([at(6, "14:05:01"), at(6, "14:05:09")], ["14:05:01", "14:05:09"],
         "on 2026-12-06 (UTC)"),
        # Two days, two runs on one of them: day and time.
        ([at(5, "09:00:00"), at(6, "09:00:00"), at(6, "10:00:00")],
         ["12-05 09:00", "12-06 09:00", "12-06 10:00"], "UTC"),
        # The same second: the runs' numbers.
        ([at(6, "14:05:01"), at(6, "14:05:01")], ["run 1", "run 2"],
         "runs in time order, on 2026-12-06 (UTC)"),
    ],
)  # fmt: skip
def test_labels_tell_the_runs_apart(whens: list[str], labels: list[str], caption: str) -> None:
    ticks, said = time_labels(whens)
    assert list(ticks.values()) == labels and said == caption


def test_many_runs_of_a_day_get_fewer_distinct_labels_inside_the_picture() -> None:
    whens = [at(6, f"{9 + i // 4:02d}:{(i % 4) * 15:02d}:00") for i in range(20)]
    ticks, caption = time_labels(whens)
    texts = list(ticks.values())
    assert len(set(texts)) == len(texts) and 2 <= len(texts) <= 6
    assert 19 in ticks and caption == "on 2026-12-06 (UTC)"
    rate = proportion(3, 4)
    svg = str(history_plot([HistoryPoint(w, rate) for w in whens], title="t", width=420))
    drawn = re.findall(r'<text x="([\d.]+)"[^>]*class="tick">([^<]*)</text>', svg)
    assert [t for _, t in drawn] == texts
    for x, text in drawn:  # centred at x, inside the 420 px picture
        half = text_width(text, 10) / 2
        assert float(x) - half >= 0 and float(x) + half <= 420
    assert "on 2026-12-06 (UTC)</text>" in svg


def test_the_longest_forest_label_is_whole() -> None:
    for label in ("capitals/smollm2-135m", "qa/a", "openai/gpt-4o-mini-2024-07-18"):
        svg = str(forest_plot([ForestRow(label, proportion(1, 2))], title="t"))
        assert f">{label}</text>" in svg, label
