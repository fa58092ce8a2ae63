"""A spec's few-shot examples and multiple-choice renderer, built from the loaded spec
(`spec.choices` says what they render)."""

from gradetrail_lib.datasets.dataset import Dataset
from gradetrail_lib.datasets.registry import load_dataset_ref
from gradetrail_lib.spec.choices import ChoiceRenderer, FewShot
from gradetrail_lib.spec.spec import LoadedSpec, Spec

DEFAULT_CHOICE_PREFIX = " "


def fewshot_examples(loaded: LoadedSpec, dataset: Dataset) -> FewShot | None:
    """The spec's few-shot examples: its `fewshot.source`'s samples, or its own
    dataset's (`dataset`, already loaded)."""
    config = loaded.spec.fewshot
    if config is None:
        return None
    if config.source is None:
        samples, where = dataset.samples, loaded.spec.dataset.label
    else:
        samples = load_dataset_ref(config.source, loaded.base_dir).samples
        where = config.source.label
    return FewShot(
        samples,
        where,
        k=config.k,
        seed=config.seed,
        separator=config.separator,
        multiturn=bool(config.multiturn),
    )


def choice_renderer(spec: Spec, fewshot: FewShot | None) -> ChoiceRenderer | None:
    if spec.choices is None:
        return None
    assert spec.gold is not None and spec.prompt is not None, "checked when the spec loaded"
    prefix = spec.choice_prefix if spec.choice_prefix is not None else DEFAULT_CHOICE_PREFIX
    by_letter = not spec.by_loglikelihood
    # lm-eval's `--apply_chat_template` drops its target delimiter: the option follows the
    # assistant's turn opening directly (a prefix the spec sets is kept).
    continuation = "" if spec.chat_template and spec.choice_prefix is None else None
    return ChoiceRenderer(
        spec.prompt, spec.choices, spec.gold, prefix, fewshot, by_letter, continuation
    )
