"""Multiple-choice accuracy: whether a sample's chosen option is the gold one, by one of
lm-evaluation-harness's rules. Each rule is a pass/fail scorer of its own (named after it
in the spec), so intervals, `compare`, `gate` and repeats read it like any other score.

Over a sample's options with log-likelihoods ll_i (the record's `choices`):

- `acc`: argmax ll_i.
- `acc_norm`: argmax ll_i / len(text_i), the option's length in characters without the
  separator before it (lm-eval's `acc_norm`; lighteval's `loglikelihood_acc_norm_nospace`).
- `acc_bytes`: argmax ll_i / (UTF-8 bytes of text_i).
- `acc_mutual_info`: argmax ll_i - ll_i(unconditional), the log-likelihood given the
  spec's `unconditional_context` subtracted.

Ties go to the first option, as numpy's argmax. A `generate` spec's sample has no
log-likelihoods: its `acc` is whether the letter read from the answer is the gold one,
and the other rules have nothing to score (an error naming the method).
"""

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from gradetrail_lib.results.trace import ChoiceFigures, MultipleChoice
from gradetrail_lib.scorers.base import BaseScorer, CallOutcome, Score, ScoreFailed, ScoreInput
from gradetrail_lib.scorers.registry import ScorerConfig

Metric = Literal["acc", "acc_norm", "acc_bytes", "acc_mutual_info"]
METRICS: tuple[Metric, ...] = ("acc", "acc_norm", "acc_bytes", "acc_mutual_info")


class Config(ScorerConfig):
    type: Literal["choice"]
    metric: Metric = "acc"


def build(config: Config, base_dir: Path) -> "ChoiceScorer":
    return ChoiceScorer(config)


def _length(option: ChoiceFigures) -> float:
    return float(len(option.text))


def _bytes(option: ChoiceFigures) -> float:
    return float(len(option.text.encode("utf-8")))


def _measure(metric: Metric) -> Callable[[ChoiceFigures], float]:
    def raw(option: ChoiceFigures) -> float:
        assert option.loglikelihood is not None
        return option.loglikelihood

    if metric == "acc":
        return raw
    if metric == "acc_mutual_info":

        def mutual(option: ChoiceFigures) -> float:
            if option.unconditional is None:
                raise ScoreFailed(
                    "scorer_error",
                    "acc_mutual_info needs the spec's unconditional_context (none was scored)",
                )
            return raw(option) - option.unconditional

        return mutual
    size = _length if metric == "acc_norm" else _bytes

    def normalised(option: ChoiceFigures) -> float:
        # An empty option has no length to divide by: it can only lose.
        length = size(option)
        return raw(option) / length if length else float("-inf")

    return normalised


def choose(choices: MultipleChoice, metric: Metric) -> int:
    """The index the rule picks (the first of equal ones)."""
    measure = _measure(metric)
    values = [measure(o) for o in choices.options]
    return values.index(max(values))


class ChoiceScorer(BaseScorer):
    type = "choice"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name = config.name

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        choices = item.record.choices
        if choices is None:
            raise ScoreFailed(
                "scorer_error", "not a multiple-choice sample (the spec sets no choices)"
            )
        metric = self.config.metric
        if choices.method == "generate":
            if metric != "acc":
                raise ScoreFailed(
                    "scorer_error", f"{metric} needs log-likelihoods; method generate has none"
                )
            chosen = choices.chosen
            if chosen is None:
                return Score(0.0, f"no option letter in the answer (gold {_letter(choices.gold)})")
        else:
            chosen = choose(choices, metric)
        gold = choices.gold
        if chosen == gold:
            return Score(1.0, f"chose {_letter(chosen)}, the gold option")
        return Score(0.0, f"chose {_letter(chosen)}, gold {_letter(gold)}")


def _letter(index: int) -> str:
    return f"{chr(ord('A') + index)} ({index})" if index < 26 else str(index)
