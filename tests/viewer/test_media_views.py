"""Images and documents where people look: the HTML report's failed samples and the
viewer's sample page show each image as a thumbnail read from the run's dataset files
(a data: URI, allowed by the CSP, nothing remote) and a document's name and page count;
a file edited since the run is named by its hash only; a markup file name is escaped."""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.http_client import HTTP
from tests.support.media_files import pdf
from tests.support.viewer_server import Background

REPO = Path(__file__).resolve().parents[2]
TRICKY = '"><b onclick=x>.png'


def charts_run(tmp_path: Path) -> Path:
    """The shipped charts with a wrong scripted answer (every sample fails, so the report
    lists them all), the first chart also showing a 3-page PDF."""
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    data = tmp_path / "specs" / "data"
    (data / "form.pdf").write_bytes(pdf(3))
    shutil.copy(data / "charts" / "chart-2.png", data / "charts" / TRICKY)
    rows = [json.loads(line) for line in (data / "charts.jsonl").read_text().splitlines()]
    rows[0]["image"] = [rows[0]["image"], "form.pdf"]
    rows[1]["image"] = f"charts/{TRICKY}"
    (data / "charts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp_path / "specs" / "charts.yaml"
    spec.write_text(spec.read_text().replace("answer_field: oracle", "text: 'Bar 9.'"))
    done = run_cli("run", "specs/charts.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run_dir,) = (tmp_path / "results").glob("charts-*")
    return run_dir


def thumbnails(html: str) -> list[str]:
    return re.findall(r'<img src="(data:image/png;base64,[A-Za-z0-9+/=]+)"', html)


def test_the_report_and_the_viewer_show_thumbnails_and_documents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = charts_run(tmp_path)
    # The manifest names the spec as the run was given it (relative): the viewer, as
    # the command would be, starts in the folder the run was made in.
    monkeypatch.chdir(tmp_path)
    shipped = tmp_path / "specs" / "data" / "charts"
    report = run_cli("report", str(run_dir), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    html = (run_dir / "report.html").read_text()
    assert "img-src data:" in html and 'src="http' not in html  # nothing remote
    shown = thumbnails(html)
    assert len(shown) == 5
    first = base64.b64decode(shown[0].split(",", 1)[1])
    assert first == (shipped / "chart-1.png").read_bytes()
    assert "form.pdf · application/pdf · 3 pages" in html
    assert "<b onclick=x>" not in html and "&lt;b onclick=x&gt;.png" in html

    # Edited since the run: no thumbnail, named by its hash.
    (shipped / "chart-3.png").write_bytes(b"\x89PNG\r\n\x1a\nchanged")
    with Background(tmp_path / "results") as url:
        page = HTTP.get(f"{url}/run/{run_dir.name}/sample/chart-1", timeout=30)
        assert page.status_code == 200
        assert "img-src 'self' data:" in page.headers["content-security-policy"]
        assert len(thumbnails(page.text)) == 1
        assert "form.pdf · application/pdf · 3 pages" in page.text
        edited = HTTP.get(f"{url}/run/{run_dir.name}/sample/chart-3", timeout=30).text
        assert thumbnails(edited) == [] and "sha256 " in edited
