"""The Ray backend on a real local cluster (one for the whole module) and a loopback server.

Starting a cluster costs seconds here, so every test that needs one shares the module
fixture; RayBackend reuses a connection the process already has and leaves it open. The
CLI test passes the cluster's address to its subprocess (RAY_ADDRESS, with the token in
the inherited environment), which also exercises connecting to an existing cluster; one
test starts a CLI with no cluster and no Ray settings at all, as on a fresh clone.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import dagster as dg
import pytest

from gradetrail_assets.build import build_definitions
from gradetrail_assets.resources import GradetrailResource
from gradetrail_lib import load_run
from gradetrail_lib.backends.local import LocalBackend
from gradetrail_lib.backends.ray_backend import (
    AUTH_MODE_ENV,
    AUTH_TOKEN_ENV,
    SINGLE_MACHINE_ENV,
    RayBackend,
    start_local_cluster,
)
from gradetrail_lib.errors import RunAborted
from gradetrail_lib.providers.base import ModelRequest, ModelResponse, ProviderError
from gradetrail_lib.providers.policy import RetryPolicy
from tests.conftest import run_cli, run_cli_process, write_addition_dataset, write_spec
from tests.support.fake_llm_server import FakeLLMServer, Fault
from tests.support.proc_sockets import processes_named, tree_sockets
from tests.support.ray_workers import worker_handles
from tests.support.requests import addition_requests

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # local Ray clusters

FAST = RetryPolicy(base_delay_s=0.001, max_delay_s=0.002, timeout_s=10.0)
RAY_ENV = (SINGLE_MACHINE_ENV, AUTH_MODE_ENV, AUTH_TOKEN_ENV)

Outcomes = list[tuple[ModelRequest, ModelResponse | ProviderError]]


@pytest.fixture(scope="module")
def cluster() -> Iterator[ModuleType]:
    saved = {name: os.environ.get(name) for name in RAY_ENV}
    ray = start_local_cluster(num_cpus=2)
    try:
        yield ray
    finally:
        ray.shutdown()
        # The token and the single-machine flag were set for this cluster only.
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def module_srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def srv(module_srv: FakeLLMServer) -> FakeLLMServer:
    module_srv.reset_counts()
    module_srv.latency_s = 0.0
    module_srv.script = []
    module_srv.fail_always = None
    return module_srv


def run(backend: RayBackend | LocalBackend, requests: list[ModelRequest]) -> Outcomes:
    outcomes: Outcomes = []
    backend.run(requests, lambda req, outcome: outcomes.append((req, outcome)))
    return outcomes


def by_key(outcomes: Outcomes) -> dict[str, tuple[Any, ...]]:
    table: dict[str, tuple[Any, ...]] = {}
    for request, outcome in outcomes:
        assert isinstance(outcome, ModelResponse), outcome
        assert request.key not in table, f"{request.key} answered twice"
        table[request.key] = (
            outcome.text,
            outcome.stop_reason,
            outcome.input_tokens,
            outcome.output_tokens,
        )
    return table


def wait_dead(cluster: ModuleType, handle: Any, timeout_s: float = 30.0) -> None:
    """Return once the actor is dead: ray.kill only asks for it to end."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            cluster.get(handle.ready.remote(), timeout=timeout_s)
        except cluster.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"actor {handle} still alive after {timeout_s}s")


def assert_dead(cluster: ModuleType, handles: list[Any]) -> None:
    assert handles
    for handle in handles:
        wait_dead(cluster, handle)


def test_same_results_as_local_backend_bounded_window_on_loopback(
    cluster: ModuleType, srv: FakeLLMServer
) -> None:
    srv.latency_s = 0.02
    requests = addition_requests(f"{srv.base_url}/v1", 60)
    local = by_key(run(LocalBackend(concurrency=8, policy=FAST), requests))
    assert srv.calls == 60

    srv.reset_counts()
    backend = RayBackend(workers=2, concurrency=4, policy=FAST)
    outcomes: Outcomes = []
    seen: dict[str, Any] = {}

    def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
        outcomes.append((request, outcome))
        if not seen:  # mid-run, with requests in flight: who talks to whom
            seen["handles"] = worker_handles(backend)
            seen["sockets"] = tree_sockets()

    backend.run(requests, on_result)
    assert by_key(outcomes) == local
    assert sorted(by_key(outcomes)) == sorted(r.key for r in requests)
    assert srv.calls == 60
    assert srv.max_inflight <= 8  # W x C
    stats = backend.last_run
    assert not stats.started_cluster  # the module's cluster was reused
    # Bounded window: C plus a small queue per actor, never the whole list.
    assert 8 <= stats.max_in_flight <= 2 * (4 + 2)
    assert (stats.worker_deaths, stats.resubmitted) == (0, 0)
    assert worker_handles(backend) == []
    assert_dead(cluster, seen["handles"])  # the run's actors end with it
    assert cluster.is_initialized()  # and the connection it found stays open

    sockets = seen["sockets"]
    # The driver's own GCS connection, the raylet and the worker actors at least.
    assert {"raylet", "gcs_server"} <= {s.process for s in sockets}, sockets
    assert sum(s.process == "ray::_Worker" for s in sockets) >= 2, sockets
    beyond = [s for s in sockets if s.beyond_loopback()]
    assert beyond == [], f"Ray sockets beyond loopback: {beyond}"


def test_killed_worker_requests_are_sent_again_exactly_once(
    cluster: ModuleType, srv: FakeLLMServer
) -> None:
    srv.latency_s = 0.2
    n = 80
    requests = addition_requests(f"{srv.base_url}/v1", n, tag="k")
    backend = RayBackend(workers=2, concurrency=8, policy=FAST)
    outcomes: Outcomes = []
    killed: list[Any] = []

    def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
        outcomes.append((request, outcome))
        if len(outcomes) == 5:  # mid-run: both actors hold requests
            killed.append(worker_handles(backend)[0])
            cluster.kill(killed[0])
            # Until it is dead no new call goes out: the driver learns of the death
            # from calls failing, those it held and those it is sent from now on.
            wait_dead(cluster, killed[0])

    backend.run(requests, on_result)
    table = by_key(outcomes)  # every outcome a response, none twice
    assert sorted(table) == sorted(r.key for r in requests)
    for request, outcome in outcomes:
        assert isinstance(outcome, ModelResponse)
        assert outcome.text == f"Answer: {int(request.key[1:], 16) + 1000}"
    stats = backend.last_run
    assert stats.worker_deaths == 1
    assert stats.resubmitted >= 1
    # The killed actor's requests were sent again; those it had already sent to the
    # server (not those queued at it or sent to it after its death) were paid twice.
    assert 0 <= srv.calls - n <= stats.resubmitted


def test_identical_fatal_errors_abort_through_ray(cluster: ModuleType, srv: FakeLLMServer) -> None:
    srv.fail_always = Fault(status=401)
    backend = RayBackend(workers=2, concurrency=2, policy=FAST)
    outcomes: Outcomes = []
    handles: list[Any] = []

    def on_result(request: ModelRequest, outcome: ModelResponse | ProviderError) -> None:
        handles.extend(h for h in worker_handles(backend) if h not in handles)
        outcomes.append((request, outcome))

    with pytest.raises(RunAborted, match="3 identical errors in a row: HTTP 401"):
        backend.run(addition_requests(f"{srv.base_url}/v1", 200, tag="a"), on_result)
    # Outstanding work was stopped before run() returned: nothing is sent afterwards
    # (ray.kill alone let queued calls go out after the driver heard of the deaths).
    calls = srv.calls
    time.sleep(0.5)
    assert srv.calls == calls
    # At most the window (W x (C + 2)) besides the three that decided it.
    assert 3 <= srv.calls <= 2 * (2 + 2) + 3
    assert 3 <= len(outcomes) <= srv.calls
    for _, outcome in outcomes:
        assert isinstance(outcome, ProviderError)  # unpickled in the driver intact
        assert (outcome.kind, outcome.status) == ("fatal", 401)
    assert_dead(cluster, handles)  # outstanding work cancelled


def test_limited_and_describe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    backend = RayBackend(workers=4, concurrency=16)
    assert backend.describe() == {
        "backend": "ray",
        "workers": 4,
        "concurrency": 16,
        "address": "local",
    }
    assert backend.limited(64) is backend
    one = backend.limited(1)
    assert (one.workers, one.concurrency, one.policy) == (1, 1, backend.policy)
    six = backend.limited(6)
    assert six.workers * six.concurrency <= 6
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert RayBackend().describe()["address"] == "127.0.0.1:6379"
    assert RayBackend(address="10.0.0.5:6379").describe()["address"] == "10.0.0.5:6379"
    with pytest.raises(ValueError):
        RayBackend(workers=0)


def _rows(results: Path) -> dict[str, dict[str, Any]]:
    """What must not depend on the backend, per sample."""
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    rows = {}
    for r in load_run(run_dir):
        assert r.target is not None
        rows[r.id] = {
            "request_key": r.target.request_key,
            "response": r.response,
            "stop_reason": r.stop_reason,
            "usage": (r.target.input_tokens, r.target.output_tokens),
            "score": r.score_of("score"),
            "outcome": r.outcome,
            "cache_hit": r.target.cache_hit,
        }
    return rows


def _manifest(results: Path) -> dict[str, Any]:
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return dict(json.loads((run_dir / "manifest.json").read_text()))


def test_cli_ray_run_caches_everything_and_matches_local(
    cluster: ModuleType, srv: FakeLLMServer, tmp_path: Path
) -> None:
    n = 40
    write_addition_dataset(tmp_path / "data" / "add.jsonl", n)
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{srv.base_url}/v1")
    address = cluster.get_runtime_context().gcs_address
    cache = ["--cache", str(tmp_path / "c.duckdb")]

    # A process of its own: the command starts Ray's driver, which this one must not host.
    ray_run = run_cli_process(
        "run",
        str(spec),
        *cache,
        "--backend",
        "ray",
        "--workers",
        "2",
        "--concurrency",
        "4",
        "--results",
        str(tmp_path / "ray"),
        cwd=tmp_path,
        env={"RAY_ADDRESS": address},
    )
    assert ray_run.returncode == 0, ray_run.stderr
    assert srv.calls == n
    manifest = _manifest(tmp_path / "ray")
    assert manifest["execution"] == {
        "backend": "ray",
        "workers": 2,
        "concurrency": 4,
        "address": address,
    }
    assert manifest["target"]["calls"] == n

    # Every response was cached by the driver: a local re-run calls nothing.
    warm = run_cli("run", str(spec), *cache, "--results", str(tmp_path / "warm"), cwd=tmp_path)
    assert warm.returncode == 0, warm.stderr
    assert srv.calls == n
    assert f"Cache hits: {n}/{n}" in warm.stdout

    # A cold local run (its own cache) gets the same responses and the same scores.
    local = run_cli(
        "run",
        str(spec),
        "--cache",
        str(tmp_path / "local.duckdb"),
        "--results",
        str(tmp_path / "local"),
        cwd=tmp_path,
        env={"GRADETRAIL_BACKEND": "local"},
    )
    assert local.returncode == 0, local.stderr
    assert srv.calls == 2 * n
    ray_rows, local_rows = _rows(tmp_path / "ray"), _rows(tmp_path / "local")
    assert sorted(ray_rows) == sorted(local_rows) and len(ray_rows) == n
    fields = ("request_key", "response", "stop_reason", "usage", "score", "outcome")
    for sample_id, row in ray_rows.items():
        assert {f: row[f] for f in fields} == {f: local_rows[sample_id][f] for f in fields}
    assert {r["score"] for r in ray_rows.values()} == {0.0, 1.0}
    warm_rows = _rows(tmp_path / "warm")
    for sample_id, row in ray_rows.items():
        assert {f: row[f] for f in fields} == {f: warm_rows[sample_id][f] for f in fields}
        assert warm_rows[sample_id]["cache_hit"] is True


def test_cli_ray_starts_and_stops_its_own_cluster(
    cluster: ModuleType, srv: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on a fresh clone: no address, no token, no single-machine flag to inherit.
    for name in (*RAY_ENV, "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    write_addition_dataset(tmp_path / "data" / "add.jsonl", 8)
    # Two models: both are sent from one cluster, started once for the whole command.
    spec = write_spec(tmp_path / "add.yaml", base_url=f"{srv.base_url}/v1")
    second = f'  - {{provider: openai_compatible, name: fake-2, base_url: "{srv.base_url}/v1"}}\n'
    text = spec.read_text()
    spec.write_text(text.replace("params:", second + "params:"))

    # Ours only: other processes on the machine may start Ray clusters meanwhile, and
    # the raylets of the command's cluster inherit its environment.
    marker = f"GT_RAY_TEST={os.getpid()}-{time.monotonic_ns()}".encode()

    def raylets() -> set[int]:
        ours = set()
        for pid in processes_named("raylet"):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environ:
                ours.add(pid)
        return ours

    before = raylets()
    seen: set[int] = set()
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            seen.update(raylets() - before)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    token_file = Path.home() / ".ray" / "auth_token"
    had_token_file = token_file.exists()
    try:
        done = run_cli_process(  # its own process: the raylets it starts are watched
            "run", str(spec), "--cache", str(tmp_path / "c.duckdb"), "--backend", "ray",
            cwd=tmp_path, env=dict([marker.decode().split("=", 1)]),
        )  # fmt: skip
    finally:
        watching.set()
        watcher.join()
    assert done.returncode == 0, done.stderr
    assert srv.calls == 16
    assert done.stdout.count("Samples: 8 (scored=8") == 2
    assert len(seen) == 1, f"one cluster for both models, saw raylets {sorted(seen)}"
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "results").glob("*/manifest.json")]
    assert sorted(m["model"]["requested"] for m in manifests) == ["fake-1", "fake-2"]
    assert {m["execution"]["address"] for m in manifests} == {"local"}
    deadline = time.monotonic() + 10
    while raylets() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert raylets() - before == set(), "the CLI's cluster outlived it"
    # Token auth was on with a token kept in memory: Ray's default would have written one.
    assert token_file.exists() == had_token_file


def test_dagster_responses_asset_runs_on_ray_by_resource_config(
    cluster: ModuleType, srv: FakeLLMServer, tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    """The resource selects the backend; the asset connects to the running head."""
    n = 12
    specs = tmp_path / "specs"
    specs.mkdir()
    write_addition_dataset(specs / "data" / "add.jsonl", n)
    write_spec(specs / "add.yaml", base_url=f"{srv.base_url}/v1")
    address = cluster.get_runtime_context().gcs_address
    settings = GradetrailResource(
        database=str(tmp_path / "db.duckdb"),
        results_dir=str(tmp_path / "results"),
        backend="ray",
        workers=2,
        concurrency="3",
        ray_address=address,
    )
    defs = build_definitions(specs, settings)
    instance.add_dynamic_partitions("add__models", ["fake-1"])
    result = defs.resolve_job_def("add__eval").execute_in_process(
        instance=instance,
        partition_key="fake-1",
        asset_selection=[dg.AssetKey(["add", s]) for s in ("dataset", "responses", "scores")],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "storage"))},
    )
    assert result.success
    assert srv.calls == n
    (event,) = result.asset_materializations_for_node("add__responses")
    assert event.metadata["execution"].value == {
        "backend": "ray", "workers": 2, "concurrency": 3, "address": address,
    }  # fmt: skip
    assert event.metadata["provider_calls"].value == n
    assert cluster.is_initialized(), "connecting to a running head must leave it running"
