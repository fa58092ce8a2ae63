"""`gradetrail view --labels` over HTTP: the queue's order, labels written through the
forms, and every post that is not the viewer's own refused with nothing written. The
browser's side (Chromium) is in test_labelling_browser.py."""

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from gradetrail_lib.labels.store import labels_path, response_hash
from gradetrail_lib.viewer.app import host_names
from gradetrail_lib.viewer.labelling import (
    BadLabel,
    check_origin,
    form_fields,
    own_hosts,
    safe_back,
    stratified_order,
)
from gradetrail_lib.viewer.links import label_href, sample_href
from tests.conftest import REPO
from tests.support.http_client import HTTP
from tests.support.viewer_runs import ViewerRuns, make_runs
from tests.support.viewer_server import Background
from tests.viewer.test_viewer_hardening import copy_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    return make_runs(tmp_path_factory.mktemp("labelling"))


@pytest.fixture(scope="module")
def url(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root, labels=True) as base:
        yield base


@pytest.fixture(scope="module")
def read_only(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root) as base:
        yield base


def tree(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            st = os.lstat(os.path.join(dirpath, f))
            out[os.path.join(dirpath, f)] = (st.st_mtime_ns, st.st_size)
    return out


def labels_on_file(runs: ViewerRuns) -> list[dict[str, object]]:
    path = labels_path(runs.root)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def form_of(html: str, index: int = 0) -> dict[str, str]:
    """The hidden fields of the page's `index`-th label form."""
    forms = re.findall(r'<form class="label-form".*?</form>', html, flags=re.S)
    assert len(forms) > index, html[-2000:]
    fields = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', forms[index])
    return {k: unescape(v) for k, v in fields}


def post(url: str, run: str, fields: dict[str, str], **headers: str) -> httpx.Response:
    sent = {"origin": url} | {k.replace("_", "-"): v for k, v in headers.items()}
    sent = {k: v for k, v in sent.items() if v != ""}
    return HTTP.post(url + label_href(run), data=fields, headers=sent, timeout=30)


# -- the queue's order ------------------------------------------------------------------
@pytest.mark.parametrize("n_pass,n_fail", [(70, 30), (3, 97), (50, 50), (1, 0), (0, 5)])
def test_the_queue_is_a_seeded_permutation_stratified_in_proportion(
    n_pass: int, n_fail: int
) -> None:
    rng = np.random.default_rng(7)
    verdicts = rng.permutation([True] * n_pass + [False] * n_fail).tolist()
    n = len(verdicts)
    order = stratified_order(verdicts, seed=11)
    assert sorted(order) == list(range(n))
    assert order == stratified_order(verdicts, seed=11)
    share = n_pass / n
    passes = 0
    for k, position in enumerate(order, start=1):
        passes += verdicts[position]
        # Every prefix holds the run's share of judged-pass samples, to within one.
        assert abs(passes - k * share) < 1, (k, passes)
    if n_pass and n_fail:
        # Both verdicts early: the rarer within the first n / rarer + 1 places.
        rarer = min(n_pass, n_fail)
        head = [verdicts[p] for p in order[: n // rarer + 1]]
        assert True in head and False in head
        assert order != stratified_order(verdicts, seed=12)


def test_the_queue_order_within_a_verdict_is_uniform() -> None:
    """Each judged-pass sample is equally likely first among the passes (a shuffle, not a
    fixed order): over 2,000 seeds, no position is first far more often than 1 in 4."""
    verdicts = [True, False] * 4
    firsts = np.zeros(8)
    for seed in range(2000):
        order = stratified_order(verdicts, seed)
        firsts[next(p for p in order if verdicts[p])] += 1
    chosen = firsts[[0, 2, 4, 6]]
    assert chosen.sum() == 2000
    assert np.all(np.abs(chosen / 2000 - 0.25) < 0.04), chosen


# -- the checks, as functions -------------------------------------------------------------
def test_origin_check_accepts_only_the_viewers_own_address() -> None:
    server = ("127.0.0.1", 8765)
    names = host_names("127.0.0.1")  # the Host check's own names, with the port
    assert own_hosts(names, server) == {"127.0.0.1:8765", "localhost:8765"}
    assert own_hosts(host_names("::1"), ("::1", 9)) == {"[::1]:9", "localhost:9"}
    check_origin({"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8765"}, names, server)
    check_origin(
        {"host": "localhost:8765", "referer": "http://localhost:8765/run/x"}, names, server
    )
    from gradetrail_lib.viewer.labelling import Refused

    for headers in [
        {"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8766"},
        {"host": "127.0.0.1:8765", "origin": "null"},
        {"host": "127.0.0.1:8765", "origin": "http://localhost:8765"},  # not this Host
        {"host": "127.0.0.1:8765"},  # neither Origin nor Referer
        {"host": "127.0.0.1:8765", "referer": "http://127.0.0.1:8766/x"},
        {"host": "127.0.0.1:8766", "origin": "http://127.0.0.1:8766"},  # another port
        {"host": "attacker.example:8765", "origin": "http://attacker.example:8765"},
        {"origin": "http://127.0.0.1:8765"},  # no Host
    ]:
        with pytest.raises(Refused):
            check_origin(headers, names, server)
    with pytest.raises(Refused):
        check_origin({"host": "127.0.0.1:8765", "origin": "http://127.0.0.1:8765"}, names, None)
    with pytest.raises(Refused):  # 127.0.0.2 is loopback, but not this viewer
        check_origin({"host": "127.0.0.2:8765", "origin": "http://127.0.0.2:8765"}, names, server)


def test_a_form_body_is_one_value_per_known_field() -> None:
    form = "application/x-www-form-urlencoded"
    assert form_fields(b"id=a%2Fb&label=pass&note=", form) == {
        "id": "a/b",
        "label": "pass",
        "note": "",
    }
    for body, kind, message in [
        (b"id=a&id=b", form, "given twice"),
        (b"id=a&evil=1", form, "unknown field"),
        (b"id=a", "multipart/form-data; boundary=x", "expected a form"),
        (b"id=\xff", form, "not UTF-8"),
    ]:
        with pytest.raises(BadLabel, match=message):
            form_fields(body, kind)


def test_after_a_label_the_browser_goes_back_to_this_viewer_only() -> None:
    assert safe_back("/run/x?failures=1#sample-3", "/f") == "/run/x?failures=1#sample-3"
    for back in ["//evil.example/", "http://evil.example/", "javascript:alert(1)", "", "run/x",
                 "/\\evil.example", "/run/x\r\nSet-Cookie: a=b"]:  # fmt: skip
        assert safe_back(back, "/f") == "/f", back


# -- read-only by default ------------------------------------------------------------------
def test_the_read_only_viewer_has_no_label_form_and_no_write_route(
    runs: ViewerRuns, read_only: str
) -> None:
    before = tree(runs.root)
    for path in [f"/run/{runs.a}?failures=1", sample_href(runs.a, "q001"), f"/run/{runs.a}"]:
        response = HTTP.get(read_only + path, timeout=30)
        assert response.status_code == 200
        assert 'method="post"' not in response.text.lower()
        assert "label-form" not in response.text and 'name="token"' not in response.text
        assert response.headers["referrer-policy"] == "no-referrer"
    assert HTTP.get(read_only + label_href(runs.a, {"seed": "1"}), timeout=30).status_code == 404
    refused = HTTP.post(
        read_only + label_href(runs.a), data={"id": "q001", "label": "pass"},
        headers={"origin": read_only}, timeout=30,
    )  # fmt: skip
    assert refused.status_code == 404  # no such route
    assert tree(runs.root) == before


# -- labelling -------------------------------------------------------------------------------
def test_a_queue_label_is_random_and_a_sample_page_label_is_selected(
    runs: ViewerRuns, url: str
) -> None:
    first = HTTP.get(url + label_href(runs.small), timeout=30)
    assert first.status_code == 303
    assert re.fullmatch(rf"/label/{runs.small}\?seed=\d+", first.headers["location"])
    queue = HTTP.get(url + label_href(runs.small, {"seed": "5"}), timeout=30)
    assert queue.status_code == 200 and queue.headers["referrer-policy"] == "same-origin"
    assert "0 of 10 labelled" in queue.text
    fields = form_of(queue.text)
    assert fields["via"] == "queue"
    before = len(labels_on_file(runs))
    saved = post(url, runs.small, fields | {"label": "fail", "note": "off by one"})
    assert saved.status_code == 303, saved.text
    assert saved.headers["location"] == label_href(runs.small, {"seed": "5", "after": "1"})
    nxt = HTTP.get(url + saved.headers["location"], timeout=30)
    assert nxt.status_code == 303
    assert nxt.headers["location"] == label_href(runs.small, {"seed": "5", "at": "2"})
    again = HTTP.get(url + label_href(runs.small, {"seed": "5"}), timeout=30)
    assert "1 of 10 labelled" in again.text
    written = labels_on_file(runs)[before:]
    record = next(r for r in runs.records(runs.small) if r.id == fields["id"])
    assert record.response is not None
    assert written == [
        {
            "version": 1,
            "spec": "qa", "id": record.id, "repeat": 0,
            "response_sha256": response_hash(record.response), "label": "fail", "scorer": None,
            "note": "off by one", "labeller": "tester", "time": written[0]["time"],
            "sampling": "random",
        }
    ]  # fmt: skip
    # The same sample from its own page: the label is shown, and a new one is `selected`.
    page = HTTP.get(url + sample_href(runs.small, record.id), timeout=30)
    assert "labelled" in page.text and "off by one" in page.text
    fields = form_of(page.text)
    assert fields["via"] == "page"
    saved = post(url, runs.small, fields | {"label": "pass"})
    assert saved.status_code == 303
    assert saved.headers["location"] == sample_href(runs.small, record.id)
    assert labels_on_file(runs)[-1]["sampling"] == "selected"
    assert labels_on_file(runs)[-1]["label"] == "pass"
    # Skip writes nothing and moves on.
    fields = form_of(again.text)
    count = len(labels_on_file(runs))
    skipped = post(url, runs.small, fields | {"label": "skip"})
    assert skipped.status_code == 303 and len(labels_on_file(runs)) == count


def test_the_failures_page_labels_each_failure(runs: ViewerRuns, url: str) -> None:
    page = HTTP.get(url + f"/run/{runs.a}?failures=1", timeout=30)
    sections = page.text.count('<section class="failure')
    assert sections > 1 and page.text.count('class="label-form"') == sections
    fields = form_of(page.text, 1)
    saved = post(url, runs.a, fields | {"label": "fail"}, referer=url + "/", origin="")
    assert saved.status_code == 303, saved.text  # a Referer of this viewer will do
    assert saved.headers["location"].startswith(f"/run/{runs.a}?failures=1#sample-")
    assert labels_on_file(runs)[-1]["id"] == fields["id"]


def refused_cases(
    url: str, fields: dict[str, str]
) -> list[tuple[str, dict[str, str], dict[str, str], int]]:
    port = url.rsplit(":", 1)[1]
    return [
        ("no token", {k: v for k, v in fields.items() if k != "token"}, {}, 403),
        ("a wrong token", fields | {"token": "x" * len(fields["token"])}, {}, 403),
        ("another origin", fields, {"origin": "http://127.0.0.1:1"}, 403),
        ("origin null", fields, {"origin": "null"}, 403),
        (
            "no origin, another referer",
            fields,
            {"origin": "", "referer": "http://127.0.0.1:1/"},
            403,
        ),
        ("no origin, no referer", fields, {"origin": "", "referer": ""}, 403),
        (
            "another port in Host",
            fields,
            {"host": "127.0.0.1:1", "origin": "http://127.0.0.1:1"},
            403,
        ),
        ("localhost, another origin", fields, {"host": f"localhost:{port}"}, 403),
        ("an unknown sample", fields | {"id": "no-such-sample"}, {}, 404),
        ("an unknown repeat", fields | {"repeat": "3"}, {}, 404),
        ("a bad repeat", fields | {"repeat": "-1"}, {}, 400),
        ("a bad value", fields | {"label": "maybe"}, {}, 400),
        ("no value", fields, {}, 400),
        ("a changed response", fields | {"sha": "0" * 64}, {}, 409),
        ("a long note", fields | {"label": "pass", "note": "x" * 5000}, {}, 400),
        ("a bad seed", fields | {"label": "pass", "seed": "-4"}, {}, 400),
    ]


def test_posts_that_are_not_the_viewers_own_are_refused_and_write_nothing(
    runs: ViewerRuns, url: str
) -> None:
    page = HTTP.get(url + sample_href(runs.b, "q002"), timeout=30)
    fields = form_of(page.text) | {"label": "pass"}
    before = tree(runs.root)
    for what, sent, headers, status in refused_cases(url, fields):
        if what == "no value":
            sent = {k: v for k, v in sent.items() if k != "label"}
        response = post(url, runs.b, sent, **headers)
        assert response.status_code == status, (what, response.text[-600:])
        assert "location" not in response.headers, what
        assert tree(runs.root) == before, what
    # Not a form, too big, an unknown run, and a label route for a run outside the root.
    base = {"origin": url}
    too_big = HTTP.post(url + label_href(runs.b), content=b"note=" + b"x" * 70_000,
                         headers=base | {"content-type": "application/x-www-form-urlencoded"},
                         timeout=30)  # fmt: skip
    assert too_big.status_code == 413
    as_json = HTTP.post(url + label_href(runs.b), json=fields, headers=base, timeout=30)
    assert as_json.status_code == 400
    unknown = post(url, "no-such-run", fields)
    assert unknown.status_code == 404
    outside = post(url, "outside", fields)
    assert outside.status_code == 404
    assert tree(runs.root) == before
    # And the same form from this viewer is taken.
    assert post(url, runs.b, fields).status_code == 303
    assert tree(runs.root) != before


def test_the_token_is_per_process(runs: ViewerRuns, url: str) -> None:
    fields = form_of(HTTP.get(url + sample_href(runs.b, "q004"), timeout=30).text)
    with Background(runs.root, labels=True) as other:
        theirs = form_of(HTTP.get(other + sample_href(runs.b, "q004"), timeout=30).text)
        assert theirs["token"] != fields["token"]
        before = tree(runs.root)
        refused = post(other, runs.b, fields | {"label": "pass"})
        assert refused.status_code == 403 and tree(runs.root) == before


def test_view_labels_says_it_labels(runs: ViewerRuns) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "gradetrail_lib.cli", "view", str(runs.root), "--port", "0",
         "--labels", "--labeller", "ann"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert "labelling as 'ann'" in line, line
        match = re.search(r"at (http://127\.0\.0\.1:\d+)/", line)
        assert match, line
        page = HTTP.get(match.group(1) + sample_href(runs.b, "q005"), timeout=30)
        assert 'class="label-form"' in page.text
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_malformed_labels_file_hides_the_labels_and_breaks_no_page(
    runs: ViewerRuns, tmp_path: Path
) -> None:
    root = tmp_path / "results"
    root.mkdir()
    shutil.copytree(runs.root / runs.small, root / runs.small)
    labels_path(root).write_text('{"spec": "qa", "id": "q000"\n')
    with Background(root, labels=True) as base:
        queue = HTTP.get(base + label_href(runs.small, {"seed": "1"}), timeout=30)
        assert queue.status_code == 200
        assert "The labels file cannot be read" in queue.text and ".labels.jsonl:1" in queue.text
        assert "0 of 10 labelled" in queue.text
        assert HTTP.get(base + sample_href(runs.small, "q001"), timeout=30).status_code == 200


def _huge_and_damaged(i: int, record: dict[str, Any]) -> str | dict[str, Any]:
    if i == 3:
        record["response"] = "word " * 10_000 + "THE END"  # past the pages' cut
    if i == 4:
        del record["repeat"]  # a line that is not a record
    return record


def test_a_label_is_about_the_whole_response_and_never_a_damaged_line(
    runs: ViewerRuns, url: str
) -> None:
    from gradetrail_lib.viewer.pages import TEXT_CAP

    target = copy_run(runs, "qa-huge-damaged", _huge_and_damaged)
    name = target.name
    whole = "word " * 10_000 + "THE END"
    assert len(whole) > TEXT_CAP
    page = HTTP.get(url + sample_href(name, "q003"), timeout=30)
    assert page.status_code == 200 and "THE END" not in page.text  # the page holds the cut
    fields = form_of(page.text)
    assert fields["sha"] == response_hash(whole)
    assert post(url, name, fields | {"label": "fail"}).status_code == 303
    assert labels_on_file(runs)[-1]["response_sha256"] == response_hash(whole)
    # The queue leaves the damaged line out, and counts the label on the whole response.
    queue = HTTP.get(url + label_href(name, {"seed": "2"}), timeout=30)
    assert queue.status_code == 200
    # Labels follow unchanged responses: run a's labels (the same spec) count here too.
    on_file = {(w["id"], w["repeat"], w["response_sha256"]) for w in labels_on_file(runs)}
    readable = [json.loads(line) for line in (target / "results.jsonl").read_text().splitlines()]
    readable = [r for r in readable if "repeat" in r]
    assert len(readable) == 23
    done = sum((r["id"], r["repeat"], response_hash(r["response"])) in on_file for r in readable)
    assert ("q003", 0, response_hash(whole)) in on_file
    assert f"{done} of 23 labelled" in queue.text
    before = tree(runs.root)
    damaged = post(url, name, fields | {"id": "q004", "label": "pass"})
    assert damaged.status_code == 422 and tree(runs.root) == before


def test_labels_made_in_the_queue_are_what_calibrate_reads(
    runs: ViewerRuns, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gradetrail_lib import cli

    root = tmp_path / "results"
    root.mkdir()
    shutil.copytree(runs.root / runs.small, root / runs.small)
    records = {r.id: r for r in runs.records(runs.small)}
    truth: dict[str, bool] = {}
    with Background(root, labels=True) as base:
        queue = label_href(runs.small, {"seed": "9"})
        for _ in range(len(records)):
            fields = form_of(HTTP.get(base + queue, timeout=30).text)
            record = records[fields["id"]]
            truth[record.id] = record.response == str(int(record.id[1:]))  # read, as a person
            verdict = "pass" if truth[record.id] else "fail"
            assert post(base, runs.small, fields | {"label": verdict}).status_code == 303
        done = HTTP.get(base + queue, timeout=30).text
        assert f"{len(records)} of {len(records)} labelled" in done and 'id="queue-done"' in done
    assert cli.main(["calibrate", str(root / runs.small), "--json"]) == 0
    judged = json.loads(capsys.readouterr().out)["judged"]
    assert judged["n_labeled"] == len(records)
    confusion = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for sample_id, person in truth.items():
        judge = records[sample_id].passes("judged")
        confusion[("t" if judge == person else "f") + ("p" if judge else "n")] += 1
    assert judged["confusion"] == confusion
