"""The batch APIs of the fake LLM server (`fake_llm_server.FakeLLMServer.batches`).

OpenAI (and Azure OpenAI under ``/openai/...?api-version=``):

* ``POST /v1/files`` (multipart, ``purpose=batch``) -> ``{"id": "file-N", ...}``
* ``POST /v1/batches`` -> a batch object (``status``, ``request_counts``, ``metadata``,
  ``output_file_id``, ``error_file_id``); ``GET /v1/batches[/{id}]``;
  ``POST /v1/batches/{id}/cancel``; ``GET /v1/files/{id}/content``.

Anthropic:

* ``POST /v1/messages/batches`` -> a message batch (``processing_status``,
  ``request_counts``, ``results_url``); ``GET /v1/messages/batches[/{id}]``;
  ``POST /v1/messages/batches/{id}/cancel``; ``GET /v1/messages/batches/{id}/results``.

Each request is answered as the synchronous endpoint would answer it (the server's
responder, `_completion_reply`). Knobs (change them between batches):

* ``delay_s``: a batch processes for this long after it is created;
* ``delays``: a list consumed one per new batch: that batch's ``delay_s`` instead (the
  batches after the list's end take ``delay_s``);
* ``error_for(body) -> str | None``: a request's error message (the request fails alone);
* ``expire_after``: a list consumed one per new batch: that batch expires after running
  only its first N requests (None in the list: it does not);
* ``hold_create_s``: the create call answers this much later (the batch already exists:
  a client killed meanwhile never learns its id);
* ``results_delay_s``: the results are served this much later;
* ``max_requests``: a batch with more requests is refused (400);
* ``status_errors``: the next this many status reads answer 503;
* ``results_errors``: the next this many results downloads answer 503.

Accounting: ``submitted`` (every custom_id ever submitted, in order), ``batches`` (by id),
``results_started`` (results requests received) and ``results_reads`` (served).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.fake_llm_server import FakeLLMServer, _Reply


@dataclass
class FakeBatch:
    id: str
    api: str  # "openai" (also Azure) or "anthropic"
    lines: list[dict[str, Any]]
    created: float
    ends: float
    metadata: dict[str, str] = field(default_factory=dict)
    # An OpenAI batch's endpoint: its lines' `url` (Chat Completions or Responses).
    endpoint: str = "/v1/chat/completions"
    # How many requests run before it expires (None: all).
    expire_after: int | None = None
    cancelled_at: float | None = None
    # custom_id -> ("ok", body) | ("error", message) | ("not_run", reason)
    results: dict[str, tuple[str, Any]] | None = None

    def ended(self, now: float) -> bool:
        return self.cancelled_at is not None or now >= self.ends

    def done_count(self, now: float) -> int:
        if self.results is not None:
            return sum(1 for kind, _ in self.results.values() if kind == "ok")
        span = max(self.ends - self.created, 1e-9)
        return min(len(self.lines), int(len(self.lines) * (now - self.created) / span))


# The endpoints an OpenAI batch may name (Azure's without `/v1`).
_ENDPOINTS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/responses"})


class FakeBatches:
    def __init__(self, server: FakeLLMServer) -> None:
        self.server = server
        self.delay_s = 0.0
        self.delays: list[float] = []
        self.error_for: Callable[[dict[str, Any]], str | None] | None = None
        self.expire_after: list[int | None] = []
        self.hold_create_s = 0.0
        self.results_delay_s = 0.0
        self.max_requests: int | None = None
        self.status_errors = 0
        self.results_errors = 0
        self.submitted: list[str] = []
        self.batches: dict[str, FakeBatch] = {}
        self.results_reads = 0
        # Results requests received (counted before `results_delay_s`).
        self.results_started = 0
        self._files: dict[str, bytes] = {}
        self._seq = 0
        self._lock = threading.Lock()

    # -------------------------------------------------------------- routing

    @staticmethod
    def handles(path: str) -> bool:
        return path.startswith(
            ("/v1/files", "/v1/batches", "/v1/messages/batches")
        ) or path.startswith(("/openai/files", "/openai/batches"))

    async def dispatch(
        self, method: str, path: str, headers: dict[str, str], raw: bytes, query: str
    ) -> _Reply:
        from tests.support.fake_llm_server import _json_reply

        self.server._count_path(path)
        if path.startswith("/openai/"):
            if not urllib.parse.parse_qs(query).get("api-version"):
                return _json_reply(404, {"error": {"message": "Resource not found"}})
            path = "/v1" + path[len("/openai") :]
        parts = path.strip("/").split("/")
        host = headers.get("host", f"127.0.0.1:{self.server.port}")
        if parts[:3] == ["v1", "messages", "batches"]:
            return await self._anthropic(method, parts[3:], raw, query, host)
        if parts[:2] == ["v1", "files"]:
            if method == "POST" and len(parts) == 2:
                return self._upload(headers, raw)
            if method == "GET" and len(parts) == 4 and parts[3] == "content":
                return await self._file_content(parts[2])
        if parts[:2] == ["v1", "batches"]:
            return await self._openai(method, parts[2:], raw, query)
        return _json_reply(404, {"error": {"message": f"Unknown path {path}."}})

    # -------------------------------------------------------------- common

    def _new_id(self, prefix: str) -> str:
        with self._lock:
            self._seq += 1
            return f"{prefix}{self._seq:06d}"

    def _create(self, api: str, lines: list[dict[str, Any]], metadata: dict[str, str]) -> FakeBatch:
        now = time.time()
        delay = self.delays.pop(0) if self.delays else self.delay_s
        batch = FakeBatch(
            id=self._new_id("batch_" if api == "openai" else "msgbatch_"),
            api=api,
            lines=lines,
            created=now,
            ends=now + delay,
            metadata=metadata,
            expire_after=self.expire_after.pop(0) if self.expire_after else None,
        )
        with self._lock:
            self.submitted.extend(str(line["custom_id"]) for line in lines)
            self.batches[batch.id] = batch
        return batch

    def end_running(self) -> None:
        """Every batch still processing ends now (a test that waited on a long batch to
        catch it running needs no more of its delay)."""
        now = time.time()
        with self._lock:
            for batch in self.batches.values():
                batch.ends = min(batch.ends, now)

    def _status_error(self) -> bool:
        with self._lock:
            if self.status_errors > 0:
                self.status_errors -= 1
                return True
        return False

    def _results_error(self) -> bool:
        with self._lock:
            if self.results_errors > 0:
                self.results_errors -= 1
                return True
        return False

    def _settle(self, batch: FakeBatch) -> None:
        """Runs the batch's requests once it has ended (answers, errors, not run)."""
        if batch.results is not None or not batch.ended(time.time()):
            return
        from tests.support.fake_llm_server import (
            ANTHROPIC_MESSAGES_PATH,
            OPENAI_CHAT_PATH,
            _completion_reply,
            _reply_parts,
        )

        results: dict[str, tuple[str, Any]] = {}
        path = ANTHROPIC_MESSAGES_PATH if batch.api == "anthropic" else OPENAI_CHAT_PATH
        if batch.api == "openai" and batch.endpoint == "/v1/responses":
            path = "/v1/responses"
        run = len(batch.lines)
        if batch.expire_after is not None:
            run = min(run, batch.expire_after)
        if batch.cancelled_at is not None:
            span = max(batch.ends - batch.created, 1e-9)
            run = min(run, int(len(batch.lines) * (batch.cancelled_at - batch.created) / span))
        for position, line in enumerate(batch.lines):
            custom_id = str(line["custom_id"])
            body = line["params"] if batch.api == "anthropic" else line["body"]
            if position >= run:
                reason = "cancelled" if batch.cancelled_at is not None else "expired"
                results[custom_id] = ("not_run", reason)
                continue
            message = self.error_for(body) if self.error_for is not None else None
            if message is not None:
                results[custom_id] = ("error", message)
                continue
            text, calls = _reply_parts(self.server.responder(body))
            reply = _completion_reply(path, body, text, position + 1, self.server.served_model)
            results[custom_id] = ("ok", json.loads(reply.body))
        batch.results = results

    # -------------------------------------------------------------- OpenAI

    def _upload(self, headers: dict[str, str], raw: bytes) -> _Reply:
        from tests.support.fake_llm_server import _json_reply

        content_type = headers.get("content-type", "")
        message = BytesParser(policy=HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + raw
        )
        fields: dict[str, bytes] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if isinstance(name, str) and isinstance(payload, bytes):
                fields[name] = payload
        if fields.get("purpose") != b"batch" or "file" not in fields:
            return _json_reply(400, {"error": {"message": "purpose=batch and a file needed"}})
        file_id = self._new_id("file-")
        self._files[file_id] = fields["file"]
        return _json_reply(
            200,
            {"id": file_id, "object": "file", "bytes": len(fields["file"]), "purpose": "batch"},
        )

    async def _openai(self, method: str, rest: list[str], raw: bytes, query: str) -> _Reply:
        from tests.support.fake_llm_server import _json_reply

        if method == "POST" and not rest:
            spec = json.loads(raw)
            content = self._files.get(spec.get("input_file_id", ""))
            if content is None:
                return _json_reply(404, {"error": {"message": "No such file"}})
            if spec.get("completion_window") != "24h":
                return _json_reply(400, {"error": {"message": "completion_window must be 24h"}})
            lines = [json.loads(t) for t in content.splitlines() if t.strip()]
            if self.max_requests is not None and len(lines) > self.max_requests:
                return _json_reply(400, {"error": {"message": "too many requests"}})
            endpoint = spec.get("endpoint")
            urls = {endpoint, endpoint.removeprefix("/v1")} if isinstance(endpoint, str) else set()
            if endpoint not in _ENDPOINTS or any(line.get("url") not in urls for line in lines):
                return _json_reply(400, {"error": {"message": "bad url in a line"}})
            batch = self._create("openai", lines, dict(spec.get("metadata") or {}))
            batch.endpoint = endpoint
            if self.hold_create_s:
                await asyncio.sleep(self.hold_create_s)
            return _json_reply(200, self._openai_object(batch))
        if method == "GET" and not rest:
            arguments = urllib.parse.parse_qs(query)
            after = (arguments.get("after") or [None])[0]
            listed = sorted(
                (b for b in self.batches.values() if b.api == "openai"),
                key=lambda b: b.created,
                reverse=True,
            )
            if after is not None:
                ids = [b.id for b in listed]
                listed = listed[ids.index(after) + 1 :] if after in ids else []
            page = listed[:100]
            return _json_reply(
                200,
                {
                    "object": "list",
                    "data": [self._openai_object(b) for b in page],
                    "has_more": len(listed) > len(page),
                },
            )
        batch = self.batches.get(rest[0]) if rest else None
        if batch is None:
            return _json_reply(404, {"error": {"message": "No such batch"}})
        if method == "POST" and rest[1:] == ["cancel"]:
            if not batch.ended(time.time()):
                batch.cancelled_at = time.time()
            return _json_reply(200, self._openai_object(batch))
        if method == "GET" and len(rest) == 1:
            if self._status_error():
                return _json_reply(503, {"error": {"message": "overloaded"}})
            return _json_reply(200, self._openai_object(batch))
        return _json_reply(405, {"error": {"message": "Method not allowed"}})

    def _openai_object(self, batch: FakeBatch) -> dict[str, Any]:
        self._settle(batch)
        now = time.time()
        status = "in_progress"
        counts = {"total": len(batch.lines), "completed": batch.done_count(now), "failed": 0}
        output_id = error_id = None
        if batch.results is not None:
            kinds = [kind for kind, _ in batch.results.values()]
            counts["failed"] = kinds.count("error")
            if batch.cancelled_at is not None:
                status = "cancelled"
            elif "not_run" in kinds:
                status = "expired"
            else:
                status = "completed"
            output_id, error_id = f"{batch.id}-output", f"{batch.id}-errors"
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "input_file_id": None,
            "completion_window": "24h",
            "status": status,
            "output_file_id": output_id,
            "error_file_id": error_id,
            "created_at": int(batch.created),
            "request_counts": counts,
            "metadata": batch.metadata,
        }

    async def _file_content(self, file_id: str) -> _Reply:
        from tests.support.fake_llm_server import _json_reply, _Reply

        batch_id, _, which = file_id.rpartition("-")
        batch = self.batches.get(batch_id)
        if batch is None or batch.results is None:
            content = self._files.get(file_id)
            if content is None:
                return _json_reply(404, {"error": {"message": "No such file"}})
            return _Reply(200, content, "application/octet-stream")
        self.results_started += 1
        if self._results_error():
            return _json_reply(503, {"error": {"message": "overloaded"}})
        if self.results_delay_s:
            await asyncio.sleep(self.results_delay_s)
        self.results_reads += 1
        out = []
        for n, (custom_id, (kind, value)) in enumerate(batch.results.items()):
            entry: dict[str, Any] = {"id": f"batch_req_{n}", "custom_id": custom_id}
            if which == "output" and kind == "ok":
                entry["response"] = {"status_code": 200, "request_id": f"req_{n}", "body": value}
                entry["error"] = None
            elif which == "errors" and kind == "error":
                entry["response"] = {
                    "status_code": 400,
                    "request_id": f"req_{n}",
                    "body": {"error": {"message": value, "type": "invalid_request_error"}},
                }
                entry["error"] = None
            elif which == "errors" and kind == "not_run":
                entry["response"] = None
                code = "batch_cancelled" if value == "cancelled" else "batch_expired"
                entry["error"] = {"code": code, "message": f"This request was {value}."}
            else:
                continue
            out.append(json.dumps(entry))
        return _Reply(200, ("\n".join(out) + "\n").encode(), "application/jsonl")

    # -------------------------------------------------------------- Anthropic

    async def _anthropic(
        self, method: str, rest: list[str], raw: bytes, query: str, host: str
    ) -> _Reply:
        from tests.support.fake_llm_server import _json_reply, _Reply

        if method == "POST" and not rest:
            requests = json.loads(raw).get("requests")
            if not isinstance(requests, list) or not requests:
                return _json_reply(400, {"type": "error", "error": {"message": "requests"}})
            if self.max_requests is not None and len(requests) > self.max_requests:
                return _json_reply(400, {"type": "error", "error": {"message": "too many"}})
            for entry in requests:
                custom_id = entry.get("custom_id")
                if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 64:
                    return _json_reply(400, {"type": "error", "error": {"message": "custom_id"}})
            batch = self._create("anthropic", requests, {})
            if self.hold_create_s:
                await asyncio.sleep(self.hold_create_s)
            return _json_reply(200, self._anthropic_object(batch, host))
        if method == "GET" and not rest:
            arguments = urllib.parse.parse_qs(query)
            after = (arguments.get("after_id") or [None])[0]
            listed = sorted(
                (b for b in self.batches.values() if b.api == "anthropic"),
                key=lambda b: b.created,
                reverse=True,
            )
            if after is not None:
                ids = [b.id for b in listed]
                listed = listed[ids.index(after) + 1 :] if after in ids else []
            page = listed[:100]
            return _json_reply(
                200,
                {
                    "data": [self._anthropic_object(b, host) for b in page],
                    "has_more": len(listed) > len(page),
                    "first_id": page[0].id if page else None,
                    "last_id": page[-1].id if page else None,
                },
            )
        batch = self.batches.get(rest[0]) if rest else None
        if batch is None:
            return _json_reply(404, {"type": "error", "error": {"message": "No such batch"}})
        if method == "POST" and rest[1:] == ["cancel"]:
            if not batch.ended(time.time()):
                batch.cancelled_at = time.time()
            return _json_reply(200, self._anthropic_object(batch, host))
        if method == "GET" and len(rest) == 1:
            if self._status_error():
                return _json_reply(503, {"type": "error", "error": {"message": "overloaded"}})
            return _json_reply(200, self._anthropic_object(batch, host))
        if method == "GET" and rest[1:] == ["results"]:
            self._settle(batch)
            if batch.results is None:
                return _json_reply(400, {"type": "error", "error": {"message": "not ended"}})
            self.results_started += 1
            if self._results_error():
                return _json_reply(503, {"type": "error", "error": {"message": "overloaded"}})
            if self.results_delay_s:
                await asyncio.sleep(self.results_delay_s)
            self.results_reads += 1
            out = []
            for custom_id, (kind, value) in batch.results.items():
                if kind == "ok":
                    result: dict[str, Any] = {"type": "succeeded", "message": value}
                elif kind == "error":
                    result = {
                        "type": "errored",
                        "error": {
                            "type": "error",
                            "error": {"type": "invalid_request_error", "message": value},
                        },
                    }
                else:
                    result = {"type": "canceled" if value == "cancelled" else "expired"}
                out.append(json.dumps({"custom_id": custom_id, "result": result}))
            return _Reply(200, ("\n".join(out) + "\n").encode(), "application/x-jsonl")
        return _json_reply(405, {"type": "error", "error": {"message": "Method not allowed"}})

    def _anthropic_object(self, batch: FakeBatch, host: str) -> dict[str, Any]:
        self._settle(batch)
        now = time.time()
        total = len(batch.lines)
        counts = {"processing": total, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        status = "in_progress"
        results_url = None
        if batch.results is not None:
            status = "ended"
            counts["processing"] = 0
            for kind, value in batch.results.values():
                if kind == "ok":
                    counts["succeeded"] += 1
                elif kind == "error":
                    counts["errored"] += 1
                else:
                    counts["canceled" if value == "cancelled" else "expired"] += 1
            results_url = f"http://{host}/v1/messages/batches/{batch.id}/results"
        else:
            done = batch.done_count(now)
            counts["processing"], counts["succeeded"] = total - done, done
        created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(batch.created))
        created += f".{int((batch.created % 1) * 1e6):06d}Z"
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": status,
            "request_counts": counts,
            "created_at": created,
            "results_url": results_url,
        }
