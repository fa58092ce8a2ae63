"""`gradetrail view` in a real browser: Debian's headless Chromium driven by Playwright
(no browser download) against the real server on a free loopback port, over real runs
of the scripted provider. A failing test saves a screenshot of its page (the path is
printed; under $GRADETRAIL_SCREENSHOTS too when that is set)."""

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gradetrail_lib.analysis.stats import compare
from gradetrail_lib.viewer.links import sample_href
from tests.support.viewer_runs import MALICIOUS, N, ViewerRuns, failing, make_runs
from tests.support.viewer_server import Background

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--no-first-run",
]  # fmt: skip
# CI sets GRADETRAIL_REQUIRE_CHROMIUM=1: there a missing browser (or Playwright) fails
# these tests instead of skipping them.
_required = os.environ.get("GRADETRAIL_REQUIRE_CHROMIUM") == "1"
pytestmark = [
    pytest.mark.skipif(
        not _required and not CHROMIUM.exists(),
        reason="/usr/bin/chromium is missing (apt-get install -y chromium)",
    ),
    pytest.mark.slow,  # a browser
]
SCRIPT = "<script>document.title='pwned'</script>"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    return make_runs(tmp_path_factory.mktemp("viewer-browser"))


@pytest.fixture(scope="module")
def url(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator["Browser"]:
    if not _required:
        pytest.importorskip("playwright", reason="playwright is not installed (the dev extra)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: "Browser", request: pytest.FixtureRequest, tmp_path: Path) -> Iterator["Page"]:
    """A fresh page that fails its test on any script error; a screenshot when the test
    fails."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    failed_before = request.session.testsfailed
    yield opened
    if request.session.testsfailed > failed_before:
        shot = tmp_path / f"{request.node.name}.png"
        opened.screenshot(path=str(shot), full_page=True)
        keep = os.environ.get("GRADETRAIL_SCREENSHOTS")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(keep) / shot.name)
        print(f"screenshot of the failing page: {shot} ({opened.url})")
    context.close()
    assert errors == [], errors


def texts(page: "Page", selector: str) -> list[str]:
    return [t.strip() for t in page.locator(selector).all_inner_texts()]


def click(page: "Page", selector: str) -> None:
    with page.expect_navigation():
        page.click(selector)


def failure_list(page: "Page") -> list[str]:
    return texts(page, "section.failure h3 a.sample-link")


def test_a_failure_is_two_clicks_from_the_runs_page(
    runs: ViewerRuns, url: str, page: "Page"
) -> None:
    records = runs.records(runs.a)
    page.goto(url + "/")
    assert page.title() == "Runs · gradetrail view"
    assert sorted(texts(page, "tr.run a.run-link")) == ["a", "a", "b"]  # newest first
    assert page.locator("tr.error-row").count() == 2  # broken/, and the link out of the root
    assert page.locator("svg.forest").count() == 1 and page.locator("svg.history").count() == 1
    click(page, f'a.run-link[href="/run/{runs.a}"]')  # one
    assert page.url == f"{url}/run/{runs.a}"
    assert texts(page, "#match-count") == [f"{N} samples"]
    click(page, "#failures-toggle")  # two
    assert page.url == f"{url}/run/{runs.a}?failures=1"
    expected = [r for r in records if failing(r)]
    assert failure_list(page) == [r.id for r in expected]
    # Each failure with its input and its full response on the one page.
    for r in expected:
        section = page.locator(f'section.failure:has(a.sample-link:text-is("{r.id}"))')
        body = section.inner_text()
        assert r.messages[0]["content"].strip() in body
        assert r.response is not None and r.response in body
    # And one more click opens a sample in full.
    click(page, 'section.failure a.sample-link:text-is("q003")')
    assert page.url == f"{url}{sample_href(runs.a, 'q003')}"
    assert "judge output" in page.inner_text("body")


def test_a_filtered_view_is_its_url(runs: ViewerRuns, url: str, page: "Page") -> None:
    records = runs.records(runs.a)
    page.goto(f"{url}/run/{runs.a}")
    page.check('form.filters input[name="failures"]')
    page.select_option('form.filters select[name="scorer"]', "short")
    page.fill('form.filters input[name="q"]', "WRONG")
    click(page, 'form.filters button[type="submit"]')
    assert "failures=1" in page.url and "scorer=short" in page.url and "q=WRONG" in page.url
    expected = [r.id for r in records if not r.passes("short") and r.response == "wrong"]
    assert expected and failure_list(page) == expected
    filtered = page.url
    page.reload()
    assert page.url == filtered and failure_list(page) == expected
    assert page.input_value('form.filters input[name="q"]') == "WRONG"
    assert page.is_checked('form.filters input[name="failures"]')
    # The same URL in another page is the same view.
    other = page.context.new_page()
    other.goto(filtered)
    assert failure_list(other) == expected
    other.close()
    # Sorted and paged, then back and forward.
    page.goto(f"{url}/run/{runs.a}?sort=-score:exact&per=5&page=2")
    second = texts(page, "tr.sample td.mono")
    click(page, 'nav.pager a[rel="next"] >> nth=0')
    assert "page=3" in page.url and "sort=-score%3Aexact" in page.url
    page.go_back()
    assert page.url.endswith("page=2") and texts(page, "tr.sample td.mono") == second
    page.go_forward()
    assert "page=3" in page.url and texts(page, "tr.sample td.mono") != second


def test_the_diff_shows_only_disagreements(runs: ViewerRuns, url: str, page: "Page") -> None:
    a, b = runs.records(runs.a), runs.records(runs.b)
    expected = compare(a, b, "exact", labels=("qa/a", "qa/b"))
    disagree = [
        x.id for x, y in zip(a, b, strict=True) if x.score_of("exact") != y.score_of("exact")
    ]
    page.goto(f"{url}/run/{runs.a}")
    page.select_option('form.diff-form select[name="b"]', runs.b)
    with page.expect_navigation(url=f"{url}/diff/{runs.a}/{runs.b}"):
        page.click('form.diff-form button[type="submit"]')
    assert page.locator("tr.pair").evaluate_all("rows => rows.map(r => r.dataset.id)") == disagree
    assert page.inner_text("#paired-p") == f"{expected.p_value:.4g}"
    assert page.inner_text("#verdict").startswith(expected.verdict)
    # Both responses and both scores in each row.
    row = page.locator(f'tr.pair[data-id="{disagree[0]}"]')
    x, y = next((x, y) for x, y in zip(a, b, strict=True) if x.id == disagree[0])
    assert x.response is not None and y.response is not None
    assert x.response in row.inner_text() and y.response in row.inner_text()
    click(page, "#all-toggle")
    assert page.url == f"{url}/diff/{runs.a}/{runs.b}?all=1"
    assert len(page.locator("tr.pair").all()) == N
    click(page, "#all-toggle")
    assert page.url == f"{url}/diff/{runs.a}/{runs.b}"
    assert len(page.locator("tr.pair").all()) == len(disagree)


@pytest.mark.parametrize(
    "where",
    ["sample", "failures", "table", "diff", "search"],
)
def test_markup_in_a_response_is_shown_as_text_and_never_runs(
    runs: ViewerRuns, url: str, page: "Page", where: str
) -> None:
    path = {
        "sample": sample_href(runs.a, "q003"),
        "failures": f"/run/{runs.a}?failures=1",
        "table": f"/run/{runs.a}",
        "diff": f"/diff/{runs.a}/{runs.b}?all=1",
        "search": f"/run/{runs.a}?failures=1&q=%3Cscript%3E",
    }[where]
    violations: list[Any] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security" in m.text else 0)
    response = page.goto(url + path)
    assert response is not None and response.status == 200
    title = page.title()
    assert "pwned" not in title and "img" not in title.split(" · ")[0]
    # Not one element came from the data: the payload is text.
    assert page.evaluate("document.querySelectorAll('script, img, [onerror]').length") == 0
    body = page.inner_text("body")
    assert SCRIPT in body
    if where in ("sample", "failures", "diff"):
        assert MALICIOUS in body  # in full
    if where == "sample":
        assert "the answer <script>" in body  # the judge's output, quoted markup and all
    assert violations == []  # nothing even tried to run


def test_paths_out_of_the_root_are_404_in_the_browser(
    runs: ViewerRuns, url: str, page: "Page"
) -> None:
    for path in [
        "/run/..%2F..%2Fetc%2Fpasswd",
        "/run/outside",
        "/run/outside/sample/q000",
        f"/run/{runs.a}/sample/..%2F..%2F..%2Fetc%2Fpasswd",
        f"/diff/outside/{runs.a}",
        "/run/broken",
    ]:
        response = page.goto(url + path)
        assert response is not None
        expected = 422 if path == "/run/broken" else 404
        assert response.status == expected, path
        assert response.headers["content-security-policy"].startswith("default-src 'none'")


LONG_MODEL = "provider-with-a-long-name/an-extremely-long-model-name-2026-12-05-instruct-q4"
# One token with no break opportunity: it wraps only where the badge allows breaking words.
LONG_SERVED = "another_provider__a_different_served_model_name_with_its_own_long_version_tag_q4"
WIDE_MODEL = "ＷＩＤＥ全角モデル名前がとても長いです-MMMMMMMMWWWWWWWW-\u202eevil"


@pytest.fixture(scope="module")
def long_names(runs: ViewerRuns) -> list[str]:
    """Copies of run a under models with long names (one served as another: a long
    warning badge), so the runs page has long badges and long forest plot labels."""
    import json

    names = []
    for i, (requested, served) in enumerate(
        [(LONG_MODEL, LONG_SERVED), (WIDE_MODEL, WIDE_MODEL), ("m", "m")]
    ):
        target = runs.root / f"long-{i}"
        shutil.copytree(runs.root / runs.a, target)
        manifest = json.loads((target / "manifest.json").read_text())
        manifest["model"]["requested"], manifest["model"]["served"] = requested, [served]
        (target / "manifest.json").write_text(json.dumps(manifest))
        names.append(target.name)
    return names


def test_long_warning_badges_wrap_inside_their_cell(
    runs: ViewerRuns, url: str, page: "Page", long_names: list[str]
) -> None:
    page.goto(url + "/")
    badges = page.locator("td.warnings .badge")
    assert badges.count() >= 1
    cell_boxes = page.locator("td.warnings").evaluate_all(
        "cells => cells.map(c => c.getBoundingClientRect().toJSON())"
    )
    widest = max(box["width"] for box in cell_boxes)
    for i in range(badges.count()):
        badge = badges.nth(i)
        box = badge.bounding_box()
        cell = badge.evaluate("b => b.closest('td').getBoundingClientRect().toJSON()")
        assert box is not None
        assert box["x"] >= cell["x"] - 0.5, badge.inner_text()
        assert box["x"] + box["width"] <= cell["x"] + cell["width"] + 0.5, badge.inner_text()
    # The long one wraps (more than one line tall) rather than widening its column.
    long_badge = page.locator("td.warnings .badge", has_text="≠ requested")
    assert long_badge.count() >= 1
    heights = [long_badge.nth(i).bounding_box()["height"] for i in range(long_badge.count())]  # type: ignore[index]
    assert max(heights) > 25, heights
    # ... and the runs table fits its container (no sideways scrolling for a badge).
    fits = page.locator("td.warnings").first.evaluate(
        "c => { const t = c.closest('table'), p = t.parentElement;"
        " return [t.getBoundingClientRect().width, p.clientWidth]; }"
    )
    assert fits[0] <= fits[1] + 0.5, fits
    assert widest < fits[1] / 2


def test_forest_plot_labels_stay_inside_the_plot(
    runs: ViewerRuns, url: str, page: "Page", long_names: list[str]
) -> None:
    page.goto(url + "/")
    plots = page.locator("svg.forest")
    assert plots.count() >= 1
    boxes = plots.first.evaluate(
        """svg => {
            const box = svg.viewBox.baseVal;
            return Array.from(svg.querySelectorAll('text')).map(t => {
                const b = t.getBBox();
                return {text: t.textContent, x: b.x, y: b.y, w: b.width, h: b.height,
                        vw: box.width, vh: box.height};
            });
        }"""
    )
    labels = [b["text"] for b in boxes]
    assert any(t.startswith("provider-with-a-long-name") for t in labels), labels
    assert any("\\u202eevil" in t or "全角" in t for t in labels), labels
    assert not any("\u202e" in t for t in labels)
    for b in boxes:
        assert b["x"] >= -0.5 and b["x"] + b["w"] <= b["vw"] + 0.5, b
        assert b["y"] >= -0.5 and b["y"] + b["h"] <= b["vh"] + 0.5, b
