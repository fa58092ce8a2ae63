"""The local model's log-likelihoods against a direct llama-cpp-python computation: each
text evaluated from scratch by a model of its own, its continuation's tokens scored from
the logits by hand."""

from collections.abc import Iterator

import pytest
from scipy.special import logsumexp

from tests.conftest import needs_local_model

pytestmark = needs_local_model

CONTEXT = "Question: Which technology was developed most recently?\nAnswer:"
CHOICES = [" cellular telephone", " television", " refrigerator", " airplane"]


@pytest.fixture(scope="module")
def direct() -> Iterator[object]:
    """A second model, used from scratch for every text (the reference)."""
    from llama_cpp import Llama

    from gradetrail_lib.providers.local_server import locate_model_file

    llm = Llama(
        model_path=str(locate_model_file("smollm2-135m")),
        logits_all=True,
        n_ctx=512,
        # One thread for prompts too (llama-cpp-python's default is a thread per core):
        # threads that wait for each other spin, and on a busy machine two were twice as
        # slow as one, as the evaluator's own comment says.
        n_threads=1,
        n_threads_batch=1,
        verbose=False,
    )
    yield llm
    llm.close()


def reference(
    llm, context: str, continuation: str, *, special: bool = False
) -> tuple[float, int, bool]:
    """lm-eval's `_encode_pair` split and sum, written out: trailing whitespace moved to
    the continuation, the whole text tokenized, the continuation after the context's
    tokens; every row a fresh log-softmax. `special`: special tokens' texts are read as
    those tokens (a chat template's text, as a Hugging Face tokenizer reads it)."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = llm.tokenize((context + continuation).encode(), add_bos=False, special=special)
    ctx = llm.tokenize(context.encode(), add_bos=False, special=special)
    start = 0
    while start < min(len(ctx), len(whole)) and ctx[start] == whole[start]:
        start += 1
    if start == 0:
        whole, start = [llm.token_bos(), *whole], 1
    llm.reset()
    llm.eval(whole)
    total, greedy = 0.0, True
    for i in range(start, len(whole)):
        row = llm.scores[i - 1].astype("float64")
        total += float(row[whole[i]] - logsumexp(row))
        greedy = greedy and int(row.argmax()) == whole[i]
    return total, len(whole) - start, greedy


def test_matches_a_direct_computation(direct) -> None:
    from gradetrail_lib.providers.local_loglikelihood import evaluator

    model = evaluator("smollm2-135m")
    cases = [(CONTEXT, c) for c in CHOICES] + [
        ("The capital of France is ", "Paris"),  # trailing space moves to the continuation
        ("", " hello there"),  # empty context: the BOS token before it
        ("Ein Käse kostet", " 3 €"),  # non-ASCII bytes
        (CONTEXT, " television"),  # the same text again: its rows are reused as they are
    ]
    for context, continuation in cases:
        got = model.score(context, continuation)
        want, tokens, greedy = reference(direct, context, continuation)
        assert abs(got.loglikelihood - want) < 1e-3, (context, continuation, got, want)
        assert got.tokens == tokens
        assert got.is_greedy == greedy
        assert got.loglikelihood < 0


def test_a_greedy_continuation_is_marked_greedy(direct) -> None:
    from gradetrail_lib.providers.local_loglikelihood import evaluator

    model = evaluator("smollm2-135m")
    # The model's own greedy next tokens after a context are, by construction, greedy.
    context = "1, 2, 3, 4, 5,"
    tokens = direct.tokenize(context.encode(), add_bos=False)
    direct.reset()
    direct.eval(tokens)
    row = list(direct.scores[len(tokens) - 1])
    best = row.index(max(row))
    text = direct.detokenize([best]).decode()
    scored = model.score(context, text)
    if scored.tokens == 1:  # the text re-tokenizes as that one token
        assert scored.is_greedy
    assert not model.score(context, " banana").is_greedy


def test_a_join_that_merges_tokens_scores_the_whole_texts_tokens(direct) -> None:
    from gradetrail_lib.providers.local_loglikelihood import evaluator, split_tokens

    model = evaluator("smollm2-135m")
    # "wor" + "ld": the whole text's tokens do not begin with the context's own.
    context, continuation = "Hello wor", "ld peace"
    ctx = model.tokenize(context)
    whole, start = split_tokens(model.tokenize, context, continuation, model.prefix_token)
    assert whole[: len(ctx)] != ctx, "the join should merge a token here"
    assert start < len(ctx)
    assert whole == model.tokenize(context + continuation)
    got = model.score(context, continuation)
    want, tokens, _ = reference(direct, context, continuation)
    assert got.tokens == tokens == len(whole) - start
    assert abs(got.loglikelihood - want) < 1e-3


def test_order_of_requests_does_not_change_a_figure() -> None:
    """The KV cache keeps the last text; whatever came before, each figure is the same."""
    from gradetrail_lib.providers.local_loglikelihood import evaluator

    model = evaluator("smollm2-135m")
    forward = [model.score(CONTEXT, c).loglikelihood for c in CHOICES]
    model.score("Something else entirely, to evict the context.", " yes")
    backward = [model.score(CONTEXT, c).loglikelihood for c in reversed(CHOICES)]
    for a, b in zip(forward, reversed(backward), strict=True):
        assert abs(a - b) < 1e-3


def test_rows_held_without_their_logits_are_evaluated_again(direct) -> None:
    """A context's own rows are not computed; a later text whose continuation starts
    inside that held context (its tokens already in the KV cache) has them computed
    rather than read stale, and the text after it reuses what is valid."""
    from gradetrail_lib.providers.local_loglikelihood import evaluator

    model = evaluator("smollm2-135m")
    cases = [
        (CONTEXT + " cellular", " telephone"),  # the rows of CONTEXT's tokens: none
        (CONTEXT, " cellular telephone"),  # needs them, its tokens all held
        (CONTEXT, " television"),  # rows from the context's last token: all valid now
        ("Question:", " Which technology"),  # a continuation inside the held text again
    ]
    for context, continuation in cases:
        got = model.score(context, continuation)
        want, tokens, greedy = reference(direct, context, continuation)
        assert abs(got.loglikelihood - want) < 1e-3, (context, continuation, got, want)
        assert (got.tokens, got.is_greedy) == (tokens, greedy)


def test_too_long_a_text_is_refused() -> None:
    from gradetrail_lib.providers.base import ProviderError
    from gradetrail_lib.providers.local_loglikelihood import evaluator

    model = evaluator("smollm2-135m")
    with pytest.raises(ProviderError, match="more than the local model's"):
        model.score("word " * 3000, " end")
    with pytest.raises(ProviderError, match="needs a continuation"):
        model.score(CONTEXT, "")


# SmolLM2-135M-Instruct's template (its GGUF's `tokenizer.chat_template`), rendered by hand:
# its default system turn, the context as the user's turn, the assistant's turn opening.
TEMPLATED = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
)


def test_a_chat_templated_request_matches_a_direct_computation(direct) -> None:
    """With `chat_template`, the request's context is the GGUF's template around the
    prompt and its log-likelihood is the templated text's, its special tokens read as
    tokens, the option after the assistant's turn opening (lm-eval's empty delimiter)."""
    import hashlib

    from gradetrail_lib.config import Params
    from gradetrail_lib.providers.local_loglikelihood import answer
    from gradetrail_lib.providers.registry import ModelConfig
    from gradetrail_lib.providers.request import RequestBuilder

    model = ModelConfig(provider="local", name="smollm2-135m")
    builder = RequestBuilder(model, Params(), chat_template=True)
    template = builder.chat_template
    assert template is not None
    gguf = direct.metadata["tokenizer.chat_template"]
    assert template.sha256 == hashlib.sha256(gguf.encode()).hexdigest()
    start = direct.tokenize(b"<|im_start|>", add_bos=False, special=True)
    assert start == [direct.token_bos()]  # one special token, not its spelling
    for i, option in enumerate(c.strip() for c in CHOICES):
        request = builder.loglikelihood(CONTEXT, option)
        assert request.context == TEMPLATED.format(CONTEXT) and request.chat_template
        got = answer(request)
        want, tokens, greedy = reference(direct, request.context, option, special=True)
        assert abs(got.loglikelihood - want) < 1e-3, (option, got, want)
        assert (got.continuation_tokens, got.is_greedy) == (tokens, greedy)
        # Read as plain text, the same characters give another figure. Shown on one
        # option: spelled out, the special tokens make it the longest text evaluated here.
        if i == 0:
            plain, _, _ = reference(direct, request.context, option)
            assert abs(plain - want) > 0.1
