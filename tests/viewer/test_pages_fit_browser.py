"""Pages that fit a 1,400 px window in Chromium (driven as in test_viewer_browser.py):
no page scrolls sideways and no table is wider than the box that holds it (a table in a
scrolling box hid its last columns). The judges-against-labels table, whose kappa
warning in a cell made it 2,400 px wide, keeps its warnings as footnotes; the report's
summary shows its latency column. Each page's screenshot is saved (the path is printed;
under $GRADETRAIL_SCREENSHOTS too when that is set)."""

import os
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gradetrail_lib.labels.store import append_labels, label_for
from gradetrail_lib.report.html import write_report
from gradetrail_lib.viewer.links import diff_href, run_href, sample_href
from tests.support.viewer_runs import ViewerRuns, make_runs
from tests.support.viewer_server import Background
from tests.viewer.test_viewer_browser import browser, pytestmark

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

__all__ = ["browser", "pytestmark"]  # the fixture and the skip, shared

WIDTH = 1400
# Every table's width against its container's, and the page's against the window's.
MEASURE = """() => ({
  page: document.documentElement.scrollWidth,
  window: window.innerWidth,
  tables: [...document.querySelectorAll('table')].map(t => ({
    table: t.className || 'table',
    width: t.scrollWidth,
    room: t.parentElement.clientWidth,
  })),
})"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    """The viewer's runs, with a person's labels on qa/a's answers (random ones, fewer
    than the intervals need: kappa carries its warning, the corrected rate is withheld)."""
    made = make_runs(tmp_path_factory.mktemp("fit"))
    records = made.records(made.a)
    append_labels(made.root, [
        label_for(r, spec="qa", sampling="random", labeller="tester",
                  label="pass" if (r.response == r.id[1:].lstrip("0") or r.id == "q000")
                  != (r.id in ("q005", "q009")) else "fail")
        for r in records if r.response is not None
    ])  # fmt: skip
    return made


@pytest.fixture(scope="module")
def url(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root) as base:
        yield base


@pytest.fixture
def wide(browser: "Browser") -> Iterator["Page"]:
    context = browser.new_context(viewport={"width": WIDTH, "height": 900})
    yield context.new_page()
    context.close()


def shot(page: "Page", name: str, where: Path) -> None:
    path = where / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    keep = os.environ.get("GRADETRAIL_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)
    print(f"screenshot: {path}")


def assert_fits(page: "Page") -> dict[str, Any]:
    measured: dict[str, Any] = page.evaluate(MEASURE)
    assert measured["window"] == WIDTH
    assert measured["page"] <= WIDTH, measured
    wider = [t for t in measured["tables"] if t["width"] > t["room"]]
    assert wider == [], wider
    return measured


def test_the_run_page_with_labels_fits_and_footnotes_its_warnings(
    runs: ViewerRuns, url: str, wide: "Page", tmp_path: Path
) -> None:
    wide.goto(url + run_href(runs.a))
    shot(wide, "run-page", tmp_path)
    measured = assert_fits(wide)
    assert "calibration" in [t["table"] for t in measured["tables"]]
    cells = wide.locator("table.calibration td").all_inner_texts()
    assert not any("warning" in c or "covers less" in c for c in cells)
    notes = wide.locator("ol.calibration-notes li").all_inner_texts()
    assert any(n.startswith("kappa: 24 labels: below 200") for n in notes), notes
    assert any(n.startswith("corrected pass rate not shown: 24 random labels") for n in notes)
    # Each footnote is marked where it applies: kappa's on the kappa cell.
    kappa = wide.locator("table.calibration tbody td").nth(2)
    assert kappa.locator("sup.note-mark").inner_text() == "1"


@pytest.mark.parametrize("page_name", ["runs", "sample", "diff", "failures"])
def test_the_other_pages_fit(
    runs: ViewerRuns, url: str, wide: "Page", tmp_path: Path, page_name: str
) -> None:
    path = {
        "runs": "/",
        "sample": sample_href(runs.a, "q003"),
        "diff": diff_href(runs.a, runs.b),
        "failures": run_href(runs.a, {"failures": 1}),
    }[page_name]
    wide.goto(url + path)
    shot(wide, page_name, tmp_path)
    assert_fits(wide)


def test_the_reports_summary_shows_every_column(
    runs: ViewerRuns, wide: "Page", tmp_path: Path
) -> None:
    report = write_report([runs.root / runs.a, runs.root / runs.b], tmp_path / "report.html")
    wide.goto(report.as_uri())
    shot(wide, "report", tmp_path)
    measured = assert_fits(wide)
    assert {"summary", "calibration", "pairs"} <= {t["table"] for t in measured["tables"]}
    # The last column, latency, inside the box that holds the table.
    room = wide.locator("#summary .scroll").bounding_box()
    latency = wide.locator("table.summary thead th").last.bounding_box()
    assert room is not None and latency is not None
    assert wide.locator("table.summary thead th").last.inner_text().startswith("latency (s)")
    assert latency["x"] + latency["width"] <= room["x"] + room["width"]


def test_a_long_model_name_and_real_figures_keep_the_latency_column(
    wide: "Page", tmp_path: Path
) -> None:
    """The summary row of a real local run (a 21-character label, thousands of tokens,
    latencies of a second), which cut the latency column at 1,400 px."""
    from gradetrail_lib.report.html import render_report
    from gradetrail_lib.results.runs import Run
    from tests.support.traces import call, manifest, record

    records = [
        replace(
            record(f"s{i:03d}", 1.0 if i % 4 else 0.0),
            calls=[call(input_tokens=14270 + i, output_tokens=2600 + i, latency_s=0.9 + i / 100)],
        )
        for i in range(300)
    ]  # fmt: skip
    m = manifest(spec_name="capitals", model="smollm2-135m-instruct")
    page = tmp_path / "report.html"
    page.write_text(render_report([Run.of(m, records)]))
    wide.goto(page.as_uri())
    shot(wide, "report-long-label", tmp_path)
    assert_fits(wide)
    room = wide.locator("#summary .scroll").bounding_box()
    last = wide.locator("table.summary tbody td").last
    box = last.bounding_box()
    assert room is not None and box is not None
    assert box["x"] + box["width"] <= room["x"] + room["width"]
    assert last.inner_text().endswith("(300)")
