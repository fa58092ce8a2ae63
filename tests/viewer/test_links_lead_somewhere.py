"""Links that lead somewhere and pages that say what they mean (found at 1,400 px in
Chromium, checked here over HTTP): the run page's "Diff with" offers only runs that pair;
a queue link on a read-only viewer says what serves it; the diff names each run once and
ends a refusal with one full stop; a package dataset's reference is read where the
package is; the history plot draws one point for a row of identical runs, with x labels
that tell the runs apart, for the scorer the page is asked for."""

import json
import re
import shutil
import sys
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import httpx
import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.analysis.stats.intervals import proportion
from gradetrail_lib.history.entries import FileHistory
from gradetrail_lib.results.runs import load_run
from gradetrail_lib.viewer.links import diff_href, label_href, sample_href
from tests.support.http_client import HTTP
from tests.support.viewer_runs import ViewerRuns, make_runs
from tests.support.viewer_server import Background


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    """The viewer's runs, then qa/a with its judge's prompt edited (the same dataset:
    it pairs with qa/a, but compare refuses the judge), then qa/a again unchanged (the
    same results: the run history has it twice in a row)."""
    where = tmp_path_factory.mktemp("links")
    made = make_runs(where)
    edited = where / "specs-edited"
    shutil.copytree(where / "specs", edited)
    judge = edited / "judge.j2"
    judge.write_text(judge.read_text().replace("Reply", "Answer"))
    run_spec(edited / "qa.yaml", models=["a"], results_root=made.root,
             cache=where / "cache.duckdb")  # fmt: skip
    run_spec(where / "specs" / "qa.yaml", models=["a"], results_root=made.root,
             cache=where / "cache.duckdb")  # fmt: skip
    return made


@pytest.fixture(scope="module")
def url(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root) as base:
        yield base


def get(url: str, path: str) -> httpx.Response:
    return HTTP.get(url + path, timeout=60)


def run_names(runs: ViewerRuns) -> dict[str, str]:
    """Each run directory's name by its spec file's folder and model (`specs/a`)."""
    out = {}
    for path in runs.root.iterdir():
        if path.is_dir() and not path.is_symlink() and (path / "manifest.json").exists():
            try:
                m = load_run(path).manifest
            except Exception:  # broken/: not a run
                continue
            folder = Path(m.spec.path).parent.name
            out[f"{folder}/{Path(m.spec.path).stem}/{m.model.requested}"] = path.name
    return out


def test_diff_with_offers_only_runs_that_pair_and_each_answers(runs: ViewerRuns, url: str) -> None:
    names = run_names(runs)
    page = get(url, f"/run/{runs.a}").text
    form = re.search(r'<form class="diff-form".*?</form>', page, re.S)
    assert form is not None
    offered = re.findall(r'<option value="([^"]+)"', form.group(0))
    # qa/b and the edited judge's qa/a pair with qa/a; small.yaml's subset does not.
    assert sorted(offered) == sorted([runs.b, names["specs-edited/qa/a"]])
    assert runs.small not in offered
    for other in offered:
        assert get(url, diff_href(runs.a, other)).status_code == 200
    # What it leaves out would have answered 409.
    assert get(url, diff_href(runs.a, runs.small)).status_code == 409


def test_a_queue_link_on_a_read_only_viewer_says_what_serves_it(runs: ViewerRuns, url: str) -> None:
    before = sorted(p.name for p in runs.root.iterdir())
    for response in (
        get(url, label_href(runs.a, {"seed": "1"})),
        HTTP.post(url + label_href(runs.a), data={"label": "pass"}, timeout=30),
    ):
        assert response.status_code == 404
        text = unescape(response.text)
        assert "gradetrail view --labels" in text and "read-only" in text
    assert sorted(p.name for p in runs.root.iterdir()) == before  # nothing written


def test_the_diff_names_each_run_once_and_a_refusal_ends_once(runs: ViewerRuns, url: str) -> None:
    edited = run_names(runs)["specs-edited/qa/a"]
    page = unescape(get(url, diff_href(runs.a, edited, {"scorer": "judged"})).text)
    # Both runs are qa/a: their labels say nothing more, so each name is shown once.
    for side, name in (("a", runs.a), ("b", edited)):
        header = re.search(rf'<div id="side-{side}">(.*?)</div>', page, re.S)
        assert header is not None
        assert re.sub(r"<[^>]+>", "", header.group(1)).split() == [side.upper(), name]
    refused = re.search(r'<p class="notes" id="refused">(.*?)</p>', page, re.S)
    assert refused is not None
    text = re.sub(r"<[^>]+>", "", refused.group(1))
    assert "scorer 'judged' hash differs" in text
    assert ".." not in text and text.endswith("gives.")
    assert text.startswith("compare would refuse these runs: scorer 'judged' hash differs")
    # Runs with labels of their own keep them beside their names.
    page = unescape(get(url, diff_href(runs.a, runs.b)).text)
    side = re.search(r'<div id="side-b">(.*?)</div>', page, re.S)
    assert side is not None and "qa/b" in side.group(1) and runs.b in side.group(1)


def test_a_package_datasets_reference_is_read_where_the_package_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dataset: {package: ..., path: ..., id_field: task_id}` (HumanEval's form): the
    reference is the package's file, by its own id field, not a path made up under the
    spec's folder."""
    package = tmp_path / "site" / "probs_pkg"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    rows = [{"task_id": f"T/{i}", "prompt": f"p{i}", "answer": str(i)} for i in range(3)]
    (package / "data" / "probs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    sys.modules.pop("probs_pkg", None)
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "probs.yaml").write_text(
        "name: probs\n"
        "dataset: {package: probs_pkg, path: data/probs.jsonl, id_field: task_id}\n"
        "prompt: '{{ prompt }}'\n"
        "model: {provider: scripted, name: oracle, answer_field: answer}\n"
        "params: {temperature: 0, max_tokens: 8}\n"
        "scorer: {type: exact, field: answer}\n"
    )
    (done,) = run_spec(specs / "probs.yaml", results_root=tmp_path / "results",
                       cache=tmp_path / "cache.duckdb")  # fmt: skip
    assert done.manifest.dataset.path == "package:probs_pkg/data/probs.jsonl"
    with Background(tmp_path / "results") as base:
        page = unescape(get(base, sample_href(done.run_dir.name, "T/1")).text)
    reference = page[page.index('id="sample-reference"') :]
    assert "reference unavailable" not in reference
    assert '<div class="role mono">prompt</div><pre class="reference-field">p1</pre>' in reference
    assert '<div class="role mono">answer</div><pre class="reference-field">1</pre>' in reference
    assert "task_id" not in reference  # the id is the page's title, not a field
    # A package no longer installed: said so, with no path made up.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path / "site")])
    sys.modules.pop("probs_pkg", None)
    with Background(tmp_path / "results") as base:
        page = unescape(get(base, sample_href(done.run_dir.name, "T/1")).text)
    assert "reference unavailable: the run read package:probs_pkg/data/probs.jsonl: " in page
    assert "package 'probs_pkg' is not installed" in page
    assert str(specs / "package:") not in page


def ticks(svg: str) -> list[str]:
    return re.findall(r'class="tick">([^<]*)</text>', svg)


def test_the_history_plot_draws_a_row_of_identical_runs_once(runs: ViewerRuns, url: str) -> None:
    history = [h for h in FileHistory(runs.root).read() if h.spec == "qa" and h.model == "a"]
    # qa/a, small, the edited judge, qa/a again: the last has the first's identity and
    # results, but a run came between, so the two stay points of their own.
    assert len(history) == 4
    page = unescape(get(url, "/").text)
    (svg,) = re.findall(r'<svg[^>]*class="history".*?</svg>', page, re.S)
    assert "a: exact pass rate over 4 runs (run history)" in svg
    labels = ticks(svg)
    assert len(labels) == len(set(labels)) >= 2  # told apart, all on one day
    assert re.search(r"on \d{4}-\d{2}-\d{2} \(UTC\)", svg)


def test_identical_runs_in_a_row_are_one_point(tmp_path: Path) -> None:
    made = make_runs(tmp_path / "made")
    specs, cache = tmp_path / "made" / "specs", tmp_path / "made" / "cache.duckdb"
    for _ in range(2):  # re-runs from the cache: the same identity, the same results
        run_spec(specs / "qa.yaml", models=["b"], results_root=made.root, cache=cache)
    history = [h for h in FileHistory(made.root).read() if h.model == "b"]
    assert len(history) == 3 and len({h.fingerprint for h in history}) == 1
    edited = tmp_path / "made" / "specs-edited"
    shutil.copytree(specs, edited)
    (edited / "judge.j2").write_text((specs / "judge.j2").read_text() + "Be strict.\n")
    run_spec(edited / "qa.yaml", models=["b"], results_root=made.root, cache=cache)
    with Background(made.root) as base:
        page = unescape(get(base, "/?spec=qa&model=b").text)
    (svg,) = re.findall(r'<svg[^>]*class="history".*?</svg>', page, re.S)
    # Four runs: the three identical ones are one point, the edited judge's another.
    assert "b: exact pass rate over 2 runs (run history)" in svg
    assert svg.count("<circle") == 2
    assert "3 runs with the same results" in svg
    assert len(ticks(svg)) == 2 and len(set(ticks(svg))) == 2


def test_the_plots_show_the_scorer_asked_for(runs: ViewerRuns, url: str) -> None:
    page = unescape(get(url, "/?scorer=digits").text)
    assert 'option value="digits" selected' in page
    forest = re.search(r'<svg[^>]*class="forest".*?</svg>', page, re.S)
    assert forest is not None and "qa: digits pass rate per model (latest run)" in forest.group(0)
    digits_b = load_run(runs.root / runs.b).manifest.scores["digits"]
    expected = proportion(digits_b.passed, digits_b.n)
    assert expected.interval is not None
    assert f"{expected.value:.3f} {expected.interval.format(3)}" in forest.group(0)
    (history,) = re.findall(r'<svg[^>]*class="history".*?</svg>', page, re.S)
    # Only the primary scorer is in the run history: the directories give the others.
    assert "a: digits pass rate over 3 runs" in history and "run history" not in history
    # An unknown scorer is a bad request, not a silent default.
    assert get(url, "/?scorer=nope").status_code == 400
    # The default plots each spec's primary scorer.
    assert "qa: exact pass rate per model" in unescape(get(url, "/").text)


def test_the_runs_pages_diff_form_groups_the_runs_that_pair(runs: ViewerRuns, url: str) -> None:
    page = unescape(get(url, "/").text)
    form = re.search(r'<form class="diff-form".*?</form>', page, re.S)
    assert form is not None
    side_a = re.search(r'<select name="a">(.*?)</select>', form.group(0), re.S)
    assert side_a is not None
    groups = {
        label: re.findall(r'<option value="([^"]+)"', body)
        for label, body in re.findall(
            r'<optgroup label="([^"]+)">(.*?)</optgroup>', side_a.group(1)
        )
    }
    names = run_names(runs)
    (full,) = [g for g in groups.values() if runs.a in g]
    assert sorted(full) == sorted([runs.a, runs.b, names["specs-edited/qa/a"]])
    assert [runs.small] in groups.values()
    assert any(label.startswith("qa: 24 samples, dataset ") for label in groups)
    # As it opens, the form diffs two runs of one group: that diff answers.
    first_a = re.search(r'<option value="([^"]+)"', side_a.group(1))
    chosen_b = re.search(
        r'<select name="b">.*?<option value="([^"]+)" selected>', form.group(0), re.S
    )
    assert first_a is not None and chosen_b is not None
    assert first_a.group(1) != chosen_b.group(1)
    assert get(url, diff_href(first_a.group(1), chosen_b.group(1))).status_code == 200
