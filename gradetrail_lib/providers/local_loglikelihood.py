"""Log-likelihoods from the local model, in-process through llama-cpp-python.

A request asks for the log-probability of `continuation` after `context`. The text is split
as lm-evaluation-harness splits it (`_encode_pair`): the context's trailing whitespace moves
to the front of the continuation, the whole text is tokenized at once, and the
continuation's tokens are those after the context's own tokens. When the join merges the
context's last token with the continuation's first (the whole text's tokens do not begin
with the context's), the continuation starts after the longest prefix the two share, so
every token scored is one the whole text really has and the context keeps only whole
tokens of its own. An empty context is preceded by the model's BOS token (EOS when it has
none), as lm-eval's prefix token, so the first token has a prediction to be scored by.

The model is loaded once per process with `logits_all=True`, so after `Llama.eval(tokens)`
row `i` of `Llama.scores` is the logits predicting token `i + 1` (the continuation's rows
only: a context's own rows are not computed, `Evaluator._evaluate`). The KV cache keeps the
last text evaluated: a request sharing a prefix with it (a sample's choices share their
context) evaluates only the tokens after that prefix. (llama-cpp-python's own server
scores each prompt token with the prediction made after it, one position off; this module
reads the scores in-process, aligned.)

With a chat template (spec `chat_template`, `chat_template` below) the context is the
GGUF's own template rendered around it, by llama-cpp-python's `Jinja2ChatFormatter` (what
its chat completions use): one user turn, then the assistant's turn opening. Such a text
is tokenized with its special tokens' texts read as those tokens (`<|im_start|>` is one
token), as a Hugging Face tokenizer reads lm-eval's templated text.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradetrail_lib.providers import local_server
from gradetrail_lib.providers.base import ChatTemplate, ModelRequest, ModelResponse, ProviderError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from gradetrail_lib.providers.registry import ModelConfig

# Where a GGUF file keeps its default chat template.
TEMPLATE_KEY = "tokenizer.chat_template"

# Tokens the model is loaded for: the longest context + continuation it can score. The
# logits of every position are kept (n_ctx x vocabulary floats: 2048 x 49,152 x 4 bytes,
# about 400 MB for SmolLM2).
N_CTX = 2048
# One thread: llama.cpp's threads spin while they wait for each other, and on a machine
# whose cores are busy with other work two threads were ten times slower than one.
N_THREADS = 1


@dataclass(frozen=True)
class Scored:
    """A continuation's figures: summed log-probability, tokens, all greedy."""

    loglikelihood: float
    tokens: int
    is_greedy: bool
    # Tokens of context + continuation (what the model read).
    total_tokens: int


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def split_tokens(
    tokenize: Any, context: str, continuation: str, prefix_token: int
) -> tuple[list[int], int]:
    """The whole text's tokens and where the continuation starts in them (see the
    module's docstring). `tokenize(text)` gives a text's tokens without special ones."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        continuation = context[-spaces:] + continuation
        context = context[:-spaces]
    whole: list[int] = list(tokenize(context + continuation))
    start = common_prefix(tokenize(context), whole)
    if start == 0:
        return [prefix_token, *whole], 1
    return whole, start


class Evaluator:
    """One local model loaded for log-likelihoods; requests are served one at a time."""

    def __init__(self, name: str, *, n_ctx: int = N_CTX, n_threads: int = N_THREADS) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise local_server.LocalModelUnavailable(
                f"log-likelihoods of local model {name!r} need llama-cpp-python. "
                f"{local_server.INSTALL_HINT}"
            ) from exc
        path = local_server.locate_model_file(name)
        self.name = name
        self.n_ctx = n_ctx
        self.llm = Llama(
            model_path=str(path),
            logits_all=True,
            n_ctx=n_ctx,
            n_batch=512,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            seed=0,
            verbose=False,
        )
        bos = self.llm.token_bos()
        self.prefix_token = bos if bos >= 0 else self.llm.token_eos()
        self._lock = threading.Lock()
        # What the KV cache holds, position by position, and the first position from
        # which `scores` holds the logits of every held position (`_evaluate`).
        self._held: list[int] = []
        self._rows_from = 0

    def tokenize(self, text: str, *, special: bool = False) -> list[int]:
        """`special`: the texts of special tokens are read as those tokens (a chat
        template's text); otherwise as plain text, as any other context is."""
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=special))

    def score(self, context: str, continuation: str, *, special: bool = False) -> Scored:
        import numpy as np

        if not continuation:
            raise ProviderError("fatal", "a log-likelihood request needs a continuation")
        tokenize = functools.partial(self.tokenize, special=special)
        whole, start = split_tokens(tokenize, context, continuation, self.prefix_token)
        if len(whole) > self.n_ctx:
            raise ProviderError(
                "fatal",
                f"context and continuation are {len(whole)} tokens, more than the local "
                f"model's {self.n_ctx}",
            )
        with self._lock:
            self._evaluate(whole, start)
            # Row i predicts token i + 1: the continuation's tokens are predicted by the
            # rows from start - 1 to the last but one.
            rows = np.asarray(self.llm.scores[start - 1 : len(whole) - 1], dtype=np.float64)
        targets = np.asarray(whole[start:])
        peak = rows.max(axis=1, keepdims=True)
        log_norm = np.log(np.exp(rows - peak).sum(axis=1)) + peak[:, 0]
        picked = rows[np.arange(len(targets)), targets]
        return Scored(
            loglikelihood=float((picked - log_norm).sum()),
            tokens=len(targets),
            is_greedy=bool((rows.argmax(axis=1) == targets).all()),
            total_tokens=len(whole),
        )

    def _evaluate(self, whole: list[int], start: int) -> None:
        """Leave in `scores` the rows that predict the continuation's tokens (positions
        start - 1 to the last but one), evaluating only what the KV cache does not hold.
        The context before them is evaluated without its logits: a row is the whole
        vocabulary's (49,152 for SmolLM2), and computing it for every context token took
        a fifth of an evaluation (a 120-token text: 0.80 of the time without them, one
        sitting). llama-cpp-python reads `logits_all` from its `_logits_all` attribute on
        every `eval` (0.3.36, pinned)."""
        # Another llama-cpp-python without the attribute: every row, as before.
        partial = hasattr(self.llm, "_logits_all")
        first_row = start - 1 if partial else 0
        keep = common_prefix(self._held, whole)
        if keep == len(whole):  # the same text again: its last token is evaluated again
            keep -= 1
        if first_row < keep and first_row < self._rows_from:
            # Rows this text needs were held without their logits: evaluate them again.
            keep = first_row
        self.llm.n_tokens = keep
        self._held = self._held[:keep]
        try:
            if keep < first_row:
                self.llm._logits_all = False
                self.llm.eval(whole[keep:first_row])
            if partial:
                self.llm._logits_all = True
            self.llm.eval(whole[max(keep, first_row) :])
        except BaseException:
            # What the KV cache holds is unknown: the next text starts afresh.
            self._held, self._rows_from = [], 0
            if partial:
                self.llm._logits_all = True
            raise
        # The rows before `keep` stay as they were; those from `keep` are this text's,
        # with a gap (no logits) between keep and first_row when the context was new.
        self._rows_from = self._rows_from if keep > first_row else first_row
        self._held = list(whole)


class _Loaded:
    """One evaluator per local model in this process, loaded on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, Evaluator] = {}

    def get(self, name: str) -> Evaluator:
        with self._lock:
            if name not in self._models:
                loaded = self._models[name] = Evaluator(name)
                # Freed before the interpreter tears down the modules llama-cpp-python's
                # own finaliser needs (it fails noisily at exit otherwise).
                atexit.register(loaded.llm.close)
            return self._models[name]


_LOADED = _Loaded()


def evaluator(name: str) -> Evaluator:
    return _LOADED.get(name)


def answer(request: ModelRequest) -> ModelResponse:
    """Provider `local`'s answer to a log-likelihood request."""
    try:
        model = evaluator(request.endpoint.model)
    except local_server.LocalModelUnavailable as exc:
        raise ProviderError("fatal", str(exc)) from None
    scored = model.score(request.context, request.continuation, special=request.chat_template)
    return ModelResponse(
        text=request.continuation,
        served_model=request.endpoint.model,
        stop_reason="stop",
        input_tokens=scored.total_tokens,
        output_tokens=0,
        latency_s=0.0,
        loglikelihood=scored.loglikelihood,
        continuation_tokens=scored.tokens,
        is_greedy=scored.is_greedy,
    )


@contextlib.contextmanager
def _quiet_llama_log() -> Iterator[None]:
    """llama.cpp's log silenced for a moment: a vocabulary-only load warns on stderr that
    its context is longer than the (unloaded) model's, whatever its size, even with
    `verbose=False`. llama-cpp-python's own log callback is put back after."""
    import ctypes

    import llama_cpp

    try:
        from llama_cpp._logger import llama_log_callback
    except ImportError:  # another layout of the library: its noise is only noise
        yield
        return
    global _SILENT_LOG
    if _SILENT_LOG is None:
        _SILENT_LOG = llama_cpp.llama_log_callback(_silent_log)
    llama_cpp.llama_log_set(_SILENT_LOG, ctypes.c_void_p(0))
    try:
        yield
    finally:
        llama_cpp.llama_log_set(llama_log_callback, ctypes.c_void_p(0))


def _silent_log(level: int, text: bytes, user_data: object) -> None:
    del level, text, user_data


# The ctypes callback lives as long as the module (llama.cpp keeps its address).
_SILENT_LOG: Any = None


@functools.cache
def _gguf_template(name: str) -> tuple[str, str, str]:
    """The chat template in local model `name`'s GGUF file, with the texts of its BOS and
    EOS tokens (which a template may name). Read from the vocabulary alone (no weights,
    well under a second), once per process."""
    try:
        from llama_cpp import Llama
    except ImportError:
        raise ValueError(
            f"the chat template of local model {name!r} is read with llama-cpp-python. "
            f"{local_server.INSTALL_HINT}"
        ) from None
    try:
        path = local_server.locate_model_file(name)
    except local_server.LocalModelUnavailable as exc:
        raise ValueError(str(exc)) from None
    with _quiet_llama_log():
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    try:
        template = llm.metadata.get(TEMPLATE_KEY)
        bos, eos = llm.token_bos(), llm.token_eos()
        bos_text = llm.detokenize([bos], special=True).decode("utf-8") if bos >= 0 else ""
        eos_text = llm.detokenize([eos], special=True).decode("utf-8") if eos >= 0 else ""
    finally:
        llm.close()
    if not template:
        raise ValueError(
            f"local model {name!r} has no chat template ({TEMPLATE_KEY}) in {path.name}"
        )
    return template, bos_text, eos_text


def chat_template(model: ModelConfig) -> ChatTemplate:
    """Provider `local`'s chat template for `model`: the GGUF's own, as its chat
    completions apply it (llama-cpp-python's `Jinja2ChatFormatter`)."""
    template, bos_text, eos_text = _gguf_template(model.name)
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    formatter = Jinja2ChatFormatter(
        template=template, eos_token=eos_text, bos_token=bos_text, add_generation_prompt=True
    )

    def render(context: str, turns: Sequence[tuple[str, str]] = ()) -> str:
        messages: list[Any] = []
        for asked, answered in turns:
            messages += [
                {"role": "user", "content": asked},
                {"role": "assistant", "content": answered},
            ]
        messages.append({"role": "user", "content": context})
        return formatter(messages=messages).prompt

    return ChatTemplate(
        source=f"gguf:{TEMPLATE_KEY}",
        sha256=hashlib.sha256(template.encode("utf-8")).hexdigest(),
        render=render,
    )
