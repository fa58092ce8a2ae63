"""The HTML report: built from real run directories, checked as HTML and opened in
headless Chromium (a screenshot, and the DOM after any script could have run)."""

import os
import re
import struct
import subprocess
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gradetrail_lib import cli
from gradetrail_lib.errors import NotComparable
from gradetrail_lib.report import render_report, write_report
from gradetrail_lib.runs import Run, load_run
from tests.support.eval_runs import MALICIOUS, run_spec, start_server, write_dataset, write_spec

N = 12
CHROMIUM = Path("/usr/bin/chromium")
# CI sets GRADETRAIL_REQUIRE_CHROMIUM=1: there a missing browser fails these tests
# instead of skipping them.
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists() and os.environ.get("GRADETRAIL_REQUIRE_CHROMIUM") != "1",
    reason="/usr/bin/chromium is missing (apt-get install -y chromium)",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("report")
    server = start_server()
    try:
        write_dataset(root / "data" / "add.jsonl", N)
        models = ["fake-good", "fake-bad", "fake-verbose", "fake-evil"]
        yield run_spec(write_spec(root / "add.yaml", f"{server.base_url}/v1", models), root)
    finally:
        server.stop()


class Elements(HTMLParser):
    """Tags and attributes of a document, to check what is markup and what is text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data


def parse(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    return parser


def test_report_cli_writes_a_self_contained_file(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["report", str(runs["fake-good"])]) == 0
    default = runs["fake-good"] / "report.html"
    assert capsys.readouterr().out.strip() == f"Report: {default}"
    html = default.read_text()
    tags = parse(html).tags
    names = {t for t, _ in tags}
    assert "script" not in names and "link" not in names and "img" not in names
    assert "iframe" not in names and "object" not in names
    # Nothing that could fetch: no src/href attributes at all, no url() or @import in CSS.
    assert not [a for _, attrs in tags for a in attrs if a in ("src", "href", "srcset")]
    assert "url(" not in html and "@import" not in html
    assert "<style>" in html
    assert "Failed samples (0)" in html


def test_report_content(runs: dict[str, Path], tmp_path: Path) -> None:
    dirs = [runs[m] for m in ("fake-good", "fake-bad", "fake-verbose", "fake-evil")]
    out = write_report(dirs, tmp_path / "r.html")
    html = out.read_text()
    # Pass rates with Wilson intervals and n: 12/12, and fake-bad's 8/12 (a % 3 == 0 wrong).
    assert "1.000 (12/12)" in html and "[0.758, 1.000]" in html
    assert "0.667 (8/12)" in html and "[0.391, 0.862]" in html
    # Reproducibility facts from the manifest.
    manifest = load_run(runs["fake-good"]).manifest
    for value in (manifest["identity"], manifest["scorer_hash"], manifest["dataset"]["hash"]):
        assert value in html
    assert "latency (s)" in html and "p50 / p90 / p99" in html
    # Failures: truncation labelled apart from wrong answers, each expandable.
    details = re.findall(r'<details class="failure (\w+)">', html)
    assert details.count("wrong_answer") == 4 + N  # fake-bad's 4, fake-evil's 12
    assert details.count("truncated") == N
    assert html.count("truncated (hit max_tokens)") == N
    assert 'Stop reason</dt><dd class="mono">max_tokens' in html
    # Paired comparisons between the models, with verdicts.
    assert "Paired comparisons" in html and "McNemar p" in html
    # Escaped, not markup.
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in html
    assert MALICIOUS not in html


def test_report_refuses_mixed_identities(runs: dict[str, Path]) -> None:
    good = load_run(runs["fake-good"])
    other = Run({**good.manifest, "identity": "f" * 64}, good.rows, Path("other"))
    with pytest.raises(NotComparable, match="one identity"):
        render_report([good, other])


def test_report_escapes_prompts_and_reasons() -> None:
    row = {
        "id": "<b>id</b>",
        "score": 0.0,
        "outcome": "scored",
        "failure_mode": "wrong_answer",
        "stop_reason": "stop",
        "response": "ok",
        "reason": "<i>reason</i>",
        "messages": [{"role": "user", "content": "<u>prompt</u>"}],
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    manifest = {"identity": "x", "warnings": ["<em>warning</em>"], "spec": {"name": "<s>n</s>"}}
    html = render_report([Run(manifest, [row])])
    names = {t for t, _ in parse(html).tags}
    assert not names & {"b", "i", "u", "em", "s"}
    for text in ("&lt;b&gt;id", "&lt;i&gt;reason", "&lt;u&gt;prompt", "&lt;em&gt;warning"):
        assert text in html


def chromium(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def png_pixels(path: Path) -> tuple[int, int, bytes]:
    """Width, height and raw (filtered) scanlines of a PNG, decoded with the stdlib."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@needs_chromium
def test_report_renders_in_chromium(runs: dict[str, Path], tmp_path: Path) -> None:
    report = write_report([runs["fake-good"], runs["fake-verbose"]], tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    done = chromium(
        f"--screenshot={shot}", "--window-size=1200,2000", report.as_uri(), tmp_path=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (1200, 2000)
    assert shot.stat().st_size > 30_000, "a page of tables and text, not a blank screen"
    # A blank page is one repeated scanline; a rendered report has many different ones.
    stride = len(pixels) // height
    lines = {pixels[i * stride : (i + 1) * stride] for i in range(height)}
    assert len(lines) > 200


@needs_chromium
def test_malicious_response_is_shown_as_text_and_not_executed(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    report = write_report([runs["fake-evil"]], tmp_path / "report.html")
    title = parse(report.read_text()).title
    dom = chromium("--dump-dom", report.as_uri(), tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    after = parse(dom.stdout)
    assert after.title == title == "gradetrail report: add", "a script changed the title"
    names = {t for t, _ in after.tags}
    assert "script" not in names and "img" not in names
    assert dom.stdout.count("&lt;script&gt;document.title='pwned'&lt;/script&gt;") == N
    assert dom.stdout.count("&lt;img src=x onerror=") == N


@needs_chromium
def test_the_dom_check_detects_a_script_that_runs(tmp_path: Path) -> None:
    """The control for the test above: the same markup unescaped does run in this
    browser, so a title left unchanged there means escaping worked."""
    page = tmp_path / "unsafe.html"
    page.write_text(
        f"<!DOCTYPE html><html><head><title>t</title></head><body>{MALICIOUS}</body></html>"
    )
    dom = chromium("--dump-dom", page.as_uri(), tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert parse(dom.stdout).title in ("pwned", "img")


def test_report_from_rows_in_memory(runs: dict[str, Path]) -> None:
    """What the Dagster report asset does: rows as ResultRow objects, not read back."""
    from gradetrail_lib.pipeline import ResultRow

    run = load_run(runs["fake-verbose"])
    rows = [
        ResultRow(**{k: v for k, v in r.items() if k != "usage"}, **r["usage"]) for r in run.rows
    ]
    assert render_report([Run.of(run.manifest, rows)]) == render_report([run])
