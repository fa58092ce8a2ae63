"""Provider `scripted`: answers in-process with the text its request carries (a sample
field or a fixed text, set when the request was built). No network, usage and latency
zero: for trying scorers and judges before paying for a model, and for tests."""

from typing import TYPE_CHECKING

from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.base import ModelResponse
from gradetrail_lib.providers.registry import ModelConfig, Provider

if TYPE_CHECKING:
    from gradetrail_lib.datasets.dataset import Sample
    from gradetrail_lib.providers.base import ModelRequest


def _check(model: ModelConfig) -> None:
    if model.base_url is not None:
        raise ValueError("scripted models answer in-process; remove base_url")
    if (model.answer_field is None) == (model.text is None):
        raise ValueError("scripted needs exactly one of answer_field, text")


def sample_answer(model: ModelConfig, sample: "Sample", dataset_path: str) -> str:
    """What the model says to this sample: its fixed text, or the sample's field."""
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
    return str(sample.fields[field])


def answer(request: "ModelRequest") -> ModelResponse:
    assert request.answer is not None, "a scripted request carries its answer"
    return ModelResponse(
        text=request.answer,
        served_model=request.endpoint.model,
        stop_reason="stop",
        input_tokens=0,
        output_tokens=0,
        latency_s=0.0,
    )


PROVIDER = Provider(
    name="scripted",
    adapter=None,
    settings=("answer_field", "text"),
    check=_check,
    key_base_url=lambda model: None,
    planned_base_url="scripted://in-process",
    sample_answer=sample_answer,
    respond=answer,
)
