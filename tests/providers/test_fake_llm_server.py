"""Quick tests of the fake LLM provider server used by the e2e tests and benchmarks."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_llm_server import FakeLLMServer, Fault, default_responder
from tests.support.http_client import HTTP

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def _chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-fake", "messages": [{"role": "user", "content": content}], **extra}


def test_default_responder() -> None:
    body = _chat("Solve it.\nQ: 2 + 40\nA:")
    assert default_responder(body) == "Answer: 42"
    assert default_responder(_chat("Q: -3 + 5")) == "Answer: 2"
    assert default_responder(_chat("hello there")) == "Echo: hello there"
    blocks = {"messages": [{"role": "user", "content": [{"type": "text", "text": "Q: 1 + 1"}]}]}
    assert default_responder(blocks) == "Answer: 2"


def test_openai_chat_shape_and_accounting(srv: FakeLLMServer) -> None:
    body = {
        "model": "gpt-fake",
        "messages": [
            {"role": "system", "content": "You add numbers."},
            {"role": "user", "content": "Q: 2 + 3"},
        ],
    }
    r = HTTP.post(
        f"{srv.base_url}/v1/chat/completions",
        json=body,
        headers={"authorization": "Bearer sk-test-123"},
    )
    assert r.status_code == 200
    data = r.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "gpt-fake"
    assert isinstance(data["id"], str)
    (choice,) = data["choices"]
    assert choice["index"] == 0
    assert choice["message"] == {"role": "assistant", "content": "Answer: 5"}
    assert choice["finish_reason"] == "stop"
    # prompt words: "You add numbers." (3) + "Q: 2 + 3" (4); answer words: 2
    assert data["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}

    assert srv.calls == 1
    assert srv.calls_by_path == {"/v1/chat/completions": 1}
    (req,) = srv.requests
    assert req["body"] == body
    assert req["has_authorization"] is True
    assert req["has_x_api_key"] is False
    assert req["headers"]["authorization"] == "<redacted>"
    assert "sk-test-123" not in repr(req)
    assert srv.key_was_sent("sk-test-123")
    assert not srv.key_was_sent("sk-other")

    srv.served_model = "served-x"
    r = HTTP.post(f"{srv.base_url}/v1/chat/completions", json=_chat("hi"))
    assert r.json()["model"] == "served-x"
    assert srv.requests[-1]["has_authorization"] is False

    srv.reset_counts()
    assert (srv.calls, srv.calls_by_path, srv.requests) == (0, {}, [])


def test_anthropic_messages_shape(srv: FakeLLMServer) -> None:
    body = {
        "model": "claude-fake",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Q: 10 + 20"}]}],
    }
    r = HTTP.post(
        f"{srv.base_url}/v1/messages",
        json=body,
        headers={"x-api-key": "ak-test", "anthropic-version": "2023-06-01"},
    )
    assert r.status_code == 200
    data = r.json()
    assert data["type"] == "message"
    assert data["role"] == "assistant"
    assert data["model"] == "claude-fake"
    assert data["content"] == [{"type": "text", "text": "Answer: 30"}]
    assert data["stop_reason"] == "end_turn"
    assert data["usage"] == {"input_tokens": 6, "output_tokens": 2}
    req = srv.requests[-1]
    assert req["has_x_api_key"] is True and req["headers"]["x-api-key"] == "<redacted>"
    assert srv.key_was_sent("ak-test")
    assert srv.calls == 1 and srv.calls_by_path == {"/v1/messages": 1}


def test_truncation_to_max_tokens(srv: FakeLLMServer) -> None:
    text = "one two three four five"
    r = HTTP.post(f"{srv.base_url}/v1/chat/completions", json=_chat(text, max_tokens=3))
    data = r.json()
    assert data["choices"][0]["message"]["content"] == "Echo: one two"
    assert data["choices"][0]["finish_reason"] == "length"
    assert data["usage"]["completion_tokens"] == 3

    r = HTTP.post(
        f"{srv.base_url}/v1/messages",
        json={"model": "c", "max_tokens": 2, "messages": [{"role": "user", "content": text}]},
    )
    data = r.json()
    assert data["content"][0]["text"] == "Echo: one"
    assert data["stop_reason"] == "max_tokens"
    assert data["usage"]["output_tokens"] == 2

    r = HTTP.post(f"{srv.base_url}/v1/chat/completions", json=_chat("Q: 1 + 2", max_tokens=2))
    assert r.json()["choices"][0]["finish_reason"] == "stop"


def test_models_listing(srv: FakeLLMServer) -> None:
    srv.models = ["m-a", "m-b"]
    data = HTTP.get(f"{srv.base_url}/v1/models").json()
    assert data == {
        "object": "list",
        "data": [
            {"id": "m-a", "object": "model", "created": 0, "owned_by": "fake"},
            {"id": "m-b", "object": "model", "created": 0, "owned_by": "fake"},
        ],
    }
    data = HTTP.get(f"{srv.base_url}/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert [m["id"] for m in data["data"]] == ["m-a", "m-b"]
    assert data["data"][0]["type"] == "model"
    assert data["data"][0]["created_at"] == "2026-01-01T00:00:00Z"
    assert "display_name" in data["data"][0]
    assert (data["has_more"], data["first_id"], data["last_id"]) == (False, "m-a", "m-b")
    assert srv.calls == 0  # listing models is not a completion call
    assert srv.calls_by_path == {"/v1/models": 2}


def test_fault_script_then_success(srv: FakeLLMServer) -> None:
    srv.script = [
        Fault(429, headers={"retry-after": "1"}),
        Fault(500),
        Fault(401, message="bad key"),
    ]
    url = f"{srv.base_url}/v1/chat/completions"
    with httpx.Client() as client:
        r1 = client.post(url, json=_chat("Q: 1 + 1"))
        assert r1.status_code == 429
        assert r1.headers["retry-after"] == "1"
        assert r1.json()["error"]["type"] == "rate_limit_exceeded"
        assert isinstance(r1.json()["error"]["message"], str)
        r2 = client.post(url, json=_chat("Q: 1 + 1"))
        assert r2.status_code == 500 and "error" in r2.json()
        r3 = client.post(url, json=_chat("Q: 1 + 1"))
        assert r3.status_code == 401 and r3.json()["error"]["message"] == "bad key"
        r4 = client.post(url, json=_chat("Q: 1 + 1"))
        assert r4.status_code == 200
        assert r4.json()["choices"][0]["message"]["content"] == "Answer: 2"
    assert srv.calls == 4
    assert [r["status"] for r in srv.requests] == [429, 500, 401, 200]
    assert srv.script == []

    srv.script = [Fault(529)]
    r = HTTP.post(f"{srv.base_url}/v1/messages", json=_chat("x"))
    assert r.status_code == 529
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "overloaded_error"


def test_fail_always_and_raw_body(srv: FakeLLMServer) -> None:
    srv.fail_always = Fault(503, body="upstream down")
    for _ in range(3):
        r = HTTP.post(f"{srv.base_url}/v1/chat/completions", json=_chat("x"))
        assert r.status_code == 503 and r.text == "upstream down"
    srv.fail_always = None
    r = HTTP.post(f"{srv.base_url}/v1/chat/completions", json=_chat("x"))
    assert r.status_code == 200
    assert srv.calls == 4


def test_fault_close_resets_connection(srv: FakeLLMServer) -> None:
    srv.script = [Fault(0, close=True)]
    url = f"{srv.base_url}/v1/chat/completions"
    with httpx.Client() as client:
        with pytest.raises(httpx.TransportError):
            client.post(url, json=_chat("x"))
        assert client.post(url, json=_chat("x")).status_code == 200
    assert srv.calls == 2
    assert srv.requests[0]["status"] is None


def test_fault_delay_triggers_client_timeout(srv: FakeLLMServer) -> None:
    srv.script = [Fault(200, delay_s=2.0)]
    start = time.perf_counter()
    with pytest.raises(httpx.ReadTimeout):
        HTTP.post(f"{srv.base_url}/v1/chat/completions", json=_chat("x"), timeout=0.2)
    assert time.perf_counter() - start < 1.5
    r = HTTP.post(f"{srv.base_url}/v1/chat/completions", json=_chat("x"))
    assert r.status_code == 200


def test_custom_responder_and_bad_requests() -> None:
    seen: list[dict[str, Any]] = []

    def responder(body: dict[str, Any]) -> str:
        seen.append(body)
        return "custom " * 4

    with FakeLLMServer(responder=responder) as srv:
        r = HTTP.post(f"{srv.base_url}/v1/messages", json=_chat("x"))
        assert r.json()["content"][0]["text"] == "custom custom custom custom "
        assert len(seen) == 1

        r = HTTP.post(
            f"{srv.base_url}/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        assert HTTP.get(f"{srv.base_url}/nope").status_code == 404
        assert HTTP.get(f"{srv.base_url}/v1/chat/completions").status_code == 405
        assert srv.calls == 2  # the good and the invalid-JSON completion call


def _raw_request(body: bytes, extra: str = "") -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\n{extra}"
    ).encode() + body


def _read_response(sock: socket.socket, buf: bytearray) -> tuple[bytes, dict[str, str], bytes]:
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, "server closed the connection early"
        buf += chunk
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    length = int(headers["content-length"])
    while len(rest) < length:
        rest += sock.recv(65536)
    buf[:] = rest[length:]
    return lines[0].encode(), headers, rest[:length]


def test_raw_keep_alive_chunked_and_connection_close(srv: FakeLLMServer) -> None:
    body = json.dumps(_chat("Q: 4 + 5")).encode()
    buf = bytearray()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as sock:
        # Two requests on one connection, the second one chunked.
        sock.sendall(_raw_request(body, f"Content-Length: {len(body)}\r\n\r\n"))
        status, headers, payload = _read_response(sock, buf)
        assert status.startswith(b"HTTP/1.1 200") and headers["connection"] == "keep-alive"
        assert json.loads(payload)["choices"][0]["message"]["content"] == "Answer: 9"
        chunked = f"{len(body[:10]):x}\r\n".encode() + body[:10] + b"\r\n"
        chunked += f"{len(body[10:]):x}\r\n".encode() + body[10:] + b"\r\n0\r\n\r\n"
        sock.sendall(_raw_request(chunked, "Transfer-Encoding: chunked\r\n\r\n"))
        status, _, payload = _read_response(sock, buf)
        assert json.loads(payload)["choices"][0]["message"]["content"] == "Answer: 9"
        # Connection: close is honoured.
        extra = f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        sock.sendall(_raw_request(body, extra))
        status, headers, _ = _read_response(sock, buf)
        assert headers["connection"] == "close"
        assert sock.recv(100) == b""
    assert srv.calls == 3


def test_concurrency_is_real() -> None:
    n, latency = 50, 0.2

    async def run(base_url: str) -> float:
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        async with httpx.AsyncClient(base_url=base_url, limits=limits) as client:
            start = time.perf_counter()
            rs = await asyncio.gather(
                *(client.post("/v1/chat/completions", json=_chat(f"Q: {i} + 1")) for i in range(n))
            )
            wall = time.perf_counter() - start
        for i, r in enumerate(rs):
            assert r.json()["choices"][0]["message"]["content"] == f"Answer: {i + 1}"
        return wall

    with FakeLLMServer(latency_s=latency) as srv:
        wall = asyncio.run(run(srv.base_url))
        assert srv.calls == n
        assert srv.max_inflight == n
    assert wall < 2.0, f"{n} requests at {latency}s took {wall:.2f}s (serial: {n * latency}s)"


def test_main_entry_in_subprocess(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.fake_llm_server", "--port", "0"]
        + ["--latency", "0.01", "--port-file", str(port_file)],
        cwd=REPO_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 10
        while not port_file.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            assert time.monotonic() < deadline, "server did not write its port file"
            time.sleep(0.02)
        base = f"http://127.0.0.1:{int(port_file.read_text())}"
        with httpx.Client(base_url=base) as client:
            assert client.post("/v1/chat/completions", json=_chat("Q: 1 + 2")).status_code == 200
            assert client.post("/v1/messages", json=_chat("hi")).status_code == 200
            stats = client.get("/_stats").json()
            assert stats["calls"] == 2
            assert stats["calls_by_path"] == {"/v1/chat/completions": 1, "/v1/messages": 1}
            cfg = {"script": [{"status": 429, "headers": {"retry-after": "1"}}]}
            assert client.post("/_config", json=cfg).status_code == 200
            r = client.post("/v1/chat/completions", json=_chat("x"))
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert client.post("/_reset").status_code == 200
            assert client.get("/_stats").json()["calls"] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert os.path.exists(port_file)
