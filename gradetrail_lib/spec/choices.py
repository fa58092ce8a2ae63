"""Multiple choice and few-shot prompts: what a sample's options, gold option and context
are, rendered from its fields.

`choices:` is one Jinja expression giving a list of texts (`"{{ choices.text }}"`) or a
list of templates, one per option (`["{{ sol1 }}", "{{ sol2 }}"]`). `gold:` is one
expression giving the gold option: an index from 0 (an integer, or a text of digits), or
the text of one of the options.

By log-likelihood, option i is the continuation `choice_prefix + text_i` after the
context (the rendered `prompt`). By generation, the model is asked to answer with a
letter: the prompt, then one line per option (`A. text`), then `ANSWER_LINE`; the letter
is read from its answer by `read_letter`.

Few-shot (`fewshot: {k, source, seed, separator}`): k examples from `source` (a dataset,
by default the spec's own), chosen by a generator seeded with the seed and the sample's
id (so the same sample gets the same examples in any order of the run, and never
itself), each rendered by the same templates with its answer (the gold option; by
generation, its lettered question and the gold letter; or the `answer` template),
joined by the separator before the sample's own context.
"""

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.templating import Template, make_environment

# The line after the options when the model answers with a letter.
ANSWER_LINE = "Answer with the letter of the correct option only."
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

_ONE_EXPRESSION = re.compile(r"^\s*\{\{(.*)\}\}\s*$", re.DOTALL)


def expression_source(template: str) -> str | None:
    """The expression of a template that is exactly one `{{ expression }}`, else None."""
    match = _ONE_EXPRESSION.match(template)
    if match is None or "{{" in match.group(1) or "}}" in match.group(1):
        return None
    return match.group(1).strip()


def check_expression(template: str) -> str:
    source = expression_source(template)
    if source is None:
        raise ValueError("write one expression, as in '{{ label }}'")
    try:
        make_environment().compile_expression(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"expression syntax error: {exc.message}") from exc
    return template


def lettered(context: str, options: Sequence[str]) -> str:
    """The question for a model answering with a letter."""
    lines = [f"{LETTERS[i]}. {text}" for i, text in enumerate(options)]
    return "\n".join([context, *lines, ANSWER_LINE])


# An answer's letter: after "answer" ("Answer: B", "the answer is (B)"), else the first
# letter standing alone at the start of a line ("B", "B.", "(B) because ...").
_AFTER_ANSWER = re.compile(r"answer\s*(?:is\s*)?[:\-]?\s*\(?([A-Z])\b", re.IGNORECASE)
_LINE_START = re.compile(r"^\s*\(?([A-Z])(?:[).:]|\s|$)", re.MULTILINE)


def read_letter(text: str, options: int) -> int | None:
    """The option an answer names by its letter (see the patterns above), or None."""
    for pattern in (_AFTER_ANSWER, _LINE_START):
        for match in pattern.finditer(text):
            index = LETTERS.find(match.group(1).upper())
            if 0 <= index < options:
                return index
    return None


@dataclass(frozen=True)
class ChoiceSet:
    """A sample's rendered multiple choice: the context and each option's text. With
    few-shot examples as turns of a chat (`fewshot.multiturn`), `turns` holds each
    example's context and gold option, and `context` is the sample's own."""

    context: str
    options: list[str]
    gold: int
    turns: tuple[tuple[str, str], ...] = ()


class _Expression:
    def __init__(self, template: str, what: str) -> None:
        source = expression_source(template)
        assert source is not None, "checked when the spec loaded"
        env = make_environment()
        self._evaluate = env.compile_expression(source, undefined_to_none=False)
        self._what = what

    def __call__(self, sample: Sample, where: str) -> Any:
        try:
            return self._evaluate(**sample.fields)
        except jinja2.UndefinedError as exc:
            raise InputError(
                where, sample.line, self._what, f"sample {sample.id!r}: {exc.message}"
            ) from exc
        except Exception as exc:  # an expression's own error (a method on the wrong type)
            raise InputError(
                where, sample.line, self._what, f"sample {sample.id!r}: {type(exc).__name__}: {exc}"
            ) from exc


class ChoiceRenderer:
    """Renders each sample's `ChoiceSet` (and its few-shot context)."""

    def __init__(
        self,
        prompt: str,
        choices: str | list[str],
        gold: str,
        choice_prefix: str,
        fewshot: "FewShot | None" = None,
        by_letter: bool = False,
        continuation_prefix: str | None = None,
    ) -> None:
        """`by_letter`: the model answers with a letter (`method: generate`), so each
        few-shot example is asked with lettered options and answered with its letter.
        `continuation_prefix`: before each option in its continuation, when it is not
        `choice_prefix` (which stays between a few-shot example and its answer): after a
        chat template's assistant turn opening, lm-eval puts nothing there."""
        self._prompt = Template(prompt, "prompt")
        self._options: Callable[[Sample, str], Any]
        if isinstance(choices, str):
            self._options = _Expression(choices, "choices")
        else:
            templates = [Template(t, f"choices[{i}]") for i, t in enumerate(choices)]
            self._options = lambda sample, where: [t.render(sample, where) for t in templates]
        self._gold = _Expression(gold, "gold")
        self.prefix = choice_prefix
        self.continuation_prefix = (
            choice_prefix if continuation_prefix is None else continuation_prefix
        )
        self.fewshot = fewshot
        self.by_letter = by_letter

    def bare(self, sample: Sample, where: str) -> ChoiceSet:
        """The sample's choices without few-shot examples."""
        options = self._options(sample, where)
        if (
            not isinstance(options, list | tuple)
            or len(options) < 2
            or not all(isinstance(o, str) for o in options)
        ):
            raise InputError(
                where,
                sample.line,
                "choices",
                f"sample {sample.id!r}: choices should be a list of two or more texts, "
                f"not {_shown(options)}",
            )
        if len(options) > len(LETTERS):
            raise InputError(
                where, sample.line, "choices", f"sample {sample.id!r}: more than 26 options"
            )
        gold = _gold_index(self._gold(sample, where), list(options))
        if gold is None:
            value = self._gold(sample, where)
            raise InputError(
                where,
                sample.line,
                "gold",
                f"sample {sample.id!r}: gold {_shown(value)} is neither an option's index "
                f"(0 to {len(options) - 1}) nor one of the options",
            )
        return ChoiceSet(self._prompt.render(sample, where), list(options), gold)

    def render(self, sample: Sample, where: str) -> ChoiceSet:
        bare = self.bare(sample, where)
        if self.fewshot is None:
            return bare
        examples = [self.bare(e, self.fewshot.where) for e in self.fewshot.pick(sample)]
        if self.fewshot.multiturn:
            turns = tuple((s.context, s.options[s.gold]) for s in examples)
            return ChoiceSet(bare.context, bare.options, bare.gold, turns)
        if self.by_letter:
            shots = [f"{lettered(s.context, s.options)}\n{LETTERS[s.gold]}" for s in examples]
        else:
            shots = [s.context + self.prefix + s.options[s.gold] for s in examples]
        return ChoiceSet(self.fewshot.join(shots, bare.context), bare.options, bare.gold)


def _gold_index(value: Any, options: list[str]) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < len(options) else None
    if isinstance(value, str):
        if value in options:
            return options.index(value)
        if value.strip().isdigit():
            return _gold_index(int(value.strip()), options)
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


class FewShot:
    """The examples of few-shot prompts, from a dataset's samples (see the module's
    docstring)."""

    def __init__(
        self,
        samples: list[Sample],
        where: str,
        *,
        k: int,
        seed: int,
        separator: str,
        multiturn: bool = False,
    ) -> None:
        """`multiturn`: each example is a user turn and an assistant turn of a chat (a
        multiple-choice spec with `chat_template`), not text before the prompt."""
        self.samples = samples
        self.where = where
        self.k = k
        self.seed = seed
        self.separator = separator
        self.multiturn = multiturn

    def pick(self, sample: Sample) -> list[Sample]:
        """k examples for `sample`, never itself (by id); the same ones every time."""
        pool = [s for s in self.samples if s.id != sample.id]
        if len(pool) < self.k:
            raise InputError(
                self.where,
                None,
                "fewshot.k",
                f"{self.k} examples asked for sample {sample.id!r}, {len(pool)} available",
            )
        # A str seed is hashed by sha512: the same examples on every machine and run.
        rng = random.Random(f"{self.seed}:{sample.id}")
        return rng.sample(pool, self.k)

    def join(self, shots: list[str], context: str) -> str:
        return self.separator.join([*shots, context])


def fewshot_prompt(
    fewshot: FewShot, prompt: Template, answer: Template
) -> Callable[[Sample, str], str]:
    """A `prompt` with few-shot examples before it, each its prompt then its answer."""

    def render(sample: Sample, where: str) -> str:
        shots = [
            prompt.render(example, fewshot.where) + answer.render(example, fewshot.where)
            for example in fewshot.pick(sample)
        ]
        return fewshot.join(shots, prompt.render(sample, where))

    return render
