"""`gradetrail view --labels` in Chromium (driven as in test_viewer_browser.py): ten
samples labelled through the queue and kept across a reload, a post forged by a page on
another loopback port refused, and the read-only viewer without a form that posts."""

import http.server
import json
import threading
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gradetrail_lib.labels.store import labels_path
from gradetrail_lib.viewer.links import label_href, sample_href
from tests.support.viewer_runs import ViewerRuns, make_runs
from tests.support.viewer_server import Background
from tests.viewer.test_viewer_browser import browser, click, page, pytestmark

if TYPE_CHECKING:
    from playwright.sync_api import Page

__all__ = ["browser", "page", "pytestmark"]  # the fixtures and the skip, shared


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    return make_runs(tmp_path_factory.mktemp("labelling-browser"))


@pytest.fixture(scope="module")
def url(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root, labels=True) as base:
        yield base


def labels_text(root: Path) -> str:
    path = labels_path(root)
    return path.read_text() if path.exists() else ""


def progress(page: "Page") -> str:
    return page.inner_text("#label-progress").strip()


def test_ten_samples_labelled_through_the_queue_are_kept(
    runs: ViewerRuns, url: str, page: "Page"
) -> None:
    records = {r.id: r for r in runs.records(runs.a)}
    n = len(records)
    before = labels_text(runs.root)
    page.goto(url + label_href(runs.a, {"seed": "7"}))
    assert progress(page) == f"0 of {n} labelled"
    labelled: dict[str, str] = {}
    for k in range(10):
        sample_id = page.inner_text("#queue-sample").split()[0]
        record = records[sample_id]
        assert sample_id not in labelled
        # The labeller reads the response against the reference: here, the number asked for.
        assert page.inner_text("#queue-response") == record.response
        verdict = "pass" if record.response == str(int(sample_id[1:])) else "fail"
        page.fill('form.label-form input[name="note"]', f"note {k}")
        click(page, f"form.label-form button.label-{verdict}")
        labelled[sample_id] = verdict
        assert progress(page) == f"{k + 1} of {n} labelled"
    # Both kinds of the judge's verdict among the ten (the queue is stratified).
    judged = {records[i].passes("judged") for i in labelled}
    assert judged == {True, False}
    page.reload()
    assert progress(page) == f"10 of {n} labelled"
    page.goto(url + label_href(runs.a, {"seed": "7"}))
    assert progress(page) == f"10 of {n} labelled"
    assert page.inner_text("#queue-sample").split()[0] not in labelled
    # On file: ten random labels, one per sample, with the verdicts given.
    written = [json.loads(line) for line in labels_text(runs.root)[len(before) :].splitlines()]
    assert {w["id"]: w["label"] for w in written} == labelled
    assert {w["sampling"] for w in written} == {"random"} and len(written) == 10
    # And each sample's page shows its label.
    for sample_id, verdict in list(labelled.items())[:3]:
        page.goto(url + sample_href(runs.a, sample_id))
        assert page.inner_text("form.label-form .current-label").startswith(f"labelled {verdict}")


ATTACK = """<!DOCTYPE html><html><body>
<form id="forged" method="post" action="{action}">
{fields}
<button type="submit" name="label" value="pass">win a prize</button>
</form></body></html>"""


class Attacker:
    """A page on another loopback port with a form that posts to the viewer."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("with_token", [True, False])
def test_a_post_forged_by_another_origin_is_refused(
    runs: ViewerRuns, url: str, page: "Page", with_token: bool
) -> None:
    # The real form's fields, the token too (as if it had leaked): the origin still refuses.
    page.goto(url + sample_href(runs.b, "q006"))
    hidden = page.locator('form.label-form input[type="hidden"]')
    fields = {
        hidden.nth(i).get_attribute("name") or "": hidden.nth(i).get_attribute("value") or ""
        for i in range(hidden.count())
    }
    assert fields["token"]
    if not with_token:
        fields.pop("token")
    inputs = "\n".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in fields.items()
    )
    html = ATTACK.format(action=escape(url + label_href(runs.b)), fields=inputs)
    before = labels_text(runs.root)
    with Attacker(html) as evil:
        page.goto(evil)
        with page.expect_navigation() as navigation:
            page.click("#forged button")
        response = navigation.value
        assert response is not None and response.status == 403
        assert "Refused" in page.inner_text("body")
    assert labels_text(runs.root) == before


def test_the_read_only_viewer_has_no_form_that_posts(runs: ViewerRuns, page: "Page") -> None:
    with Background(runs.root) as read_only:
        for path in [
            "/", f"/run/{runs.a}", f"/run/{runs.a}?failures=1", sample_href(runs.a, "q001"),
            f"/diff/{runs.a}/{runs.b}",
        ]:  # fmt: skip
            page.goto(read_only + path)
            methods = page.locator("form").evaluate_all("fs => fs.map(f => f.method)")
            assert all(m == "get" for m in methods), (path, methods)
            assert page.locator("form.label-form, input[name=token]").count() == 0
        response = page.goto(read_only + label_href(runs.a, {"seed": "1"}))
        assert response is not None and response.status == 404
