"""Provider `scripted`: answers in-process with the text its request carries (a sample
field or a fixed text, set when the request was built). No network, usage and latency
zero: for trying scorers and judges before paying for a model, and for tests."""

from gradetrail_lib.providers.base import ModelResponse
from gradetrail_lib.providers.request import ModelRequest


def answer(request: ModelRequest) -> ModelResponse:
    assert request.answer is not None, "a scripted request carries its answer"
    return ModelResponse(
        text=request.answer,
        served_model=request.endpoint.model,
        stop_reason="stop",
        input_tokens=0,
        output_tokens=0,
        latency_s=0.0,
    )
