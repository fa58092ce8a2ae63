"""The viewer against hostile data and addresses (step 12, item 7): the Host check, a
damaged results file, the preview cap, and bidirectional controls shown as escapes."""

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.support.viewer_runs import ViewerRuns, make_runs
from tests.support.viewer_server import Background


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> ViewerRuns:
    return make_runs(tmp_path_factory.mktemp("viewer"))


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
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200, page.text
        port = url.rstrip("/").rsplit(":", 1)[1]
        # Any other name for the machine is refused (DNS rebinding), the port kept.
        for other in ("attacker.example", f"attacker.example:{port}", "127.0.0.3", "[::2]"):
            refused = httpx.get(url, headers={"host": other}, timeout=30)
            assert refused.status_code == 400, other
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_host_check_accepts_exactly_the_listening_address(runs: ViewerRuns) -> None:
    with Background(runs.root, host="127.0.0.2") as url:
        port = url.rsplit(":", 1)[1]
        assert httpx.get(url + "/", timeout=30).status_code == 200
        for other in (f"127.0.0.1:{port}", f"localhost:{port}", "127.0.0.2.evil", ""):
            assert httpx.get(url + "/", headers={"host": other}, timeout=30).status_code == 400
