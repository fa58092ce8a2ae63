"""Images and documents in prompts: read from a sample's fields (a path relative to the
dataset, a data: URI, a loopback URL), keyed by their bytes' hash, checked against each
provider's limits at load, and sent in each API's shape to the loopback fake server
(which checks the shape and answers with the hashes of the media it was shown)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from gradetrail_lib import run_spec
from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.providers.media import limit_problem, media_part, pdf_pages, sniff
from gradetrail_lib.providers.openai_chat import OPENAI_MEDIA
from tests.conftest import run_cli
from tests.support.fake_llm_server import FakeLLMServer
from tests.support.media_files import GIF, JPEG, WEBP, make_charts, pdf, png

REPO = Path(__file__).resolve().parents[2]

COLOURS = [(255, 0, 0), (0, 128, 0), (0, 0, 255)]

# provider, model, extra model settings, the key's variable
PROVIDERS = [
    ("openai", "gpt-4o", "", "OPENAI_API_KEY"),
    ("azure_openai", "gpt4o-prod", ", api_version: '2025-04-01-preview'", "AZURE_OPENAI_API_KEY"),
    ("anthropic", "claude-sonnet-4-5", "", "ANTHROPIC_API_KEY"),
    ("gemini", "gemini-2.5-flash", "", "GEMINI_API_KEY"),
    ("openai_compatible", "fake-1", "", None),
]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_project(root: Path, provider: str, model: str, extra: str, base_url: str) -> Path:
    """Three samples, each an image (a file, a file, a data: URI), the first with a PDF
    too; the stored answer is the hash the fake answers, so every sample scores 1."""
    images = root / "data" / "img"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, colour in enumerate(COLOURS):
        data = png(4 + i, 3, colour)
        if i < 2:
            (images / f"c{i}.png").write_bytes(data)
            ref = f"img/c{i}.png"
        else:
            ref = "data:image/png;base64," + base64.b64encode(data).decode()
        row = {"id": f"s{i}", "chart": ref, "answer": sha(data)}
        if i == 0:
            (root / "data" / "form.pdf").write_bytes(pdf(2))
            row["chart"] = [ref, "form.pdf"]
            row["answer"] = f"{sha(data)}, {sha(pdf(2))}"
        rows.append(row)
    (root / "data" / "charts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    url = base_url + ("/v1" if provider in ("openai", "anthropic", "openai_compatible") else "")
    spec = root / "charts.yaml"
    spec.write_text(
        f"""name: charts
dataset: {{path: data/charts.jsonl}}
prompt: "What does the chart show?"
media: [chart]
models:
  - {{provider: {provider}, name: {model}, base_url: "{url}"{extra}}}
params: {{temperature: 0, max_tokens: 16}}
scorer: {{type: regex, pattern: "Media: {{{{ answer }}}}$"}}
"""
    )
    return spec


@pytest.mark.parametrize(("provider", "model", "extra", "key_env"), PROVIDERS)
def test_media_reach_each_api_in_its_shape_then_come_from_the_cache(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    model: str,
    extra: str,
    key_env: str | None,
) -> None:
    if key_env is not None:
        monkeypatch.setenv(key_env, "test-key-0123456789")
    with FakeLLMServer() as srv:
        spec = write_project(tmp_path, provider, model, extra, srv.base_url)
        (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert [r["status"] for r in srv.requests] == [200, 200, 200]
        # The fake answered from the bytes it decoded: each sample's hashes, in order.
        assert [r.score_of("score") for r in done.records] == [1.0, 1.0, 1.0]
        body = json.dumps(srv.requests[0]["body"])
        shape = {
            "openai": '"type": "image_url"',
            "azure_openai": '"type": "file"',
            "anthropic": '"type": "document"',
            "gemini": '"inline_data"',
            "openai_compatible": '"image_url"',
        }[provider]
        assert shape in body
        # The record keeps the hash, type and size of each medium, not its bytes or path.
        first = done.records[0].messages[-1]["content"]
        assert [p["type"] for p in first] == ["text", "image", "document"]
        assert first[2] == {
            "type": "document", "media_type": "application/pdf", "sha256": sha(pdf(2)),
            "size": len(pdf(2)), "pages": 2,
        }  # fmt: skip
        assert "img/c0.png" not in json.dumps(done.records[0].messages)

        (again,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == 3  # a re-run makes no call
        assert again.manifest.target.cache_hits == 3


def test_moving_a_file_changes_no_key_and_editing_one_resends_only_its_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key-0123456789")
    with FakeLLMServer() as srv:
        spec = write_project(tmp_path, "openai", "gpt-4o", "", srv.base_url)
        (first,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        keys = [r.calls[0].request_key for r in first.records]
        # Moved: another folder, the dataset's field updated. No key changes.
        data = tmp_path / "data"
        shutil.move(data / "img", data / "moved")
        rows = (data / "charts.jsonl").read_text().replace("img/", "moved/")
        (data / "charts.jsonl").write_text(rows)
        (moved,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert [r.calls[0].request_key for r in moved.records] == keys
        assert srv.calls == 3
        # The dataset file changed, so the run's identity did; the media did not.
        assert moved.manifest.identity != first.manifest.identity
        # Edited: only the sample showing that image is sent again.
        (data / "moved" / "c1.png").write_bytes(png(9, 9, (1, 2, 3)))
        (edited,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        assert srv.calls == 4
        edited_keys = [r.calls[0].request_key for r in edited.records]
        changed = [a != b for a, b in zip(keys, edited_keys, strict=True)]
        assert changed == [False, True, False]
        # Same dataset file, another image: the dataset hash (run identity) covers media.
        assert edited.manifest.identity != moved.manifest.identity
        assert edited.manifest.dataset.hash != moved.manifest.dataset.hash


def test_an_openai_request_sends_an_https_image_as_a_url_but_inlines_a_document(
    tmp_path: Path,
) -> None:
    from gradetrail_lib.providers.adapter import resolved_messages
    from gradetrail_lib.providers.base import Endpoint, ModelRequest
    from gradetrail_lib.providers.media import MediaSource
    from gradetrail_lib.providers.openai_chat import OpenAIChatAdapter

    image, doc = png(2, 2, (9, 9, 9)), pdf(1)
    parts = [media_part(image, "image/png"), media_part(doc, "application/pdf")]
    media = {
        parts[0]["sha256"]: MediaSource(data=image, url="https://example.test/a.png"),
        parts[1]["sha256"]: MediaSource(data=doc, url="https://example.test/f.pdf", name="f.pdf"),
    }
    messages = [{"role": "user", "content": [{"type": "text", "text": "?"}, *parts]}]
    for provider in ("openai", "openai_compatible"):
        endpoint = Endpoint(provider, "gpt-4o", "https://api.test/v1", None)
        request = ModelRequest("k", endpoint, messages, {}, media=media)
        sent = OpenAIChatAdapter().body(request)["messages"][0]["content"]
        url = sent[1]["image_url"]["url"]
        # OpenAI fetches an image URL itself; a compatible server is sent the bytes.
        if provider == "openai":
            assert url == "https://example.test/a.png"
        else:
            assert url == "data:image/png;base64," + base64.b64encode(image).decode()
        assert sent[2] == {
            "type": "file",
            "file": {
                "filename": "f.pdf",
                "file_data": "data:application/pdf;base64," + base64.b64encode(doc).decode(),
            },
        }
    # The neutral messages are left as they were (the key's input).
    assert resolved_messages(request) is not messages and "data" not in messages[0]["content"][1]


def test_types_are_told_by_their_bytes_and_pages_counted() -> None:
    assert [sniff(b) for b in (png(1, 1, (0, 0, 0)), JPEG, WEBP, GIF, pdf(3), b"text")] == [
        "image/png", "image/jpeg", "image/webp", "image/gif", "application/pdf", None,
    ]  # fmt: skip
    assert pdf_pages(pdf(3)) == 3 and pdf_pages(pdf(1)) == 1


def test_a_provider_limit_is_a_load_error_naming_the_sample_line_before_any_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-0123456789")
    with FakeLLMServer() as srv:
        spec = write_project(tmp_path, "anthropic", "claude-sonnet-4-5", "", srv.base_url)
        # Anthropic takes at most 100 PDF pages a request: sample s1 (line 2) shows 101.
        (tmp_path / "data" / "big.pdf").write_bytes(pdf(101))
        rows = (tmp_path / "data" / "charts.jsonl").read_text().splitlines()
        row = json.loads(rows[1])
        row["chart"] = [row["chart"], "big.pdf"]
        rows[1] = json.dumps(row)
        rows[2] = rows[2].replace('"chart": "data:image/png', '"chart": "data:image/gif')
        (tmp_path / "data" / "charts.jsonl").write_text("\n".join(rows) + "\n")
        with pytest.raises(InputErrors) as raised:
            run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
        messages = [str(e) for e in raised.value.errors]
        assert messages[0].startswith("data/charts.jsonl:2: media: sample 's1': 101 document")
        assert "provider anthropic takes at most 100" in messages[0]
        assert messages[1].startswith("data/charts.jsonl:3: chart: sample 's2': a data: URI")
        assert srv.calls == 0 and not (tmp_path / "r").exists()


def test_a_missing_file_or_another_type_names_the_field() -> None:
    from gradetrail_lib.datasets.dataset import Sample
    from gradetrail_lib.spec.media import MediaResolver

    resolver = MediaResolver(Path("/nonexistent-folder"))
    sample = Sample(id="a", fields={"img": "x.png", "bad": 3}, line=7)
    with pytest.raises(InputError, match=r"^d.jsonl:7: img: sample 'a': .*No such file"):
        resolver.resolve(sample, "img", "d.jsonl")
    with pytest.raises(InputError, match=r"^d.jsonl:7: bad: .*not 3"):
        resolver.resolve(sample, "bad", "d.jsonl")


def test_limits_count_images_and_sizes() -> None:
    small = media_part(png(1, 1, (0, 0, 0)), "image/png")
    assert limit_problem(OPENAI_MEDIA, "openai", [small] * 500) is None
    assert "501 images" in str(limit_problem(OPENAI_MEDIA, "openai", [small] * 501))
    assert limit_problem(None, "local", [small]) == "provider local takes no images or documents"


def test_the_shipped_charts_spec_runs_offline_and_its_images_are_the_scripts(
    tmp_path: Path,
) -> None:
    """specs/charts.yaml (the README tour's): every chart answered, each record keeping
    its image's hash; the shipped PNGs are what scripts/make_charts.py draws."""
    drawn = tmp_path / "drawn"
    make_charts().main(drawn)
    shipped = REPO / "specs" / "data"
    for path in sorted((drawn / "charts").iterdir()):
        assert path.read_bytes() == (shipped / "charts" / path.name).read_bytes(), path.name
    assert (drawn / "charts.jsonl").read_text() == (shipped / "charts.jsonl").read_text()

    shutil.copytree(REPO / "specs", tmp_path / "specs")
    done = run_cli("run", "specs/charts.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "pass rate (score >= 1) 5/5" in done.stdout
    (run_dir,) = (tmp_path / "results").glob("charts-oracle-*")
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 5
    for record in records:
        image = record["messages"][-1]["content"][1]
        png_bytes = (shipped / "charts" / f"{record['id']}.png").read_bytes()
        assert image == {
            "type": "image", "media_type": "image/png", "sha256": sha(png_bytes),
            "size": len(png_bytes),
        }  # fmt: skip


def test_a_url_is_read_once_at_load_keyed_by_its_bytes_and_inlined_from_loopback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A media URL (here http on 127.0.0.1, a file server) is read at load for its hash;
    its bytes are sent inline (only an https URL is passed on to a provider); a URL
    off this machine that is not https is refused at load with the sample's line."""
    import functools
    import http.server
    import threading

    served = tmp_path / "served"
    served.mkdir()
    image = png(5, 5, (7, 7, 7))
    (served / "u.png").write_bytes(image)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-0123456789")
    try:
        with FakeLLMServer() as srv:
            spec = write_project(tmp_path, "anthropic", "claude-sonnet-4-5", "", srv.base_url)
            data = tmp_path / "data" / "charts.jsonl"
            rows = [json.loads(line) for line in data.read_text().splitlines()]
            rows[1]["chart"] = f"http://127.0.0.1:{httpd.server_address[1]}/u.png"
            rows[1]["answer"] = sha(image)
            data.write_text("".join(json.dumps(r) + "\n" for r in rows))
            (done,) = run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
            assert [r.score_of("score") for r in done.records] == [1.0, 1.0, 1.0]
            sources = [r["body"]["messages"][0]["content"][1]["source"] for r in srv.requests]
            inline = {"type": "base64", "media_type": "image/png",
                      "data": base64.b64encode(image).decode()}  # fmt: skip
            assert inline in sources

            rows[1]["chart"] = "http://example.invalid/u.png"
            data.write_text("".join(json.dumps(r) + "\n" for r in rows))
            with pytest.raises(InputError, match=r"^data/charts.jsonl:2: chart: .*must be https"):
                run_spec(spec, results_root=tmp_path / "r", cache=tmp_path / "c.db")
    finally:
        httpd.shutdown()
        httpd.server_close()
