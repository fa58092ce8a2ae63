"""A multiple-choice sample's figures in its record (`TraceRecord.choices`): each
option's log-likelihood from the answers to its requests, or the letter read from a
generated answer."""

from gradetrail_lib.engine.plan import PlannedSample
from gradetrail_lib.providers.base import ModelResponse
from gradetrail_lib.results.trace import ChoiceFigures, MultipleChoice
from gradetrail_lib.scorers.choice import choose
from gradetrail_lib.spec.choices import read_letter


def by_loglikelihood(item: PlannedSample, answers: list[ModelResponse]) -> MultipleChoice:
    """The figures of a sample whose every request (`item.requests`, in order) was
    answered: the options' own, then their unconditional ones when the spec has them."""
    asked = item.choice_set
    assert asked is not None
    count = len(asked.options)
    conditional, unconditional = answers[:count], answers[count:]
    options = [
        ChoiceFigures(
            text=text,
            loglikelihood=answer.loglikelihood,
            tokens=answer.continuation_tokens,
            is_greedy=answer.is_greedy,
            unconditional=unconditional[i].loglikelihood if unconditional else None,
        )
        for i, (text, answer) in enumerate(zip(asked.options, conditional, strict=True))
    ]
    choices = MultipleChoice(method="loglikelihood", gold=asked.gold, chosen=None, options=options)
    choices.chosen = choose(choices, "acc")
    return choices


def by_letter(item: PlannedSample, text: str) -> MultipleChoice:
    """The figures of a sample answered with a letter (`spec.choices.read_letter`)."""
    asked = item.choice_set
    assert asked is not None
    return MultipleChoice(
        method="generate",
        gold=asked.gold,
        chosen=read_letter(text, len(asked.options)),
        options=[ChoiceFigures(text=t) for t in asked.options],
    )
