"""`gradetrail view` without a browser: the real server on a loopback port over real run
directories, read with a plain HTTP client (raw request lines where a client would
normalise the path), and the sample index against the records themselves."""

import http.client
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import httpx
import pytest

from gradetrail_lib import cli, run_spec
from gradetrail_lib.analysis.stats import compare, run_stats
from gradetrail_lib.errors import UsageError
from gradetrail_lib.report.html import render_report
from gradetrail_lib.results.runs import load_run
from gradetrail_lib.results.trace import RecordWriter, TraceRecord
from gradetrail_lib.viewer.app import check_loopback
from gradetrail_lib.viewer.index import IndexCache, Query
from gradetrail_lib.viewer.links import sample_href, viewer_url
from tests.conftest import REPO, run_cli
from tests.support.http_client import HTTP
from tests.support.proc_sockets import tree_sockets
from tests.support.traces import manifest, record
from tests.support.viewer_runs import DIFFERS, MALICIOUS, SMALL, N, ViewerRuns, failing, make_runs
from tests.support.viewer_server import Background

ESCAPED = "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    return make_runs(tmp_path_factory.mktemp("viewer"))


@pytest.fixture(scope="module")
def url(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root) as base:
        yield base


def get(url: str, path: str) -> httpx.Response:
    return HTTP.get(url + path, timeout=30)


def raw_status(url: str, path: str, method: str = "GET") -> int:
    """The status of a request for exactly `path` (no client-side normalisation)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        conn.endheaders()
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def ids_in(html: str, attribute: str = "data-id") -> list[str]:
    return [unescape(m) for m in re.findall(rf'{attribute}="([^"]*)"', html)]


def failure_ids(html: str) -> list[str]:
    """The samples of a failures page, in order (each section's link text)."""
    return [
        unescape(m)
        for m in re.findall(r'<a class="sample-link mono" href="[^"]*">([^<]*)</a>', html)
    ]


def test_runs_page_lists_every_run_with_its_figures_and_unreadable_ones_as_error_rows(
    runs: ViewerRuns, url: str
) -> None:
    page = get(url, "/")
    assert page.status_code == 200
    html = page.text
    for name in (runs.a, runs.b, runs.small):
        assert f'href="/run/{name}"' in html
        primary = run_stats(runs.records(name), "exact").pass_rate
        assert primary.interval is not None
        assert f'({primary.successes}/{primary.n}) <span class="ci">' in html
        assert primary.interval.format(3) in html
    assert re.search(r'error-row"><td colspan="2" class="mono">broken</td>.*manifest\.json', html)
    assert "refused: a link out of the results root" in html
    assert 'href="/run/outside"' not in html
    assert ".history" not in html  # hidden entries are not runs
    # A forest plot for the spec (a and b, each latest run) and a's history of two runs.
    assert html.count('class="forest"') == 1
    assert html.count('class="history"') == 1
    assert "a: exact pass rate over 2 runs" in html
    # Filtered and sorted by the URL.
    only_b = get(url, "/?model=b").text
    assert f'href="/run/{runs.b}"' in only_b and f'href="/run/{runs.a}"' not in only_b
    by_n = get(url, "/?sort=n").text
    assert by_n.index(f'href="/run/{runs.small}"') < by_n.index(f'href="/run/{runs.a}"')
    assert get(url, "/?sort=bogus").status_code == 400


def test_every_response_carries_a_policy_that_allows_no_script(runs: ViewerRuns, url: str) -> None:
    paths = [
        "/", f"/run/{runs.a}", f"/run/{runs.a}?failures=1", sample_href(runs.a, "q003"),
        f"/diff/{runs.a}/{runs.b}", "/static/viewer.css", "/nope", f"/run/{runs.a}?page=x",
        f"/diff/{runs.a}/{runs.small}", "/run/broken",
    ]  # fmt: skip
    statuses = []
    for path in paths:
        response = get(url, path)
        statuses.append(response.status_code)
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp, path
        assert "style-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert response.headers["x-content-type-options"] == "nosniff"
        if response.headers["content-type"].startswith("text/html"):
            assert "<script" not in response.text.lower(), path
    assert statuses == [200, 200, 200, 200, 200, 200, 404, 400, 409, 422]


def test_paths_outside_the_root_are_not_found(runs: ViewerRuns, url: str, tmp_path: Path) -> None:
    # A run whose results file links out of the root.
    leaky = runs.root / "leaky"
    leaky.mkdir()
    (leaky / "manifest.json").write_bytes((runs.root / runs.a / "manifest.json").read_bytes())
    (leaky / "results.jsonl").symlink_to(runs.outside / "results.jsonl")
    try:
        for path in [
            "/run/..", "/run/%2e%2e", "/run/..%2f..%2fetc", "/run/..%2F..%2Fetc%2Fpasswd",
            "/run/../../etc/passwd", "/run//etc/passwd", "/run/%2Fetc%2Fpasswd",
            "/run/outside", "/run/outside/sample/q000", "/run/leaky", "/run/.", "/run/",
            f"/run/{runs.a}/", f"/run/{runs.a}/sample/..%2F..%2Fmanifest.json",
            f"/run/{runs.a}/sample/../manifest.json", "/diff/outside/" + runs.a,
            f"/diff/{runs.a}/..", f"/diff/{runs.a}/%2e%2e", "/run/.history.jsonl",
            "/static/../manifest.json", "/static/%2e%2e/viewer.css",
        ]:  # fmt: skip
            assert raw_status(url, path) == 404, path
    finally:
        (leaky / "results.jsonl").unlink()
        (leaky / "manifest.json").unlink()
        leaky.rmdir()


def test_the_viewer_writes_nothing_and_accepts_only_reads(runs: ViewerRuns, url: str) -> None:
    def tree() -> dict[str, tuple[int, int]]:
        out = {}
        for dirpath, _, files in os.walk(runs.root.parent):
            for f in files:
                st = os.lstat(os.path.join(dirpath, f))
                out[os.path.join(dirpath, f)] = (st.st_mtime_ns, st.st_size)
        return out

    before = tree()
    for path in ["/", f"/run/{runs.a}?failures=1&q=wrong", f"/diff/{runs.a}/{runs.b}?all=1",
                 sample_href(runs.b, "q001"), f"/run/{runs.b}?sort=-score:judged"]:  # fmt: skip
        assert get(url, path).status_code == 200
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert raw_status(url, f"/run/{runs.a}", method) == 405
        assert raw_status(url, "/", method) == 405
    assert tree() == before


def test_run_page_failures_filters_search_sort_and_pages(runs: ViewerRuns, url: str) -> None:
    records = runs.records(runs.a)
    expected = [r.id for r in records if failing(r)]
    html = get(url, f"/run/{runs.a}?failures=1").text
    assert failure_ids(html) == expected
    assert html.count(ESCAPED) >= 1 and MALICIOUS not in html
    # Failing one scorer; an outcome; a failure mode; text search (the prompt's markup).
    short = get(url, f"/run/{runs.a}?scorer=short").text
    assert ids_in(short) == [r.id for r in records if not r.passes("short")]
    assert ids_in(get(url, f"/run/{runs.a}?mode=wrong_answer").text) == [
        r.id for r in records if r.failure_mode == "wrong_answer"
    ]
    assert ids_in(get(url, f"/run/{runs.a}?outcome=provider_error").text) == []
    assert ids_in(get(url, f"/run/{runs.a}?q=WRONG").text) == [
        r.id for r in records if r.response == "wrong"
    ]
    assert ids_in(get(url, f"/run/{runs.a}?q=%3Cb%3Ebold").text) == [r.id for r in records]
    assert ids_in(get(url, f"/run/{runs.a}?q=q017").text) == ["q017"]
    # Sorted by a score (descending, stable), paged 5 at a time.
    ranked = sorted(records, key=lambda r: -(r.score_of("exact") or 0))
    pages = [ids_in(get(url, f"/run/{runs.a}?sort=-score:exact&per=5&page={p}").text)
             for p in range(1, 6)]  # fmt: skip
    assert sum(pages, []) == [r.id for r in ranked]
    last = get(url, f"/run/{runs.a}?sort=-score:exact&per=5&page=5").text
    assert 'rel="prev" href="/run/' in last and 'rel="next"' not in last
    assert "page=4" in last and "sort=-score%3Aexact" in last and "per=5" in last
    for bad in ["?scorer=nope", "?outcome=nope", "?mode=nope", "?sort=nope", "?per=0",
                "?failures=maybe"]:  # fmt: skip
        assert get(url, f"/run/{runs.a}{bad}").status_code == 400, bad


def test_sample_page_shows_the_sample_in_full(runs: ViewerRuns, url: str) -> None:
    (rec,) = [r for r in runs.records(runs.a) if r.id == "q003"]
    html = get(url, sample_href(runs.a, "q003")).text
    assert ESCAPED in html and MALICIOUS not in html
    assert "What is 3? &lt;b&gt;bold&lt;/b&gt;" in html  # the rendered prompt
    for call in rec.calls:
        assert call.request_key in html
    judge = next(c for c in rec.calls if c.role == "judge")
    assert judge.text is not None and "the answer &lt;script&gt;" in html
    for name, entry in rec.scores.items():
        assert f"{name}: {entry.score:.3f}" in html
    first, last = get(url, sample_href(runs.a, "q000")).text, get(url, sample_href(runs.a, "q023"))
    assert 'rel="prev"' not in first and 'rel="next"' in first
    assert last.status_code == 200 and 'rel="next"' not in last.text
    assert get(url, sample_href(runs.a, "nope")).status_code == 404
    assert get(url, sample_href(runs.a, "q003", repeat=1)).status_code == 404


def test_diff_shows_the_disagreements_with_the_paired_statistics(
    runs: ViewerRuns, url: str
) -> None:
    a, b = runs.records(runs.a), runs.records(runs.b)
    ours = get(url, f"/diff/{runs.a}/{runs.b}").text
    expected = compare(a, b, "exact", labels=("qa/a", "qa/b"))
    disagree = [
        x.id for x, y in zip(a, b, strict=True) if x.score_of("exact") != y.score_of("exact")
    ]
    assert ids_in(ours) == disagree and set(disagree) <= DIFFERS
    assert f'id="paired-p">{expected.p_value:.4g}<' in ours
    assert expected.difference.interval is not None
    assert expected.difference.interval.format(3) in ours
    assert (
        f"{expected.both_pass} / {expected.both_fail} / {expected.a_only} / {expected.b_only}"
        in ours
    )
    assert ids_in(get(url, f"/diff/{runs.a}/{runs.b}?all=1").text) == [r.id for r in a]
    # Another scorer, whose disagreements differ.
    judged = get(url, f"/diff/{runs.a}/{runs.b}?scorer=judged").text
    assert ids_in(judged) == [
        x.id for x, y in zip(a, b, strict=True) if x.score_of("judged") != y.score_of("judged")
    ]
    # The diff form lands on the diff.
    form = HTTP.get(f"{url}/diff?a={runs.a}&b={runs.b}", follow_redirects=False)
    assert form.status_code == 303 and form.headers["location"] == f"/diff/{runs.a}/{runs.b}"


def test_diff_refuses_runs_whose_samples_differ_with_the_counts(runs: ViewerRuns, url: str) -> None:
    page = get(url, f"/diff/{runs.a}/{runs.small}")
    assert page.status_code == 409
    text = unescape(page.text)
    assert f"{N - SMALL} only in A" in text and "0 only in B" in text
    assert f"({SMALL} are shared)" in text


def test_a_malformed_record_is_reported_on_the_page(runs: ViewerRuns, url: str) -> None:
    bad = runs.root / "badline"
    bad.mkdir()
    (bad / "manifest.json").write_bytes((runs.root / runs.a / "manifest.json").read_bytes())
    lines = (runs.root / runs.a / "results.jsonl").read_text().splitlines()
    lines[4] = lines[4].replace('"outcome":"scored"', '"outcome":"exploded"')
    (bad / "results.jsonl").write_text("\n".join(lines) + "\n")
    try:
        # The line's error is its sample's (step 12): the rest of the run is served.
        page = get(url, "/run/badline")
        assert page.status_code == 200
        assert "badline/results.jsonl:5: outcome" in unescape(page.text)
        sample = get(url, sample_href("badline", "q004"))
        assert sample.status_code == 422
        assert "badline/results.jsonl:5: outcome" in unescape(sample.text)
        assert get(url, "/").status_code == 200  # the runs page still lists the rest
    finally:
        for f in bad.iterdir():
            f.unlink()
        bad.rmdir()


def test_the_index_pages_a_large_run_like_the_records(tmp_path: Path) -> None:
    """2,000 records of every outcome and failure mode, with repeats: each selection is
    what filtering the records themselves gives, and pages read only their lines."""
    path = tmp_path / "results.jsonl"
    modes = ["wrong_answer", "truncated", "provider_error", "thrash", None]
    recs: list[TraceRecord] = []
    for i in range(2000):
        mode = modes[i % 5]
        score = 1.0 if mode in (None, "thrash") else 0.0  # an agent stopped early fails
        recs.append(
            record(f"c{i // 2:04d}", {"s": score, "t": 0.5 + (i % 3) / 4}, repeat=i % 2,
                   failure_mode=mode, answered=mode != "provider_error", response=f"answer {i}")
        )  # fmt: skip
    with RecordWriter(path) as out:
        out.write(recs)
    cache = IndexCache()
    with open(path, "rb") as source:
        index = cache.get(path, source, ["s", "t"])
        assert index.clustered and index.n == 2000
        checks = {
            Query(failures=True): [r for r in recs if failing(r, "s")],
            Query(scorer="t"): [r for r in recs if not r.passes("t")],
            Query(mode="none"): [r for r in recs if r.failure_mode is None],
            Query(outcome="provider_error"): [r for r in recs if r.outcome == "provider_error"],
            Query(text="ANSWER 19"): [r for r in recs if r.response and "answer 19" in r.response],
        }
        for query, expected in checks.items():
            got = index.read(source, [int(p) for p in index.select(query, source)])
            assert [(r.id, r.repeat) for r in got] == [(r.id, r.repeat) for r in expected]
        by_id = index.select(Query(sort="-id"), source)
        assert [index.ids[p] for p in by_id[:2]] == ["c0999", "c0999"]
        assert index.pass_rate("s") == run_stats(recs, "s").pass_rate
        assert cache.get(path, source, ["s", "t"]) is index  # unchanged: the same index
    with open(path, "ab") as more:
        more.write(b"\n")
    with open(path, "rb") as source:
        assert cache.get(path, source, ["s", "t"]) is not index  # changed: rebuilt


def test_view_refuses_an_address_beyond_loopback(runs: ViewerRuns) -> None:
    for host in ("0.0.0.0", "192.168.1.7", "::", "example.com"):
        with pytest.raises(UsageError, match="loopback only"):
            check_loopback(host)
        done = run_cli("view", str(runs.root), "--host", host, cwd=REPO)  # refused, in process
        assert done.returncode == 2, done.stderr
        assert "loopback only" in done.stderr
    assert check_loopback("localhost") == "127.0.0.1"
    assert cli.main(["view", str(runs.root / "missing")]) == 2


def test_view_command_listens_on_loopback_only(runs: ViewerRuns) -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "gradetrail_lib.cli", "view", str(runs.root), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:(\d+)/)", line)
        assert match, line
        assert get(match.group(1).rstrip("/"), "/").status_code == 200
        listening = [s for s in tree_sockets(server.pid) if s.listening]
        assert listening and all(s.local == ("127.0.0.1", int(match.group(2))) for s in listening)
        # A Host header naming another machine (DNS rebinding) is refused.
        other = HTTP.get(match.group(1), headers={"host": "attacker.example"}, timeout=30)
        assert other.status_code == 400
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_report_draws_the_forest_plot(runs: ViewerRuns) -> None:
    html = render_report([load_run(runs.root / runs.a), load_run(runs.root / runs.b)])
    (svg,) = re.findall(r'<svg [^>]*class="forest".*?</svg>', html, re.S)
    for label in ("qa/a", "qa/b"):
        rate = run_stats(runs.records(runs.a if label == "qa/a" else runs.b), "exact").pass_rate
        assert rate.interval is not None
        assert f">{label}</text>" in svg and rate.interval.format(3) in svg
    assert "<script" not in svg


def test_dagster_metadata_links_to_the_runs_page(
    runs: ViewerRuns, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gradetrail_assets.metadata import viewer_metadata

    monkeypatch.delenv("GRADETRAIL_VIEWER_URL", raising=False)
    assert viewer_url("results/qa-a-0123") is None and viewer_metadata("results/x") == {}
    monkeypatch.setenv("GRADETRAIL_VIEWER_URL", url + "/")
    assert viewer_url(Path("/x/results/qa a#1")) == f"{url}/run/qa%20a%231"
    link = viewer_metadata(str(runs.root / runs.a))["viewer"].value
    assert link == f"{url}/run/{runs.a}"
    assert HTTP.get(link, timeout=30).status_code == 200


def test_reproducibility_warnings_are_flagged(tmp_path: Path) -> None:
    """A dirty tree, a served model other than the requested one, and a directory named
    for another identity than its manifest's."""
    root = tmp_path / "results"
    run = root / "spec-m-0123456789ab"
    run.mkdir(parents=True)
    recs = [record("s1", 1.0), record("s2", 0.0)]
    built = manifest(warnings=["the git work tree has uncommitted changes"])
    built = built.model_copy(
        update={
            "git": built.git.model_copy(update={"sha": "f" * 40, "dirty": True}),
            "model": built.model.model_copy(update={"served": ["m-2026-01-01"]}),
        }
    )
    (run / "manifest.json").write_text(built.model_dump_json())
    with RecordWriter(run / "results.jsonl") as out:
        out.write(recs)
    with Background(root) as base:
        html = unescape(get(base, "/").text)
        run_page = unescape(get(base, f"/run/{run.name}").text)
    for text in (html, run_page):
        assert "dirty git tree" in text
        assert "served m-2026-01-01 ≠ requested m" in text
        assert "identity mismatch: directory 0123456789ab, manifest iiiiiiiiiiii" in text
        assert "the git work tree has uncommitted changes" in text
    assert "0.500 (1/2)" in html  # no figures in this manifest: counted from the records


def test_an_agents_sample_page_shows_its_trajectory_step_by_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.agents.test_agent import agent, project
    from tests.support.fake_llm_server import FakeLLMServer

    monkeypatch.setenv("GT_KEY", "sk-fake-not-a-secret")
    with FakeLLMServer(responder=agent) as srv:
        spec = project(tmp_path, f"{srv.base_url}/v1")
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    name = done.run_dir.name
    budget = next(r for r in done.records if r.id == "budget")
    with Background(tmp_path / "r") as base:
        html = unescape(get(base, sample_href(name, "budget")).text)
        stopped = get(base, f"/run/{name}?failures=1&mode=thrash").text
        failing_all = get(base, f"/run/{name}?failures=1").text
    assert len(budget.trajectory) == 3
    for i, step in enumerate(budget.trajectory, start=1):
        assert f'<span class="mono">step {i}</span>' in html and step.request_key in html
        for result in step.tool_results:
            assert result.content in html
    assert "stopped: over the step budget" in html
    assert failure_ids(stopped) == ["loop"]
    anchors = re.findall(r'<details class="step" id="([^"]+)"', failing_all)
    assert anchors and len(anchors) == len(set(anchors))  # unique in the page


def test_a_run_with_repeats_gives_intervals_over_cases(runs: ViewerRuns, tmp_path: Path) -> None:
    specs = runs.root.parent / "specs"  # the module's specs, run again into a root of its own
    (done,) = run_spec(
        specs / "qa.yaml", models=["a"], repeats=3, results_root=tmp_path / "r",
        cache=tmp_path / "cache.duckdb",
    )  # fmt: skip
    assert runs.a != done.run_dir.name
    rate = run_stats(done.records, "exact").pass_rate
    assert rate.clusters == N and rate.interval is not None
    with Background(tmp_path / "r") as base:
        runs_page = get(base, "/").text
        run_page = get(base, f"/run/{done.run_dir.name}").text
        sample = get(base, sample_href(done.run_dir.name, "q002", repeat=2)).text
    assert rate.interval.format(3) in runs_page
    assert f"({rate.successes}/{rate.n}, {N} cases)" in run_page
    assert "repeat 2" in sample


def test_the_history_plot_reads_a_shared_store(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two machines (results roots) sharing a Postgres store: the viewer of one plots
    both machines' runs from the store; its run directories still come from its root."""
    from gradetrail_lib.cache.postgres import close_pools
    from gradetrail_lib.history.store import open_history
    from tests.support.fake_llm_server import FakeLLMServer

    monkeypatch.setenv("GRADETRAIL_STORE", postgres_url)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "answer": "yes"}) + "\n" for i in range(4))
    )
    answers = iter(["yes", "yes", "yes", "no"] + ["no"] * 4)
    with FakeLLMServer(responder=lambda body: next(answers)) as srv:
        (tmp_path / "s.yaml").write_text(
            "name: nightly\ndataset: {path: data/x.jsonl}\nprompt: 'q {{ id }}'\n"
            f'model: {{provider: openai_compatible, name: m-1, base_url: "{srv.base_url}/v1"}}\n'
            "params: {temperature: 0, max_tokens: 4}\nscorer: {type: exact}\n"
        )
        for machine in ("a", "b"):
            run_spec(tmp_path / "s.yaml", results_root=tmp_path / machine,
                     cache=tmp_path / f"{machine}.db", read_cache=False)  # fmt: skip
    assert not (tmp_path / "b" / ".history.jsonl").exists()
    store = open_history(tmp_path / "b", store=postgres_url, cache="c.db")
    with Background(tmp_path / "b", history=store) as base:
        html = get(base, "/").text
    assert "m-1: score pass rate over 2 runs (run history)" in html
    with Background(tmp_path / "b") as base:  # the file under the root: nothing recorded
        assert "run history" not in get(base, "/").text
    close_pools()


def test_the_history_plot_shows_every_recorded_run_of_one_identity(tmp_path: Path) -> None:
    """A nightly re-run of an unchanged spec replaces its directory; the run history keeps
    both runs, and the runs page plots both."""
    from tests.support.fake_llm_server import FakeLLMServer

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "answer": "yes"}) + "\n" for i in range(4))
    )
    answers = iter(["yes", "yes", "yes", "no"] + ["no"] * 4)
    with FakeLLMServer(responder=lambda body: next(answers)) as srv:
        (tmp_path / "s.yaml").write_text(
            "name: nightly\ndataset: {path: data/x.jsonl}\nprompt: 'q {{ id }}'\n"
            f'model: {{provider: openai_compatible, name: m-1, base_url: "{srv.base_url}/v1"}}\n'
            "params: {temperature: 0, max_tokens: 4}\nscorer: {type: exact}\n"
        )
        root = tmp_path / "results"
        for _ in range(2):  # the same identity, other answers (the cache not read)
            run_spec(tmp_path / "s.yaml", results_root=root, cache=tmp_path / "c.db",
                     read_cache=False)  # fmt: skip
    assert len([p for p in root.iterdir() if not p.name.startswith(".")]) == 1
    with Background(root) as base:
        html = get(base, "/").text
    assert "m-1: score pass rate over 2 runs (run history)" in html


def test_a_multiple_choice_sample_page_shows_each_options_log_likelihood(tmp_path: Path) -> None:
    """Options with their log-likelihoods (from the fake's echoed prompt logprobs), the
    chosen one and the gold one marked."""
    from tests.support.fake_llm_server import FakeLLMServer

    rows = [{"id": "m1", "q": "The sky is", "opts": ["blue", "a <b>green</b> cheese"], "key": 1}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with FakeLLMServer(latency_s=0.0) as server:
        spec = {
            "name": "mc-view",
            "dataset": {"path": "data.jsonl"},
            "prompt": "{{ q }}",
            "choices": "{{ opts }}",
            "gold": "{{ key }}",
            "model": {"provider": "openai_compatible", "name": "fake-1",
                      "base_url": f"{server.base_url}/v1"},
        }  # fmt: skip
        (done,) = run_spec(
            spec, base_dir=tmp_path, results_root=tmp_path / "r", cache=tmp_path / "c.db"
        )
    (record_,) = done.records
    assert record_.choices is not None and record_.choices.chosen == 0
    with Background(tmp_path / "r") as base:
        html = get(base, sample_href(done.run_dir.name, "m1")).text
    assert "<h2>Choices</h2>" in html
    assert "a &lt;b&gt;green&lt;/b&gt; cheese" in html  # escaped
    for option in record_.choices.options:
        assert option.loglikelihood is not None and f"{option.loglikelihood:.4f}" in html
    rows_html = re.findall(r"<tr( class=\"chosen\")?><td class=\"mono\">([AB])</td>", html)
    assert rows_html == [(' class="chosen"', "A"), ("", "B")]
    chosen_row, gold_row = (
        html.split('<td class="mono">A</td>')[1],
        html.split('<td class="mono">B</td>')[1],
    )
    assert 'badge chosen">chosen' in chosen_row.split("</tr>")[0]
    assert 'badge hit">gold' in gold_row.split("</tr>")[0]
