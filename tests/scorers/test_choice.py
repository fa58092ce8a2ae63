"""The multiple-choice rules (acc, acc_norm, acc_bytes, acc_mutual_info) against lm-eval's
definitions written out with numpy on the same figures."""

import random

import numpy as np
import pytest

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.results.trace import ChoiceFigures, MultipleChoice, TraceRecord
from gradetrail_lib.scorers.base import ScoreFailed, ScoreInput
from gradetrail_lib.scorers.choice import METRICS, ChoiceScorer, Config, choose


def record(choices: MultipleChoice | None) -> TraceRecord:
    return TraceRecord(
        schema_version=2, id="s", repeat=0, messages=[], calls=[], response="x",
        stop_reason="stop", scores={}, outcome="scored", failure_mode=None, choices=choices,
    )  # fmt: skip


def score(metric: str, choices: MultipleChoice | None) -> float:
    scorer = ChoiceScorer(Config(type="choice", name=metric, metric=metric))  # type: ignore[arg-type]
    item = ScoreInput(Sample(id="s", fields={}, line=1), "x", record(choices))
    result = scorer.score(item, [])
    assert not isinstance(result, ScoreFailed)
    return result.value  # type: ignore[union-attr]


def test_each_rule_picks_as_lm_eval_does() -> None:
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(2, 5)
        texts = ["".join(rng.choice("aé€ b") for _ in range(rng.randint(1, 12))) for _ in range(n)]
        lls = [rng.uniform(-40, -1) for _ in range(n)]
        unconditional = [rng.uniform(-40, -1) for _ in range(n)]
        gold = rng.randrange(n)
        choices = MultipleChoice(
            method="loglikelihood", gold=gold, chosen=None,
            options=[ChoiceFigures(text=t, loglikelihood=ll, unconditional=u)
                     for t, ll, u in zip(texts, lls, unconditional, strict=True)],
        )  # fmt: skip
        ll = np.array(lls)
        want = {
            "acc": int(np.argmax(ll)),
            "acc_norm": int(np.argmax(ll / np.array([float(len(t)) for t in texts]))),
            "acc_bytes": int(np.argmax(ll / np.array([float(len(t.encode())) for t in texts]))),
            "acc_mutual_info": int(np.argmax(ll - np.array(unconditional))),
        }
        for metric in METRICS:
            assert choose(choices, metric) == want[metric]  # type: ignore[arg-type]
            assert score(metric, choices) == float(want[metric] == gold)


def test_normalising_by_length_can_change_the_pick() -> None:
    choices = MultipleChoice(
        method="loglikelihood", gold=1, chosen=None,
        options=[ChoiceFigures(text="no", loglikelihood=-4.0),
                 ChoiceFigures(text="a much longer answer", loglikelihood=-10.0)],
    )  # fmt: skip
    assert score("acc", choices) == 0.0
    assert score("acc_norm", choices) == 1.0
    tie = MultipleChoice(
        method="loglikelihood", gold=1, chosen=None,
        options=[ChoiceFigures(text="x", loglikelihood=-2.0),
                 ChoiceFigures(text="y", loglikelihood=-2.0)],
    )  # fmt: skip
    assert score("acc", tie) == 0.0  # a tie goes to the first, as numpy's argmax


def test_generate_has_acc_only_and_a_missing_letter_fails() -> None:
    options = [ChoiceFigures(text="x"), ChoiceFigures(text="y")]
    named = MultipleChoice(method="generate", gold=1, chosen=1, options=options)
    assert score("acc", named) == 1.0
    silent = MultipleChoice(method="generate", gold=1, chosen=None, options=options)
    assert score("acc", silent) == 0.0
    scorer = ChoiceScorer(Config(type="choice", name="n", metric="acc_norm"))
    item = ScoreInput(Sample(id="s", fields={}, line=1), "x", record(named))
    with pytest.raises(ScoreFailed, match="acc_norm needs log-likelihoods"):
        scorer.score(item, [])
    with pytest.raises(ScoreFailed, match="not a multiple-choice sample"):
        scorer.score(ScoreInput(item.sample, "x", record(None)), [])
    no_mi = MultipleChoice(
        method="loglikelihood", gold=0, chosen=0,
        options=[ChoiceFigures(text="x", loglikelihood=-1.0),
                 ChoiceFigures(text="y", loglikelihood=-2.0)],
    )  # fmt: skip
    mi = ChoiceScorer(Config(type="choice", name="m", metric="acc_mutual_info"))
    with pytest.raises(ScoreFailed, match="unconditional_context"):
        mi.score(ScoreInput(item.sample, "x", record(no_mi)), [])
