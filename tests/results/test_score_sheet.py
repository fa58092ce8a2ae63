"""Score sheets: what paired statistics read of a result set, a few bytes a sample; and
the readers of whole runs (compare, gate, report) stream a run directory rather than
hold its records."""

import math
from pathlib import Path

import pytest

from gradetrail_lib import cli
from gradetrail_lib.analysis.stats import compare
from gradetrail_lib.report.html import write_report
from gradetrail_lib.results.runs import Run
from gradetrail_lib.results.sheet import ScoreSheet, sheets_of
from tests.commands.test_compare_gate_cost_e2e import runs  # noqa: F401 (the fixture)
from tests.support.traces import SCORER, record


def test_a_sheet_holds_score_of_with_nan_where_a_sample_is_unscored() -> None:
    records = [
        record("a", 1.0),
        record("b", 0.25, repeat=1),
        record("c", None, answered=False),  # no response
        record("d", None),  # the scorer failed
        record("e", {SCORER: 1.0, "other": 0.5}),
    ]
    sheets = sheets_of(records, [SCORER, "other"])
    sheet = sheets[SCORER]
    assert list(sheet.ids) == ["a", "b", "c", "d", "e"]
    assert list(sheet.repeats) == [0, 1, 0, 0, 0]
    values = list(sheet.scores)
    assert values[:2] == [1.0, 0.25] and values[4] == 1.0
    assert math.isnan(values[2]) and math.isnan(values[3])
    assert [math.isnan(v) for v in sheets["other"].scores] == [True] * 4 + [False]
    for r, v in zip(records, values, strict=True):  # the record's own reading
        assert (r.score_of(SCORER) is None) == math.isnan(v)


def test_comparing_sheets_is_comparing_their_records() -> None:
    a = [record(f"s{i}", [1.0, 0.0, None, 0.5][i % 4], answered=i % 7 != 0) for i in range(40)]
    b = [record(f"s{i}", [0.0, 1.0, 1.0, None][i % 4]) for i in reversed(range(40))]
    on_records = compare(a, b, SCORER, labels=("a", "b"))
    on_sheets = compare(ScoreSheet.of(a, SCORER), ScoreSheet.of(b, SCORER), SCORER,
                        labels=("a", "b"))  # fmt: skip
    assert on_sheets == on_records
    assert on_records.unscored_a == 15  # 10 scorer errors, 6 unanswered, 1 of them both
    assert on_records.n == 40


@pytest.fixture
def no_record_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that asks a run for all its records at once fails."""

    def refused(self: Run) -> None:
        raise AssertionError("a run's records were read into a list")

    monkeypatch.setattr(Run, "records", property(refused))


def test_report_compare_and_gate_stream_the_run_directories(
    runs: dict[str, Path],  # noqa: F811 (the fixture)
    no_record_lists: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good, bad = runs["fake-good"], runs["fake-bad"]
    written = write_report([good, bad], tmp_path / "report.html")
    assert "fake-good" in written.read_text()
    assert cli.main(["compare", str(good), str(bad)]) == 0
    assert "Paired comparison" in capsys.readouterr().out
    assert cli.main(["gate", str(bad), "--baseline", str(good)]) in (0, 1)
    assert cli.main(["gate", str(good), "--baseline", "previous"]) in (0, 1, 2)
