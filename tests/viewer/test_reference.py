"""The labelling queue shows each sample's reference: its fields in the run's own dataset
file (read through the datasets loader, only while the file's hash is the manifest's),
escaped and made visible like every text in the viewer."""

import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest

from gradetrail_lib.results.trace import DatasetInfo, Manifest, SpecInfo
from gradetrail_lib.viewer.links import label_href, sample_href
from gradetrail_lib.viewer.reference import DatasetShelf
from tests.support.http_client import HTTP
from tests.support.viewer_runs import MALICIOUS, SMALL, ViewerRuns, make_runs
from tests.support.viewer_server import Background

HOSTILE = "\u202eevil.txt\x00 <script>document.title='ref'</script> [x](http://e.example)"


def manifest_of(runs: ViewerRuns, name: str) -> Manifest:
    return Manifest.model_validate_json((runs.root / name / "manifest.json").read_text())


def copy_with_manifest(runs: ViewerRuns, name: str, manifest: Manifest) -> str:
    """runs.small copied as `name` with another manifest (the same records)."""
    target = runs.root / name
    shutil.copytree(runs.root / runs.small, target)
    (target / "manifest.json").write_text(manifest.model_dump_json())
    return name


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    runs = make_runs(tmp_path_factory.mktemp("reference"))
    m = manifest_of(runs, runs.small)
    # The same run, its dataset's hash not the file's: the file has changed since.
    copy_with_manifest(
        runs,
        "changed",
        m.model_copy(update={"dataset": DatasetInfo(path=m.dataset.path, hash="0" * 64)}),
    )
    # The same run over a dataset whose reference field is hostile (its own hash).
    folder = runs.root.parent / "hostile-specs"
    (folder / "data").mkdir(parents=True)
    source = Path(m.spec.path).parent / m.dataset.path
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    text = "".join(json.dumps(row | {"expected": HOSTILE}) + "\n" for row in rows)
    (folder / "data" / "small.jsonl").write_text(text)
    copy_with_manifest(
        runs, "hostile", m.model_copy(update={
            "spec": SpecInfo(name=m.spec.name, path=str(folder / "small.yaml"), hash=m.spec.hash),
            "dataset": DatasetInfo(
                path="data/small.jsonl", hash=hashlib.sha256(text.encode()).hexdigest()
            ),
        }),
    )  # fmt: skip
    return runs


@pytest.fixture(scope="module")
def url(runs: ViewerRuns) -> Iterator[str]:
    with Background(runs.root, labels=True) as base:
        yield base


def queue_pages(url: str, run: str) -> dict[str, str]:
    """Each queue page of the run (seed 7) by its sample's id."""
    out = {}
    for at in range(1, SMALL + 1):
        page = HTTP.get(url + label_href(run, {"seed": "7", "at": str(at)}), timeout=30)
        assert page.status_code == 200, page.text[-2000:]
        (sample,) = re.findall(r'<h2 class="mono" id="queue-sample">([^<]*)', page.text)
        out[unescape(sample).strip()] = page.text
    return out


def reference_of(html: str, where: str = r'<dd id="queue-reference">(.*?)</dd>') -> dict[str, str]:
    block = re.search(where, html, flags=re.S)
    assert block is not None
    names = re.findall(r'<div class="role mono">([^<]*)</div>', block.group(1))
    texts = re.findall(r'<pre class="reference-field">(.*?)</pre>', block.group(1), flags=re.S)
    return dict(zip(names, texts, strict=True))


def test_the_queue_shows_the_samples_reference_from_the_runs_dataset(
    runs: ViewerRuns, url: str
) -> None:
    pages = queue_pages(url, runs.small)
    assert len(pages) == SMALL
    for i in range(SMALL):
        shown = reference_of(pages[f"q{i:03d}"])
        assert set(shown) == {"question", "expected", "answer", "answer_b", "grade"}
        assert shown["expected"] == str(i)
        assert "reference unavailable" not in pages[f"q{i:03d}"]
    # q003's `grade` quotes markup: shown as text, never as markup.
    assert MALICIOUS not in pages["q003"]
    assert unescape(reference_of(pages["q003"])["grade"]).startswith(f"the answer {MALICIOUS}")


def test_a_changed_dataset_is_named_and_its_fields_are_not_shown(
    runs: ViewerRuns, url: str
) -> None:
    page = HTTP.get(url + label_href("changed", {"seed": "7", "at": "1"}), timeout=30)
    assert page.status_code == 200
    assert "reference unavailable: the dataset file" in page.text
    assert "has changed since this run (its hash differs)" in page.text
    assert reference_of(page.text) == {}
    # The scorers' reasons are still there.
    assert "Scorers&#39; reasons" in page.text or "Scorers' reasons" in page.text


def test_a_hostile_reference_is_escaped_and_visible(runs: ViewerRuns, url: str) -> None:
    page = HTTP.get(url + label_href("hostile", {"seed": "7", "at": "1"}), timeout=30)
    assert page.status_code == 200
    shown = reference_of(page.text)["expected"]
    assert "<script>" not in shown and "\u202e" not in shown and "\x00" not in shown
    assert unescape(shown) == HOSTILE.replace("\u202e", "\\u202e").replace("\x00", "\\u0000")


def test_a_dataset_is_read_once_per_file_signature_and_a_missing_one_is_named(
    runs: ViewerRuns,
) -> None:
    shelf = DatasetShelf()
    m = manifest_of(runs, runs.small)
    first = shelf.reference(m, "q002", 100)
    assert first.problem is None
    assert {f.name: f.text for f in first.fields} == {
        "question": "What is 2? <b>bold</b>", "expected": "2", "answer": "2",
        "answer_b": "2", "grade": "GRADE: C",
    }  # fmt: skip
    shelf.reference(m, "q004", 100)
    assert shelf.reads == 1
    cut = shelf.reference(m, "q003", 10)
    assert {f.name: f.text for f in cut.fields}["grade"] == "the answer… (cut at 10 characters)"
    assert shelf.reference(m, "nope", 100).problem == "the dataset file has no sample 'nope'"
    missing = m.model_copy(update={"dataset": DatasetInfo(path="data/gone.jsonl", hash="0" * 64)})
    problem = shelf.reference(missing, "q002", 100).problem
    assert problem is not None and problem.startswith("cannot read the dataset file")
    hf = m.model_copy(
        update={"dataset": DatasetInfo(path="hf:org/set:default:test@" + "a" * 40, hash="0")}
    )
    assert "Hugging Face" in (shelf.reference(hf, "q002", 100).problem or "")


def test_the_sample_page_shows_the_reference_too(runs: ViewerRuns, url: str) -> None:
    on_sample = r'<div id="sample-reference">(.*?)</div>\s*<h2>'
    page = HTTP.get(url + sample_href(runs.small, "q005"), timeout=30)
    assert reference_of(page.text, on_sample)["expected"] == "5"
    changed = HTTP.get(url + sample_href("changed", "q005"), timeout=30)
    assert "reference unavailable: the dataset file" in changed.text
    with Background(runs.root) as read_only:  # the plain viewer shows it as well
        page = HTTP.get(read_only + sample_href(runs.small, "q005"), timeout=30)
        assert reference_of(page.text, on_sample)["expected"] == "5"


def test_a_dataset_over_the_size_cap_is_not_read(runs: ViewerRuns) -> None:
    m = manifest_of(runs, runs.small)
    size = (Path(m.spec.path).parent / m.dataset.path).stat().st_size
    assert DatasetShelf(max_bytes=size).reference(m, "q002", 100).problem is None
    small = DatasetShelf(max_bytes=size - 1)
    problem = small.reference(m, "q002", 100).problem
    assert problem is not None and f"is over {size - 1:,} bytes" in problem
    assert small.reads == 0
