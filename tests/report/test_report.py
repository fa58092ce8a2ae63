"""The HTML report: built from real run directories, checked as HTML and opened in
headless Chromium (a screenshot, and the DOM after any script could have run)."""

import json
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
from gradetrail_lib.report.html import render_report, write_report
from gradetrail_lib.results.runs import Run, load_run
from tests.support.eval_runs import (
    JUDGE_MODEL,
    MALICIOUS,
    multi_scorers,
    run_spec,
    start_server,
    write_dataset,
    write_spec,
)
from tests.support.traces import call, manifest, record

N = 12
ESCAPED_SCRIPT = "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"
MULTI = ["num", "rx", "short", "judge"]
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


@pytest.fixture(scope="module")
def multi_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Models of a spec with four scorers: numeric (primary), regex, Python and an LLM
    judge that quotes the markup fake-evil answers with."""
    root = tmp_path_factory.mktemp("report-multi")
    server = start_server()
    try:
        base_url = f"{server.base_url}/v1"
        write_dataset(root / "data" / "add.jsonl", N)
        models = ["fake-good", "fake-bad", "fake-evil"]
        spec = write_spec(root / "add.yaml", base_url, models, scorers=multi_scorers(base_url))
        yield run_spec(spec, root)
    finally:
        server.stop()


class Elements(HTMLParser):
    """Tags and attributes of a document, to check what is markup and what is text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.title = ""
        self._in_title = False
        self._svg = 0  # a plot's <title> elements are its tooltips, not the page's title

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._svg += tag == "svg"
        self._in_title = tag == "title" and not self._svg

    def handle_endtag(self, tag: str) -> None:
        self._svg -= tag == "svg"
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
    facts = load_run(runs["fake-good"]).manifest
    for value in (facts.identity, facts.scorer_hash, facts.dataset.hash):
        assert value in html
    assert f"score (numeric, {facts.scorers[0].hash[:12]})" in html
    assert "latency (s)" in html and "p50 / p90 / p99" in html
    # Failures: truncation labelled apart from wrong answers, each expandable.
    details = re.findall(r'<details class="failure (\w+)">', html)
    assert details.count("wrong_answer") == 4 + N  # fake-bad's 4, fake-evil's 12
    assert details.count("truncated") == N
    assert html.count("truncated (hit max_tokens)") == N
    assert 'Stop reason</dt><dd class="mono">max_tokens' in html
    # Paired comparisons between the models, with verdicts.
    assert "Paired comparisons" in html and "paired test p" in html
    # The ranking: tiers and rank intervals from Holm-adjusted tests, its method named.
    assert '<section id="ranking">' in html and "mrsw-2024-holm" in html
    assert "Holm&#39;s step-down" in html or "Holm's step-down" in html
    ranking = html[html.index('<table class="ranking">') : html.index('id="comparisons"')]
    rows = re.findall(r"<tr><td class=\"num\">(\d+)</td><td class=\"num\">([\d-]+)</td>", ranking)
    assert len(rows) == 4 and rows[0][0] == "1"
    # Escaped, not markup.
    assert ESCAPED_SCRIPT in html
    assert MALICIOUS not in html


def test_report_refuses_mixed_identities(runs: dict[str, Path]) -> None:
    good = load_run(runs["fake-good"])
    other = Run.of(
        good.manifest.model_copy(update={"identity": "f" * 64}), good.records, Path("other")
    )
    with pytest.raises(NotComparable, match="one identity"):
        render_report([good, other])


def test_report_escapes_prompts_reasons_scorers_and_judge_output() -> None:
    """Everything a record or manifest holds reaches the page as text: sample ids, prompts,
    reasons, scorer names, a judge's output and its error, warnings, the spec name."""
    judge_call = call(role="judge", model="grader", scorer="<var>j</var>", text="<kbd>said</kbd>")
    failed_call = call(role="judge", model="grader", scorer="<var>j</var>", error="<q>down</q>")
    records = [
        record(
            "<b>id</b>",
            {"s": 0.0, "<var>j</var>": 0.5},
            failure_mode="wrong_answer",
            response="<tt>answer</tt>",
            reasons={"s": "<i>reason</i>", "<var>j</var>": "<cite>graded</cite>"},
            messages=[{"role": "<abbr>user</abbr>", "content": "<u>prompt</u>"}],
            extra_calls=[judge_call],
        ),
        record(
            "other",
            {"s": 0.0, "<var>j</var>": None},
            failure_mode="wrong_answer",
            extra_calls=[failed_call],
        ),
    ]
    facts = manifest(
        {"s": "s" * 64, "<var>j</var>": "j" * 64},
        spec_name="<s>n</s>",
        warnings=["<em>warning</em>"],
    )
    html = render_report([Run.of(facts, records)])
    names = {t for t, _ in parse(html).tags}
    markup = {"b", "i", "u", "em", "s", "var", "kbd", "tt", "cite", "q", "abbr"}
    assert not names & markup
    for text in (
        "&lt;b&gt;id", "&lt;i&gt;reason", "&lt;u&gt;prompt", "&lt;em&gt;warning",
        "&lt;s&gt;n&lt;/s&gt;", "&lt;var&gt;j&lt;/var&gt;", "&lt;kbd&gt;said&lt;/kbd&gt;",
        "&lt;tt&gt;answer", "&lt;cite&gt;graded", "&lt;q&gt;down&lt;/q&gt;", "&lt;abbr&gt;user",
    ):  # fmt: skip
        assert text in html, text
    # The secondary (judge) scorer has its own row of figures.
    assert html.count("<tr><td>&lt;var&gt;j&lt;/var&gt;</td>") == 1


def test_report_shows_every_scorer_and_the_judge(
    multi_runs: dict[str, Path], tmp_path: Path
) -> None:
    dirs = [multi_runs[m] for m in ("fake-good", "fake-bad", "fake-evil")]
    html = write_report(dirs, tmp_path / "r.html").read_text()
    # Each run's scorer table: a row per scorer, the primary marked.
    assert html.count('<tr><td>num <span class="muted">(primary)</span></td>') == 3
    for name in MULTI[1:]:
        assert html.count(f"<tr><td>{name}</td>") == 3, name
    # fake-bad (wrong where a % 3 == 0) passes 8/12 on num and rx, 12/12 on short.
    bad = html.split("<h2>add/fake-bad</h2>")[1].split("<h2>")[0]
    assert bad.count("0.667 (8/12)") == 3  # num, rx and the judge
    assert "1.000 (12/12)" in bad  # short
    # Pairs: three runs, every pair on every scorer.
    pairs = re.findall(r"<td>add/fake-\w+</td><td>add/fake-\w+</td><td>(\w+)</td>", html)
    assert sorted(pairs) == sorted(MULTI * 3)
    # The judge's calls apart from the target's, per run: fake-bad's answers repeat
    # fake-good's but at a % 3 == 0, so 8 of its 12 judge calls were cache hits.
    assert (
        "Judge calls: 12 sent, 0 cache hits, 0 failed;\njudge errors (no usable grade): 0;" in html
    )
    assert "Judge calls: 4 sent, 8 cache hits, 0 failed;" in html
    judge_runs = [load_run(d).manifest.judge for d in dirs]
    assert all(j.input_tokens > 0 and (j.cost_usd or 0) > 0 for j in judge_runs)
    assert f"tokens {judge_runs[0].input_tokens} in / {judge_runs[0].output_tokens} out" in html
    assert "<th>judge calls / cache hits / failed calls</th>" in html
    assert "<th>judge errors (no usable grade)</th>" in html and "<th>judge cost</th>" in html
    assert (
        f"anthropic/{JUDGE_MODEL}"
        not in html.split('<section id="summary">')[1].split("</section>")[0]
    ), "the summary's tokens and cost are the target's alone"
    # Each failure shows every scorer's score and reason, and the judge's whole output.
    evil = html.split("<h2>add/fake-evil</h2>")[1]
    assert evil.count('<details class="failure') == N
    for name in MULTI:
        assert evil.count(f'<div class="role">{name}: ') == N, name
    assert evil.count('<div class="muted">judge output</div>') == N
    assert evil.count("GRADE: I</pre>") == N
    # The judge quoted the markup: escaped there as in the response.
    assert evil.count(f"The response contains {ESCAPED_SCRIPT}") == N
    assert MALICIOUS not in html
    assert "script" not in {t for t, _ in parse(html).tags}


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
@pytest.mark.slow  # a browser
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
@pytest.mark.slow  # a browser
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
@pytest.mark.slow  # a browser
def test_malicious_judge_output_is_shown_as_text_and_not_executed(
    multi_runs: dict[str, Path], tmp_path: Path
) -> None:
    report = write_report([multi_runs["fake-evil"]], tmp_path / "report.html")
    dom = chromium("--dump-dom", report.as_uri(), tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    after = parse(dom.stdout)
    assert after.title == "gradetrail report: add", "a script changed the title"
    assert not {"script", "img"} & {t for t, _ in after.tags}
    quoted = "The response contains &lt;script&gt;document.title='pwned'&lt;/script&gt;"
    assert dom.stdout.count(quoted) == N  # the judge's output, once per failed sample
    assert dom.stdout.count("&lt;img src=x onerror=") == 2 * N  # and the response


@needs_chromium
@pytest.mark.slow  # a browser
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


def test_report_from_records_in_memory(runs: dict[str, Path], multi_runs: dict[str, Path]) -> None:
    """What the Dagster report asset does: records in memory, not read back."""
    for run_dir in (runs["fake-verbose"], multi_runs["fake-evil"]):
        run = load_run(run_dir)
        assert render_report([Run.of(run.manifest, list(run))]) == render_report([run])


def test_a_secondary_scorers_error_is_listed_with_the_failures(tmp_path: Path) -> None:
    """A sample that passes the primary scorer but whose judge could not grade it is shown,
    labelled with that scorer, its judge output escaped."""
    from gradetrail_lib import run_spec

    (tmp_path / "data").mkdir()
    rows = [{"id": "ok", "answer": "4", "grade": "GRADE: C"},
            {"id": "odd", "answer": "4", "grade": "<b>no idea</b>"}]  # fmt: skip
    (tmp_path / "data" / "x.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "j.j2").write_text("{{ response }}")
    (tmp_path / "s.yaml").write_text(
        "name: sec\ndataset: {path: data/x.jsonl}\nprompt: 'what is 2+2'\n"
        "model: {provider: scripted, name: echo, answer_field: answer}\n"
        "scorers:\n  - {name: exact, type: exact}\n"
        "  - {name: j, type: judge, prompt_file: j.j2,"
        " model: {provider: scripted, name: grader, answer_field: grade}}\n"
    )
    (done,) = run_spec(tmp_path / "s.yaml", results_root=tmp_path / "r", cache=tmp_path / "c.db")
    html = write_report(done.run_dir).read_text()
    assert "Failed samples (1)" in html
    assert "judge error (j)" in html
    assert "&lt;b&gt;no idea&lt;/b&gt;" in html and "<b>no idea</b>" not in html
