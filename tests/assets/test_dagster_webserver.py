"""The real `dagster dev` on 127.0.0.1: the code location loads and shows the graph."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradetrail_lib.spec.identity import scorer_hash
from gradetrail_lib.spec.spec import load_spec
from tests.conftest import REPO, write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer

# Two webservers, each about 20 s to load its code location; the same graph is built in
# process by tests/assets/test_dagster_graph.py, which `-m "not slow"` keeps.
pytestmark = pytest.mark.slow

LOCATION_QUERY = """
{ workspaceOrError { __typename ... on Workspace { locationEntries {
    name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } } } } }
"""

GRAPH_QUERY = """
{ assetNodes { assetKey { path } groupName isPartitioned opVersion
    assetChecksOrError { ... on AssetChecks { checks { name } } } }
  repositoriesOrError { ... on RepositoryConnection { nodes {
    name schedules { name cronSchedule } sensors { name } } } } }
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def graphql(port: int, query: str) -> dict[str, Any]:
    response = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": query}, timeout=10)
    response.raise_for_status()
    return dict(response.json()["data"])


def wait_loaded(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "dagster dev exited early"
        try:
            entries = graphql(port, LOCATION_QUERY)["workspaceOrError"]["locationEntries"]
        except (httpx.HTTPError, KeyError, TypeError):
            time.sleep(0.5)
            continue
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            errors = [e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"]
            assert not errors, errors
            return
        time.sleep(0.5)
    raise AssertionError("code location did not load in time")


@pytest.mark.parametrize("command", ["dagster dev -w workspace.yaml", "dg dev"])
def test_dagster_dev_serves_the_graph_schedule_and_sensors(
    tmp_path: Path, fake_server: FakeLLMServer, command: str
) -> None:
    """The same graph, schedule and sensors from `workspace.yaml` and from the repository's
    dg project (its defs folder's Component), each served for real."""
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", 4)
    # A judge beside the primary scorer: its prompt file is read by the served location.
    (specs / "judge.j2").write_text("Is {{ response }} right? GRADE: C or GRADE: I\n")
    judge = "{provider: scripted, name: grader, text: 'GRADE: C'}"
    spec = write_spec(specs / "add.yaml", base_url=f"{fake_server.base_url}/v1")
    spec.write_text(
        spec.read_text().replace(
            "scorer: {type: numeric}",
            "scorers:\n  - {name: num, type: numeric}\n"
            f"  - {{name: j, type: judge, prompt_file: judge.j2, model: {judge}}}",
        )
    )
    loaded = load_spec(spec)
    home = tmp_path / "dagster_home"
    home.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "GRADETRAIL_SPECS": str(specs),
        "GRADETRAIL_CACHE": str(tmp_path / "db.duckdb"),
        "DAGSTER_DISABLE_TELEMETRY": "yes",
        "DAGSTER_DG_UPDATE_CHECK_ENABLED": "0",
    }
    if command == "dg dev":  # run in the project, as its docs say; dg finds its tools on PATH
        argv = [str(Path(sys.executable).with_name("dg")), "dev", "--host", "127.0.0.1",
                "--port", str(port)]  # fmt: skip
        cwd = REPO
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    else:
        argv = [str(Path(sys.executable).with_name("dagster")), "dev", "-w",
                str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)]  # fmt: skip
        cwd = tmp_path
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_loaded(port, proc)
        data = graphql(port, GRAPH_QUERY)
        nodes = {"/".join(n["assetKey"]["path"]): n for n in data["assetNodes"]}
        for step in ("dataset", "responses", "scores"):
            assert nodes[f"add/{step}"]["groupName"] == "add"
            assert nodes[f"add/{step}"]["isPartitioned"]
        scores = nodes["add/scores"]
        assert scores["opVersion"] == scorer_hash(loaded)  # every scorer, judge file included
        assert {c["name"] for c in scores["assetChecksOrError"]["checks"]} == {
            "provider_error_rate", "truncation_rate", "judge_error_rate",
            "served_model_matches", "dataset_hash_matches", "judge_agreement",
        }  # fmt: skip
        (repo,) = data["repositoriesOrError"]["nodes"]
        assert {s["name"] for s in repo["schedules"]} == {"add__nightly"}
        assert {s["name"] for s in repo["sensors"]} >= {
            "gradetrail_model_releases", "gradetrail_spec_models", "gradetrail_automation",
        }  # fmt: skip
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError("dagster dev did not shut down on SIGINT") from None
