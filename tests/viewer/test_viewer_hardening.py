"""The viewer against hostile data and addresses (step 12, item 7): the Host check, a
damaged results file, the preview cap, and bidirectional controls shown as escapes."""

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from gradetrail_lib.report.html import render_report
from gradetrail_lib.results.runs import load_run
from gradetrail_lib.viewer.links import sample_href
from tests.conftest import REPO
from tests.support.http_client import HTTP
from tests.support.viewer_runs import ViewerRuns, make_runs
from tests.support.viewer_server import Background


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    return make_runs(tmp_path_factory.mktemp("viewer"))


@pytest.fixture(scope="module")
def url(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root) as base:
        yield base


BIDI_ID = "\u202eevil.txt"
NUL_ID = "nul\x00id"
LINK_ID = "[x](http://evil.example/) | a\nb"
UP_ID = "../../etc/passwd"
HOSTILE_IDS = {1: BIDI_ID, 2: NUL_ID, 5: LINK_ID, 6: UP_ID, 7: "<script>alert(1)</script>"}


def copy_run(
    runs: ViewerRuns, name: str, edit: Callable[[int, dict[str, Any]], str | dict[str, Any]]
) -> Path:
    """Run `a` copied as `name`, each record line `i` replaced by `edit(i, record)`: a
    record (written as JSON) or the line's raw text."""
    target = runs.root / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    shutil.copy(runs.root / runs.a / "manifest.json", target / "manifest.json")
    lines = (runs.root / runs.a / "results.jsonl").read_text().splitlines()
    with open(target / "results.jsonl", "w") as out:
        for i, line in enumerate(lines):
            edited = edit(i, json.loads(line))
            out.write(edited if isinstance(edited, str) else json.dumps(edited) + "\n")
    return target


def _hostile(i: int, record: dict[str, Any]) -> dict[str, Any]:
    if i in HOSTILE_IDS:
        record["id"] = HOSTILE_IDS[i]
        record["response"] = f"\u202e{record['response']}\x00 tail"
        record["scores"]["exact"]["score"] = 0.0  # failing: the report shows it
    return record


def test_bidi_controls_and_nul_show_as_escapes_in_the_viewer_and_the_report(
    runs: ViewerRuns, url: str
) -> None:
    copy_run(runs, "hostile", _hostile)
    pages = [HTTP.get(url + "/run/hostile", timeout=30)]
    pages.append(HTTP.get(url + "/run/hostile?failures=1", timeout=30))
    for sample_id in HOSTILE_IDS.values():
        pages.append(HTTP.get(url + sample_href("hostile", sample_id), timeout=30))
    report = render_report([load_run(runs.root / "hostile")])
    for page in pages:
        assert page.status_code == 200, page.url
    for html in [page.text for page in pages] + [report]:
        assert "\u202e" not in html and "\x00" not in html
        assert "<script>alert" not in html
    run_page = unescape(pages[0].text)
    assert "\\u202eevil.txt" in run_page and "nul\\u0000id" in run_page
    assert "\\u202eevil.txt" in unescape(report)
    sample_page = unescape(pages[2].text)
    assert "\\u202e" in sample_page and "\\u0000 tail" in sample_page


def _printed_url(root: Path, host: str) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen(
        [sys.executable, "-m", "gradetrail_lib.cli", "view", str(root), "--port", "0",
         "--host", host],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    assert server.stdout is not None
    line = server.stdout.readline()
    match = re.search(r"at (http://\S+/)", line)
    if match is None:
        server.terminate()
        server.wait(timeout=30)
        raise AssertionError(line + (server.stderr.read() if server.stderr else ""))
    return server, match.group(1)


@pytest.mark.parametrize("host", ["127.0.0.2", "::1", "localhost"])
def test_the_viewer_answers_its_own_printed_url(runs: ViewerRuns, host: str) -> None:
    server, url = _printed_url(runs.root, host)
    try:
        if host == "localhost":  # the client resolves the name; the Host header keeps it
            assert url.startswith("http://localhost:")
        page = HTTP.get(url, timeout=30)
        assert page.status_code == 200, page.text
        port = url.rstrip("/").rsplit(":", 1)[1]
        # Any other name for the machine is refused (DNS rebinding), the port kept.
        for other in ("attacker.example", f"attacker.example:{port}", "127.0.0.3", "[::2]"):
            refused = HTTP.get(url, headers={"host": other}, timeout=30)
            assert refused.status_code == 400, other
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_host_check_accepts_exactly_the_listening_address(runs: ViewerRuns) -> None:
    with Background(runs.root, host="127.0.0.2") as url:
        port = url.rsplit(":", 1)[1]
        assert HTTP.get(url + "/", timeout=30).status_code == 200
        for other in (f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.2.evil", ""):
            assert HTTP.get(url + "/", headers={"host": other}, timeout=30).status_code == 400


def _damaged(i: int, record: dict[str, Any]) -> str | dict[str, Any]:
    if i == 4:
        del record["repeat"]  # a line missing `repeat`
    if i == 23:
        return json.dumps(record)[:40]  # a truncated last line, no newline
    return record


def test_a_damaged_line_is_its_samples_error_and_the_rest_is_served(
    runs: ViewerRuns, url: str
) -> None:
    copy_run(runs, "damaged", _damaged)
    page = HTTP.get(url + "/run/damaged", timeout=30)
    assert page.status_code == 200
    text = unescape(page.text)
    assert len(re.findall(r'<tr class="sample[^"]*" data-id=', page.text)) == 24
    assert "damaged/results.jsonl:5: repeat" in text  # the line's error, on its row
    assert "damaged/results.jsonl:24:" in text
    assert 'data-id="q010"' in page.text  # the lines around them are served
    # Its sample page names the error; the others are served as usual.
    bad = HTTP.get(url + sample_href("damaged", "q004"), timeout=30)
    assert bad.status_code == 422 and "damaged/results.jsonl:5: repeat" in unescape(bad.text)
    assert HTTP.get(url + sample_href("damaged", "q005"), timeout=30).status_code == 200
    failures = HTTP.get(url + "/run/damaged?failures=1", timeout=30)
    assert failures.status_code == 200
    assert "damaged/results.jsonl:24:" in unescape(failures.text)
    # The run list marks the run as damaged, not as healthy.
    runs_page = unescape(HTTP.get(url + "/", timeout=30).text)
    row = runs_page.split('href="/run/damaged"')[1].split("</tr>")[0]
    assert "damaged: 2 unreadable lines" in row
    healthy = runs_page.split(f'href="/run/{runs.a}"')[1].split("</tr>")[0]
    assert "damaged" not in healthy


def test_a_run_of_an_older_format_is_still_unreadable_as_a_whole(
    runs: ViewerRuns, url: str
) -> None:
    def older(i: int, record: dict[str, Any]) -> dict[str, Any]:
        record["schema_version"] = record["schema_version"] - 1
        return record

    copy_run(runs, "older", older)
    page = HTTP.get(url + "/run/older", timeout=30)
    assert page.status_code == 422
    assert "older/results.jsonl:1:" in unescape(page.text)
    shutil.rmtree(runs.root / "older")


MB = 1 << 20


def _huge(i: int, record: dict[str, Any]) -> dict[str, Any]:
    if i == 3:  # a failing sample (the report's and the failures view's)
        record["response"] = "\u202e" + "word " * (MB // 5) + "THE END"
        record["messages"][0]["content"] = "prompt " * (MB // 7)
    return record


def test_a_huge_response_is_capped_on_the_pages_and_whole_at_its_raw_link(
    runs: ViewerRuns, url: str
) -> None:
    from gradetrail_lib.viewer.pages import TEXT_CAP

    copy_run(runs, "huge", _huge)
    line = (runs.root / "huge" / "results.jsonl").read_text().splitlines()[3]
    assert len(line) > 2 * MB  # a 1 MB response and a 1 MB prompt
    bound = 4 * TEXT_CAP + 200_000  # two capped texts, escaped, and the page around them
    for path in ("/run/huge", "/run/huge?failures=1", sample_href("huge", "q003")):
        page = HTTP.get(url + path, timeout=30)
        assert page.status_code == 200 and len(page.content) < bound, (path, len(page.content))
        assert "THE END" not in page.text
        if path != "/run/huge":  # the preview is a line; these show the text, cut
            assert "truncated" in page.text
    sample = unescape(HTTP.get(url + sample_href("huge", "q003"), timeout=30).text)
    match = re.search(r'<a class="raw" href="([^"]+)"', sample)
    assert match, "the sample page links to the record in full"
    raw = HTTP.get(url + unescape(match.group(1)), timeout=30)
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/plain")
    record = json.loads(raw.text)  # the record as written, bidi controls as JSON escapes
    assert record["response"].endswith("THE END") and "\u202e" not in raw.text
    assert record["response"] == json.loads(line)["response"]


def test_the_diff_tells_huge_responses_apart_past_the_cut(runs: ViewerRuns, url: str) -> None:
    """Two responses of three times TEXT_CAP characters, alike but for their last: the
    pages hold them cut, and the diff still says they differ (it compares them whole).
    How far past the cut they go is not the point, so they stay small."""
    from gradetrail_lib.viewer.pages import TEXT_CAP

    def huge(ending: str) -> Callable[[int, dict[str, Any]], dict[str, Any]]:
        def edit(i: int, record: dict[str, Any]) -> dict[str, Any]:
            if i == 0:
                record["response"] = "same " * (3 * TEXT_CAP // 5) + ending
            return record

        return edit

    copy_run(runs, "huge-a", huge("A"))
    copy_run(runs, "huge-b", huge("B"))
    copy_run(runs, "huge-c", huge("A"))
    differ = unescape(HTTP.get(url + "/diff/huge-a/huge-b?all=1", timeout=60).text)
    alike = unescape(HTTP.get(url + "/diff/huge-a/huge-c?all=1", timeout=60).text)
    first = differ.split('data-id="q000"')[1].split("</td>")[0]
    assert "responses differ" in first, first
    assert "same response" in alike.split('data-id="q000"')[1].split("</td>")[0]
