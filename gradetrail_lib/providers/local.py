"""Provider `local`: a model whose weights ship in a Python package, served by a
llama.cpp server that gradetrail starts on a free loopback port (see `local_server`).
Its log-likelihoods are computed in-process (`local_loglikelihood`), no server started."""

from gradetrail_lib.providers import local_loglikelihood, local_server, openai_chat
from gradetrail_lib.providers.registry import ModelConfig, Provider, RefusedParam


def _check(model: ModelConfig) -> None:
    if model.base_url is not None:
        raise ValueError("local models start their own server; remove base_url")
    if model.name not in local_server.LOCAL_MODELS:
        known = ", ".join(sorted(local_server.LOCAL_MODELS))
        raise ValueError(f"unknown local model {model.name!r} (known: {known})")


def _identity(model: ModelConfig) -> str:
    # The server's port is random: the key holds the weights' identity instead.
    return local_server.model_identity(model.name)


PROVIDER = Provider(
    name="local",
    adapter=openai_chat.OpenAIChatAdapter(),
    # llama.cpp's server answers one request at a time; more would only queue there and
    # make the measured latencies lie.
    concurrency=1,
    local_model=True,
    check=_check,
    key_base_url=_identity,
    planned_base_url="local://",
    serve=local_server.shared_local_server,
    score_loglikelihood=local_loglikelihood.answer,
    chat_template=local_loglikelihood.chat_template,
    refused_params=(
        RefusedParam("thinking", "the local model's server", "the local model"),
        RefusedParam("reasoning_effort", "the local model's server", "the local model"),
    ),
)
