"""Provider `openai_compatible`: a server speaking Chat Completions at the model's
`base_url` (vLLM, llama.cpp server, Ollama, a proxy...); a key only when one is set. Its
log-likelihoods come from the server's completions endpoint with the prompt's
log-probabilities echoed (`completions_logprobs`, vLLM's format)."""

from gradetrail_lib.providers import completions_logprobs, openai_chat
from gradetrail_lib.providers.registry import Provider, RefusedParam

PROVIDER = Provider(
    media=openai_chat.COMPATIBLE_MEDIA,
    name="openai_compatible",
    adapter=openai_chat.OpenAIChatAdapter(),
    base_url_required=True,
    listing=openai_chat.LISTING,
    loglikelihood_adapter=completions_logprobs.CompletionsLogprobsAdapter(),
    refused_params=(
        RefusedParam("thinking", "the Chat Completions API", "a Chat Completions server"),
    ),
)
