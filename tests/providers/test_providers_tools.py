"""Tool use in the provider adapters: neutral messages and tools to OpenAI Chat Completions
and Anthropic Messages and back, against httpx.MockTransport and the loopback fake server."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gradetrail_lib.backends.transport import StreamTransport
from gradetrail_lib.providers.anthropic_messages import AnthropicMessagesAdapter
from gradetrail_lib.providers.base import Endpoint, Message, ModelRequest, ModelResponse
from gradetrail_lib.providers.caller import adapter_for, call_model
from gradetrail_lib.providers.openai_chat import OpenAIChatAdapter, chat_messages
from gradetrail_lib.providers.policy import RetryPolicy
from tests.support.agent_scripts import Conversation, conversation, reply, script, tool_call
from tests.support.fake_llm_server import FakeLLMServer, Fault, default_responder

BASE_URL = "https://api.test/v1"
KEY_ENVS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "add",
        "description": "Adds two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
    {
        "name": "lookup",
        "description": "Looks a constant up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
]

# A multi-step neutral conversation: two calls in one turn, then one call without text.
CONVERSATION: list[Message] = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "What is 2 + 3 + 1, and pi?"},
    {
        "role": "assistant",
        "content": "Let me see.",
        "tool_calls": [
            {"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}},
            {"id": "c2", "name": "lookup", "arguments": {"q": "pi ≈"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"},
    {"role": "tool", "tool_call_id": "c2", "name": "lookup", "content": "3.14"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c3", "name": "add", "arguments": {"a": 5, "b": 1}}],
    },
    {"role": "tool", "tool_call_id": "c3", "name": "add", "content": "6"},
]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")


def make_request(
    provider: str,
    messages: list[Message],
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | None = None,
    params: dict[str, Any] | None = None,
    base_url: str = BASE_URL,
) -> ModelRequest:
    return ModelRequest(
        key="k" * 64,
        endpoint=Endpoint(provider, "test-model", base_url, KEY_ENVS.get(provider)),
        messages=messages,
        params={"max_tokens": 64} if params is None else params,
        tools=tools,
        tool_choice=tool_choice,
    )


def built_body(request: ModelRequest) -> Any:
    return json.loads(adapter_for(request.endpoint.provider).build(request, "key").read())


# ------------------------------------------------------------------------- build


def test_openai_build_of_a_tool_conversation() -> None:
    request = make_request("openai", CONVERSATION, tools=TOOLS, tool_choice="auto")
    assert built_body(request) == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": "What is 2 + 3 + 1, and pi?"},
            {
                "role": "assistant",
                "content": "Let me see.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "pi ≈"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "5"},
            {"role": "tool", "tool_call_id": "c2", "content": "3.14"},
            {
                "role": "assistant",
                "content": None,  # no text: null, as the API sends it
                "tool_calls": [
                    {
                        "id": "c3",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 5, "b": 1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c3", "content": "6"},
        ],
        "max_tokens": 64,
        "tools": [{"type": "function", "function": tool} for tool in TOOLS],
        "tool_choice": "auto",
    }
    assert request.messages == CONVERSATION  # the request is not changed by building


def test_anthropic_build_of_a_tool_conversation() -> None:
    request = make_request(
        "anthropic", CONVERSATION, tools=TOOLS, tool_choice="required", params={"max_tokens": 9}
    )
    assert built_body(request) == {
        "model": "test-model",
        "messages": [
            {"role": "user", "content": "What is 2 + 3 + 1, and pi?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Let me see."},
                    {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 2, "b": 3}},
                    {"type": "tool_use", "id": "c2", "name": "lookup", "input": {"q": "pi ≈"}},
                ],
            },
            {  # consecutive tool messages: one user message
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "5"},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "3.14"},
                ],
            },
            {
                "role": "assistant",
                "content": [  # no text block for empty text
                    {"type": "tool_use", "id": "c3", "name": "add", "input": {"a": 5, "b": 1}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c3", "content": "6"}],
            },
        ],
        "max_tokens": 9,
        "system": "Use the tools.",
        "tools": [
            {
                "name": t["name"],
                "description": t["description"],
                "input_schema": t["parameters"],
            }
            for t in TOOLS
        ],
        "tool_choice": {"type": "any"},
    }
    assert request.messages == CONVERSATION


@pytest.mark.parametrize(
    ("choice", "openai", "anthropic"),
    [
        ("auto", "auto", {"type": "auto"}),
        ("required", "required", {"type": "any"}),
        ("none", "none", {"type": "none"}),
    ],
)
def test_tool_choice(choice: str, openai: str, anthropic: dict[str, str]) -> None:
    messages: list[Message] = [{"role": "user", "content": "hi"}]
    assert (
        built_body(make_request("openai", messages, tools=TOOLS, tool_choice=choice))["tool_choice"]
        == openai
    )
    assert (
        built_body(make_request("anthropic", messages, tools=TOOLS, tool_choice=choice))[
            "tool_choice"
        ]
        == anthropic
    )


@pytest.mark.parametrize("provider", ["openai", "openai_compatible", "anthropic"])
def test_tools_without_choice_and_empty_tools(provider: str) -> None:
    messages: list[Message] = [{"role": "user", "content": "hi"}]
    body = built_body(make_request(provider, messages, tools=TOOLS))
    assert len(body["tools"]) == 2 and "tool_choice" not in body
    # No tools (None or an empty list, which the APIs refuse): neither key is sent.
    no_tools: list[list[dict[str, Any]] | None] = [None, []]
    for tools in no_tools:
        body = built_body(make_request(provider, messages, tools=tools, tool_choice="auto"))
        assert "tools" not in body and "tool_choice" not in body


def test_anthropic_tool_without_parameters_gets_an_empty_object_schema() -> None:
    request = make_request(
        "anthropic", [{"role": "user", "content": "hi"}], tools=[{"name": "now"}]
    )
    assert built_body(request)["tools"] == [
        {"name": "now", "input_schema": {"type": "object", "properties": {}}}
    ]


def test_unparsed_arguments_go_back_as_the_model_wrote_them() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "add", "arguments": {"_unparsed": "{a: 2"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "error: bad JSON"},
    ]
    body = built_body(make_request("openai", messages, tools=TOOLS))
    assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{a: 2"


def test_assistant_with_an_empty_tool_calls_list_is_plain() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello.", "tool_calls": []},
        {"role": "user", "content": "bye"},
    ]
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}]
    assert built_body(make_request("openai", messages))["messages"][:2] == plain
    assert built_body(make_request("anthropic", messages))["messages"][:2] == plain


# ------------------------------------------------------------ plain requests unchanged


PLAIN_CONVERSATIONS: list[list[Message]] = [
    [{"role": "user", "content": "Q: 2 + 3"}],
    [
        {"role": "system", "content": "You add."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": 'Grüße, 東京 \u2028 "q"'},
        {"role": "assistant", "content": "Answer:"},
    ],
]


def _legacy_openai_body(request: ModelRequest) -> dict[str, Any]:
    """The body as built before tool use existed."""
    return {"model": request.endpoint.model, "messages": request.messages, **request.params}


def _legacy_anthropic_body(request: ModelRequest) -> dict[str, Any]:
    system = [m["content"] for m in request.messages if m["role"] == "system"]
    params = dict(request.params)
    if "stop" in params:
        params["stop_sequences"] = params.pop("stop")
    body: dict[str, Any] = {
        "model": request.endpoint.model,
        "messages": [m for m in request.messages if m["role"] != "system"],
        **params,
    }
    if system:
        body["system"] = "\n\n".join(system)
    return body


@pytest.mark.parametrize("messages", PLAIN_CONVERSATIONS)
@pytest.mark.parametrize("provider", ["openai", "openai_compatible", "local", "anthropic"])
def test_plain_request_body_is_byte_for_byte_as_before(
    provider: str, messages: list[Message]
) -> None:
    request = make_request(
        provider, messages, params={"max_tokens": 64, "temperature": 0.0, "stop": ["\n"]}
    )
    legacy = (_legacy_anthropic_body if provider == "anthropic" else _legacy_openai_body)(request)
    url = f"{BASE_URL}/{'messages' if provider == 'anthropic' else 'chat/completions'}"
    ours = adapter_for(provider).build(request, "key").read()
    assert ours == httpx.Request("POST", url, json=legacy).content


def test_plain_openai_messages_are_sent_as_they_are() -> None:
    messages = PLAIN_CONVERSATIONS[1]
    assert chat_messages(messages) is messages


# ------------------------------------------------------------------------- parse


def _openai_body(message: dict[str, Any], finish_reason: str = "tool_calls") -> dict[str, Any]:
    return {
        "model": "served-oa",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4},
    }


def test_openai_parse_tool_calls() -> None:
    body = _openai_body(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                },
                {"id": "call_b", "type": "function", "function": {"name": "now", "arguments": ""}},
                {  # some OpenAI-compatible servers send the object itself
                    "id": "call_c",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": {"q": "pi"}},
                },
            ],
        }
    )
    parsed = OpenAIChatAdapter().parse(body)
    assert parsed.text == ""
    assert parsed.stop_reason == "tool_use"
    assert parsed.tool_calls == [
        {"id": "call_a", "name": "add", "arguments": {"a": 2, "b": 3}},
        {"id": "call_b", "name": "now", "arguments": {}},
        {"id": "call_c", "name": "lookup", "arguments": {"q": "pi"}},
    ]


@pytest.mark.parametrize("raw", ['{"a": 2, "b"', "not json", "[1, 2]", "42", '"text"'])
def test_openai_arguments_that_are_not_a_json_object_are_kept_raw(raw: str) -> None:
    body = _openai_body(
        {
            "role": "assistant",
            "content": "Calling.",
            "tool_calls": [
                {"id": "call_x", "type": "function", "function": {"name": "add", "arguments": raw}}
            ],
        }
    )
    parsed = OpenAIChatAdapter().parse(body)
    assert parsed.text == "Calling."
    assert parsed.tool_calls == [{"id": "call_x", "name": "add", "arguments": {"_unparsed": raw}}]


def test_openai_parse_without_tool_calls_has_none() -> None:
    body = _openai_body({"role": "assistant", "content": "Hi."}, "stop")
    parsed = OpenAIChatAdapter().parse(body)
    assert (parsed.text, parsed.stop_reason, parsed.tool_calls) == ("Hi.", "stop", [])
    body = _openai_body({"role": "assistant", "content": "Hi.", "tool_calls": None}, "stop")
    assert OpenAIChatAdapter().parse(body).tool_calls == []


def test_anthropic_parse_tool_use() -> None:
    body = {
        "model": "served-an",
        "content": [
            {"type": "text", "text": "Let me "},
            {"type": "tool_use", "id": "toolu_a", "name": "add", "input": {"a": 2, "b": 3}},
            {"type": "text", "text": "add."},
            {"type": "tool_use", "id": "toolu_b", "name": "now", "input": {}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 4},
    }
    parsed = AnthropicMessagesAdapter().parse(body)
    assert parsed.text == "Let me add."
    assert parsed.stop_reason == "tool_use"
    assert parsed.tool_calls == [
        {"id": "toolu_a", "name": "add", "arguments": {"a": 2, "b": 3}},
        {"id": "toolu_b", "name": "now", "arguments": {}},
    ]
    plain = {**body, "content": [{"type": "text", "text": "Hi."}], "stop_reason": "end_turn"}
    assert AnthropicMessagesAdapter().parse(plain).tool_calls == []


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_call_model_returns_the_tool_calls(provider: str) -> None:
    if provider == "openai":
        body = _openai_body(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a":1,"b":2}'},
                    }
                ],
            }
        )
    else:
        body = {
            "model": "m",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 1, "b": 2}}
            ],
            "stop_reason": "tool_use",
        }

    async def go() -> ModelResponse:
        transport = httpx.MockTransport(lambda _: httpx.Response(200, json=body))
        request = make_request(provider, [{"role": "user", "content": "hi"}], tools=TOOLS)
        return await call_model(transport, request, RetryPolicy())

    response = asyncio.run(go())
    assert response.stop_reason == "tool_use"
    assert response.tool_calls == [{"id": "call_1", "name": "add", "arguments": {"a": 1, "b": 2}}]


# ---------------------------------------------------- end to end, loopback fake server


@pytest.fixture
def srv() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def run_tool(call: dict[str, Any]) -> str:
    assert call["name"] == "add"
    return str(call["arguments"]["a"] + call["arguments"]["b"])


def agent_loop(
    srv: FakeLLMServer, provider: str, policy: RetryPolicy | None = None
) -> tuple[list[Message], list[ModelResponse], list[float]]:
    """Calls the model through `call_model`, running its tool calls, until it answers."""
    messages: list[Message] = [
        {"role": "system", "content": "Add with the tool."},
        {"role": "user", "content": "Q: 2 + 3"},
    ]
    responses: list[ModelResponse] = []
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def go() -> None:
        transport = StreamTransport()
        try:
            for _ in range(5):
                request = make_request(
                    provider, list(messages), tools=TOOLS, tool_choice="auto",
                    base_url=f"{srv.base_url}/v1",
                )  # fmt: skip
                response = await call_model(
                    transport, request, policy or RetryPolicy(), sleep=fake_sleep,
                    rng=random.Random(0),
                )  # fmt: skip
                responses.append(response)
                if not response.tool_calls:
                    return
                messages.append(
                    {
                        "role": "assistant",
                        "content": response.text,
                        "tool_calls": response.tool_calls,
                    }
                )
                messages.extend(
                    {
                        "role": "tool",
                        "tool_call_id": c["id"],
                        "name": c["name"],
                        "content": run_tool(c),
                    }
                    for c in response.tool_calls
                )
        finally:
            await transport.aclose()

    asyncio.run(go())
    return messages, responses, sleeps


def _sum_responder() -> Any:
    return script(
        lambda convo: tool_call("add", a=2, b=3) if "add" in convo.tools else "no tools offered",
        lambda convo: f"The sum is {convo.last_tool_results[0]['content']}.",
    )


@pytest.mark.parametrize("provider", ["openai", "openai_compatible", "anthropic"])
def test_end_to_end_tool_call_then_answer(srv: FakeLLMServer, provider: str) -> None:
    srv.responder = _sum_responder()
    messages, responses, _ = agent_loop(srv, provider)

    first, second = responses
    prefix = "toolu_" if provider == "anthropic" else "call_"
    assert first.stop_reason == "tool_use"
    assert first.text == ""
    assert first.tool_calls == [{"id": f"{prefix}1", "name": "add", "arguments": {"a": 2, "b": 3}}]
    assert second.stop_reason == "stop"
    assert second.text == "The sum is 5."
    assert second.tool_calls == []

    # What the server got, read back neutrally, is the conversation as the caller holds it.
    sent = srv.requests[-1]["body"]
    assert conversation(sent).messages == messages[1:]
    assert conversation(sent).system == "Add with the tool."
    assert conversation(sent).tools == ["add", "lookup"]
    assert conversation(sent).tool_choice == "auto"
    # ... and in the provider's own shape.
    if provider == "anthropic":
        assert sent["messages"][-1] == {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "5"}],
        }
        assert sent["tools"][0]["input_schema"] == TOOLS[0]["parameters"]
        assert sent["tool_choice"] == {"type": "auto"}
    else:
        assert sent["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "5"}
        assert sent["messages"][-2]["tool_calls"][0]["function"]["name"] == "add"
        assert sent["tools"][0] == {"type": "function", "function": TOOLS[0]}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_end_to_end_tool_turns_are_retried_by_the_same_policy(
    srv: FakeLLMServer, provider: str
) -> None:
    srv.responder = _sum_responder()
    # The tool-call turn fails once (503 with retry-after), then is answered.
    srv.script = [Fault(503, headers={"retry-after": "2"})]
    policy = RetryPolicy(max_attempts=3)
    _, responses, sleeps = agent_loop(srv, provider, policy)
    assert [r.attempts for r in responses] == [2, 1]
    assert responses[-1].text == "The sum is 5."
    assert len(sleeps) == 1 and 2.0 <= sleeps[0] <= 2.1
    assert srv.calls == 3


# ------------------------------------------------------------------- fake server


def _post(srv: FakeLLMServer, path: str, body: dict[str, Any]) -> Any:
    return httpx.post(f"{srv.base_url}{path}", json=body).json()


def test_fake_server_renders_tool_calls_per_format_with_unique_ids(srv: FakeLLMServer) -> None:
    srv.responder = lambda body: reply("Two calls.", ("add", {"a": 1, "b": 2}), ("now", {}))
    request = {"model": "m", "messages": [{"role": "user", "content": "go"}]}

    data = _post(srv, "/v1/chat/completions", request)
    (choice,) = data["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": "Two calls.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
            },
            {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ],
    }

    data = _post(srv, "/v1/messages", {**request, "max_tokens": 50})
    assert data["stop_reason"] == "tool_use"
    assert data["content"] == [
        {"type": "text", "text": "Two calls."},
        {"type": "tool_use", "id": "toolu_3", "name": "add", "input": {"a": 1, "b": 2}},
        {"type": "tool_use", "id": "toolu_4", "name": "now", "input": {}},
    ]

    # Ids stay unique after reset_counts; a call without text has no text (null in OpenAI).
    srv.reset_counts()
    srv.responder = lambda body: tool_call("now")
    data = _post(srv, "/v1/chat/completions", request)
    assert data["choices"][0]["message"]["content"] is None
    assert data["choices"][0]["message"]["tool_calls"][0]["id"] == "call_5"
    data = _post(srv, "/v1/messages", request)
    assert data["content"] == [{"type": "tool_use", "id": "toolu_6", "name": "now", "input": {}}]


def test_fake_server_dict_reply_without_calls_is_a_plain_answer(srv: FakeLLMServer) -> None:
    srv.responder = lambda body: {"text": "Just text."}
    request = {"model": "m", "messages": [{"role": "user", "content": "go"}]}
    data = _post(srv, "/v1/chat/completions", request)
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "Just text."}
    assert data["choices"][0]["finish_reason"] == "stop"
    data = _post(srv, "/v1/messages", request)
    assert data["content"] == [{"type": "text", "text": "Just text."}]
    assert data["stop_reason"] == "end_turn"


def test_fake_server_bad_dict_reply_is_a_500(srv: FakeLLMServer) -> None:
    srv.responder = lambda body: {"tool_calls": [{"arguments": {}}]}  # no name
    r = httpx.post(
        f"{srv.base_url}/v1/messages",
        json={"model": "m", "messages": [{"role": "user", "content": "go"}]},
    )
    assert r.status_code == 500
    assert "Responder failed" in r.json()["error"]["message"]


def test_default_responder_skips_anthropic_tool_results() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "Q: 2 + 3"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": "9"}],
            },
        ]
    }
    assert default_responder(body) == "Answer: 5"  # as OpenAI's role "tool" is not a user


# ------------------------------------------------------------------ agent_scripts


def test_conversation_reads_both_formats_alike() -> None:
    read: list[Conversation] = []
    for provider in ("openai", "anthropic"):
        request = make_request(provider, CONVERSATION, tools=TOOLS, tool_choice="required")
        read.append(conversation(built_body(request)))
    from_openai, from_anthropic = read
    assert from_openai == from_anthropic
    assert from_openai.system == "Use the tools."
    assert from_openai.messages == CONVERSATION[1:]
    assert from_openai.tools == ["add", "lookup"]
    assert from_openai.tool_choice == "required"
    assert from_openai.turns == 2
    assert from_openai.last_tool_results == [CONVERSATION[-1]]
    assert from_openai.last_user_text == "What is 2 + 3 + 1, and pi?"
    assert [c["id"] for c in from_openai.tool_calls] == ["c1", "c2", "c3"]


def test_script_picks_the_step_by_assistant_turns() -> None:
    responder = script("first", lambda convo: f"then {convo.turns}")
    user = {"role": "user", "content": "hi"}
    assert responder({"messages": [user]}) == "first"
    two_turns = [
        user,
        {"role": "assistant", "content": "a"},
        user,
        {"role": "assistant", "content": "b"},
        user,
    ]
    assert responder({"messages": two_turns}) == "then 2"  # the last step repeats
    with pytest.raises(ValueError):
        script()
