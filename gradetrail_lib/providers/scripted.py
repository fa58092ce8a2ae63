"""Provider `scripted`: answers in-process with the text its request carries (a sample
field or a fixed text, set when the request was built). No network, usage and latency
zero: for trying scorers and judges before paying for a model, and for tests.

An agent's case is scripted by a list in the sample field, one entry per model call: the
call after N assistant turns gets entry N (the last one repeats). An entry is the text of
an answer, or `{text: ..., tool_calls: [{name: ..., arguments: {...}}]}`."""

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.base import Message, ModelResponse, ScriptedAnswer
from gradetrail_lib.providers.media import MediaLimits
from gradetrail_lib.providers.registry import ModelConfig, Provider

if TYPE_CHECKING:
    from gradetrail_lib.datasets.dataset import Sample
    from gradetrail_lib.providers.base import ModelRequest


def _check(model: ModelConfig) -> None:
    if model.base_url is not None:
        raise ValueError("scripted models answer in-process; remove base_url")
    if (model.answer_field is None) == (model.text is None):
        raise ValueError("scripted needs exactly one of answer_field, text")


def _step_problem(step: Any) -> str | None:
    if isinstance(step, str):
        return None
    if not isinstance(step, dict) or not set(step) <= {"text", "tool_calls"}:
        return "is neither a text nor {text, tool_calls}"
    if not isinstance(step.get("text", ""), str):
        return "has a text that is not a string"
    calls = step.get("tool_calls", [])
    if not isinstance(calls, list) or not all(
        isinstance(c, dict)
        and isinstance(c.get("name"), str)
        and isinstance(c.get("arguments", {}), dict)
        for c in calls
    ):
        return "has tool_calls that are not a list of {name, arguments}"
    return None


def _scripted_step(
    steps: list[Any], messages: Sequence[Message], where: tuple[str, int, str, str]
) -> ScriptedAnswer:
    path, line, field, sample_id = where
    if not steps:
        raise InputError(path, line, field, f"sample {sample_id!r}: {field!r} is an empty script")
    for number, step in enumerate(steps):
        problem = _step_problem(step)
        if problem is not None:
            raise InputError(
                path, line, field, f"sample {sample_id!r}: step {number} of {field!r} {problem}"
            )
    turn = sum(1 for m in messages if m["role"] == "assistant")
    step = steps[min(turn, len(steps) - 1)]
    if isinstance(step, str):
        return step
    return {
        "text": step.get("text", ""),
        "tool_calls": [
            {"name": c["name"], "arguments": c.get("arguments", {})}
            for c in step.get("tool_calls", [])
        ],
    }


def sample_answer(
    model: ModelConfig, sample: "Sample", dataset_path: str, messages: Sequence[Message] = ()
) -> ScriptedAnswer:
    """What the model says to this sample: its fixed text, or the sample's field (an
    agent's script: the step for `messages`' turn)."""
    if model.text is not None:
        return model.text
    field = model.answer_field
    assert field is not None
    if field not in sample.fields:
        raise InputError(
            dataset_path,
            sample.line,
            field,
            f"sample {sample.id!r} has no field {field!r} "
            f"(the answer_field of scripted model {model.name!r})",
        )
    value = sample.fields[field]
    if isinstance(value, list):
        return _scripted_step(value, messages, (dataset_path, sample.line, field, sample.id))
    return str(value)


def answer(request: "ModelRequest") -> ModelResponse:
    scripted = request.answer
    assert scripted is not None, "a scripted request carries its answer"
    if isinstance(scripted, str):
        text, calls = scripted, []
    else:
        # Ids unique in the conversation: the turn and the call's place in it.
        turn = sum(1 for m in request.messages if m["role"] == "assistant")
        text = scripted["text"]
        calls = [
            {"id": f"call_{turn}_{i}", "name": c["name"], "arguments": c["arguments"]}
            for i, c in enumerate(scripted["tool_calls"])
        ]
    return ModelResponse(
        text=text,
        tool_calls=calls,
        served_model=request.endpoint.model,
        stop_reason="tool_use" if calls else "stop",
        input_tokens=0,
        output_tokens=0,
        latency_s=0.0,
    )


# It reads no bytes: any image or document, as many as a spec shows (a URL is still read
# once at load, for its hash).
SCRIPTED_MEDIA = MediaLimits(
    image_bytes=1 << 40, images=1 << 20, document_bytes=1 << 40, documents=1 << 20,
    pages=1 << 30,
)  # fmt: skip

PROVIDER = Provider(
    name="scripted",
    media=SCRIPTED_MEDIA,
    adapter=None,
    settings=("answer_field", "text"),
    check=_check,
    key_base_url=lambda model: None,
    planned_base_url="scripted://in-process",
    sample_answer=sample_answer,
    respond=answer,
)
