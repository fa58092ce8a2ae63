"""Scripting tool-using trajectories against the fake server, in any request format.

A responder of :class:`tests.support.fake_llm_server.FakeLLMServer` receives the request
body in the shape of the endpoint hit: OpenAI Chat Completions (Azure's too), Anthropic
Messages or Gemini generateContent. :func:`conversation` reads any of them back as one
provider-neutral :class:`Conversation` (the messages as `gradetrail_lib.providers.request`
documents them, the tools offered, the last tool results), so that one responder scripts
the same trajectory for every format::

    responder = script(
        tool_call("add", a=2, b=3),
        lambda convo: f"Answer: {convo.last_tool_results[0]['content']}",
    )
    with FakeLLMServer(responder=responder) as srv:
        ...

The reply to a request is picked by how many assistant turns its conversation already
has: turn 0 gets the first step, turn 1 the second, and so on (the last step repeats).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.fake_llm_server import Responder, ResponderReply

__all__ = [
    "Conversation",
    "Step",
    "conversation",
    "reply",
    "script",
    "tool_call",
]

Message = dict[str, Any]

#: One scripted turn: a fixed reply, or a function of the conversation so far.
Step = ResponderReply | Callable[["Conversation"], ResponderReply]

# Anthropic's tool_choice types, in the neutral words (see gradetrail_lib.providers.request).
_CHOICES = {"auto": "auto", "any": "required", "none": "none", "tool": "required"}


@dataclass(frozen=True)
class Conversation:
    """A request body read back provider-neutrally."""

    #: The system texts joined by a blank line ("" when there are none).
    system: str
    #: User, assistant and tool messages, neutral (system messages are in `system`).
    messages: list[Message]
    #: Names of the tools offered, in order.
    tools: list[str] = field(default_factory=list)
    #: The neutral tool choice ("auto" | "required" | "none"), or None when not sent.
    tool_choice: str | None = None

    @property
    def turns(self) -> int:
        """How many assistant messages the conversation has."""
        return sum(1 for m in self.messages if m["role"] == "assistant")

    @property
    def last_tool_results(self) -> list[Message]:
        """The tool messages after the last assistant message, each with the called
        tool's name: ``[{"role": "tool", "tool_call_id", "name", "content"}]``."""
        results: list[Message] = []
        for message in reversed(self.messages):
            if message["role"] != "tool":
                break
            results.append(message)
        return results[::-1]

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """Every tool call the assistant made so far, in order."""
        return [
            c for m in self.messages if m["role"] == "assistant" for c in m.get("tool_calls", [])
        ]

    @property
    def last_user_text(self) -> str:
        for message in reversed(self.messages):
            if message["role"] == "user":
                return str(message["content"])
        return ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"_unparsed": raw}
    return value if isinstance(value, dict) else {"_unparsed": raw}


def _assistant(message: Message) -> Message:
    content = message.get("content")
    calls: list[dict[str, Any]] = []
    for call in message.get("tool_calls") or []:  # OpenAI
        function = call["function"]
        calls.append(
            {
                "id": call["id"],
                "name": function["name"],
                "arguments": _arguments(function.get("arguments")),
            }
        )
    if isinstance(content, list):  # Anthropic
        calls.extend(
            {"id": b["id"], "name": b["name"], "arguments": _arguments(b.get("input"))}
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_use"
        )
    out: Message = {"role": "assistant", "content": _text(content)}
    if calls:
        out["tool_calls"] = calls
    return out


_GEMINI_MODES = {"AUTO": "auto", "ANY": "required", "NONE": "none"}


def _gemini_conversation(body: dict[str, Any]) -> Conversation:
    """A generateContent body: function calls get ids ``call_<i>`` by their place in their
    turn, and a function response the id of the latest call of its name."""
    instruction = body.get("systemInstruction") or {}
    system = "".join(p.get("text", "") for p in instruction.get("parts") or [])
    messages: list[Message] = []
    ids: dict[str, str] = {}  # tool name -> id of its latest call
    for content in body.get("contents") or []:
        parts = content.get("parts") or []
        text = "".join(p.get("text", "") for p in parts if "text" in p)
        if content.get("role") == "model":
            calls = [
                {
                    "id": f"call_{i}",
                    "name": call["name"],
                    "arguments": _arguments(call.get("args")),
                }
                for i, call in enumerate(p["functionCall"] for p in parts if "functionCall" in p)
            ]
            ids.update((c["name"], c["id"]) for c in calls)
            message: Message = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            continue
        for part in parts:
            if "functionResponse" in part:
                result = part["functionResponse"]
                response = result.get("response") or {}
                value = response.get("output", response.get("error", response))
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": ids.get(result.get("name", ""), ""),
                        "name": result.get("name", ""),
                        "content": value if isinstance(value, str) else json.dumps(value),
                    }
                )
        if text or not parts or not all("functionResponse" in p for p in parts):
            messages.append({"role": "user", "content": text})
    tools = [
        str(d["name"]) for t in body.get("tools") or [] for d in t.get("functionDeclarations", [])
    ]
    mode = ((body.get("toolConfig") or {}).get("functionCallingConfig") or {}).get("mode")
    return Conversation(system, messages, tools, _GEMINI_MODES.get(mode, mode))


def _responses_conversation(body: dict[str, Any]) -> Conversation:
    """A Responses API body: `instructions`, then input items (messages, `function_call`
    and `function_call_output` items) read back as neutral messages."""
    system = [str(body["instructions"])] if body.get("instructions") else []
    messages: list[Message] = []
    names: dict[str, str] = {}
    for item in body.get("input") or []:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "name": item["name"],
                "arguments": _arguments(item.get("arguments")),
            }
            names[call["id"]] = call["name"]
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item["call_id"]
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "name": names.get(call_id, ""),
                 "content": str(item.get("output", ""))}
            )  # fmt: skip
        elif item.get("role") in ("system", "developer"):
            system.append(_text(item.get("content")))
        else:
            messages.append({"role": item.get("role"), "content": _text(item.get("content"))})
    tools = [str(t["name"]) for t in body.get("tools") or []]
    return Conversation("\n\n".join(system), messages, tools, _tool_choice(body.get("tool_choice")))


def conversation(body: dict[str, Any]) -> Conversation:
    """The body of a Chat Completions, Responses, Messages or generateContent request,
    read provider-neutrally."""
    if "contents" in body:
        return _gemini_conversation(body)
    if "input" in body:
        return _responses_conversation(body)
    system: list[str] = []
    if body.get("system"):
        system.append(_text(body["system"]))
    messages: list[Message] = []
    names: dict[str, str] = {}  # tool call id -> tool name
    for message in body.get("messages") or []:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            system.append(_text(content))
        elif role == "assistant":
            neutral = _assistant(message)
            names.update((c["id"], c["name"]) for c in neutral.get("tool_calls", []))
            messages.append(neutral)
        elif role == "tool":
            call_id = message.get("tool_call_id", "")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": names.get(call_id, ""),
                    "content": _text(content),
                }
            )
        elif isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "tool_result":
                    call_id = block.get("tool_use_id", "")
                    messages.append(
                        {
                            "role": "tool",
                            "tool_call_id": call_id,
                            "name": names.get(call_id, ""),
                            "content": _text(block.get("content")),
                        }
                    )
                elif block.get("type") == "text":
                    messages.append({"role": "user", "content": block.get("text", "")})
        else:
            messages.append({"role": role, "content": _text(content)})
    tools = [
        str(t["function"]["name"] if "function" in t else t["name"])
        for t in body.get("tools") or []
    ]
    return Conversation("\n\n".join(system), messages, tools, _tool_choice(body.get("tool_choice")))


def _tool_choice(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        kind = str(value.get("type"))
        return "required" if kind == "function" else _CHOICES.get(kind, kind)
    return str(value)


def tool_call(name: str, /, **arguments: Any) -> ResponderReply:
    """A reply that calls one tool (and says nothing)."""
    return reply("", (name, arguments))


def reply(text: str, *calls: tuple[str, dict[str, Any]]) -> ResponderReply:
    """A reply with text and any number of tool calls, each ``(name, arguments)``."""
    return {"text": text, "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}


def script(*steps: Step) -> Responder:
    """A responder answering assistant turn ``i`` with ``steps[i]`` (the last one repeats);
    a callable step is called with the :class:`Conversation`."""
    if not steps:
        raise ValueError("a script needs at least one step")

    def responder(body: dict[str, Any]) -> ResponderReply:
        convo = conversation(body)
        step = steps[min(convo.turns, len(steps) - 1)]
        return step(convo) if callable(step) else step

    return responder
