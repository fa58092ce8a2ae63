"""The plan of a run: every sample checked before anything is called or written, then
rendered and keyed a batch at a time (`RunPlan.batches`), so a run holds one batch.

The run goes plan → responses (`responses`) → scorer calls (`scorer_calls`) → records
(`records`) → run directory (`rundir`); `run` drives it, the same way for the CLI,
`run_spec` and the Dagster assets.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from itertools import islice

from gradetrail_lib.agents.tools import Toolbox
from gradetrail_lib.analysis.retrieval import check_sample as check_retrieval_fields
from gradetrail_lib.analysis.retrieval import retrieval_of
from gradetrail_lib.datasets.dataset import Dataset, Sample
from gradetrail_lib.datasets.registry import load_dataset, load_dataset_ref
from gradetrail_lib.errors import InputError, InputErrors
from gradetrail_lib.providers import registry as providers
from gradetrail_lib.providers.base import ModelRequest
from gradetrail_lib.providers.registry import ModelConfig
from gradetrail_lib.providers.request import RequestBuilder, chat_template_refusal
from gradetrail_lib.results.trace import Retrieval
from gradetrail_lib.scorers import Scorer, build_scorer
from gradetrail_lib.spec.choices import ChoiceRenderer, ChoiceSet
from gradetrail_lib.spec.fewshot import choice_renderer, fewshot_examples
from gradetrail_lib.spec.identity import dataset_media_hash
from gradetrail_lib.spec.prompts import PromptRenderer
from gradetrail_lib.spec.spec import LoadedSpec, loglikelihood_refusal
from gradetrail_lib.spec.yaml_lines import load_yaml

# Items (a sample's repeats each one) a batch: its requests, responses and records are
# what a run holds at once. A batch holds whole samples, with all their repeats.
BATCH_ITEMS = 8192


def batch_samples(repeats: int, items: int = BATCH_ITEMS) -> int:
    """The samples of a batch of about `items` items when each sample is run `repeats`
    times (at least one sample)."""
    return max(1, items // repeats)


@dataclass
class PlannedSample:
    """One item of a batch: a sample, its request (rendered and keyed), its repeat, and
    what the sample says about retrieval (the record's, read from its fields once).
    A multiple-choice sample has its options (`choice_set`); by log-likelihood, one
    request per option (then per option again after the unconditional context, when
    the spec has one), `request` being the first."""

    sample: Sample
    request: ModelRequest
    repeat: int = 0
    retrieval: Retrieval | None = None
    choice_set: ChoiceSet | None = None
    choice_requests: list[ModelRequest] | None = None

    @property
    def requests(self) -> list[ModelRequest]:
        return self.choice_requests if self.choice_requests is not None else [self.request]


@dataclass(frozen=True)
class Batch:
    """One batch of a run's items, their requests rendered and keyed, with the run's
    checked scorers. An agent's plan (a spec with tools) holds its first requests, its
    tools and the builder of the requests that follow."""

    loaded: LoadedSpec
    dataset: Dataset
    model: ModelConfig
    items: list[PlannedSample]
    scorers: list[Scorer]
    builder: RequestBuilder | None = None
    toolbox: Toolbox | None = None

    @property
    def primary_scorer(self) -> str:
        return self.scorers[0].name

    @cached_property
    def unique_requests(self) -> dict[str, ModelRequest]:
        """Each request once, by key (samples that render alike share one request)."""
        unique: dict[str, ModelRequest] = {}
        for item in self.items:
            for request in item.requests:
                unique.setdefault(request.key, request)
        return unique

    @cached_property
    def items_by_key(self) -> dict[str, list[int]]:
        """The positions in `items` of the samples each request answers."""
        positions: dict[str, list[int]] = {}
        for i, item in enumerate(self.items):
            for request in item.requests:
                positions.setdefault(request.key, []).append(i)
        return positions

    def request_keys(self) -> list[str]:
        return list(self.unique_requests)


def load_spec_dataset(loaded: LoadedSpec) -> Dataset:
    """The spec's dataset. Another Dagster asset's (`dataset: {asset: ...}`) is the file
    the Dagster layer wrote its value to (`LoadedSpec.dataset_file`): without one (the
    CLI) it is an error naming the spec."""
    ref = loaded.spec.dataset
    if ref.asset is None:
        return load_dataset_ref(ref, loaded.base_dir)
    if loaded.dataset_file is None:
        raise InputError(
            str(loaded.path), None, "dataset.asset",
            f"{ref.asset!r} is a Dagster asset: its value is read under Dagster (the "
            "spec's `dataset` asset materializes it), not by the CLI; launch the spec's "
            "assets with `dg launch`, or give the rows as a file (`path`)",
        )  # fmt: skip
    return load_dataset(loaded.dataset_file, ref.label, None, ref.id_field or "id")


def build_scorers(loaded: LoadedSpec, model: ModelConfig) -> list[Scorer]:
    """The spec's scorers, each checked against the model under test (a judge must not
    grade itself) and loaded (a Python scorer's function, a judge's prompt)."""
    scorers: list[Scorer] = []
    errors: list[InputError] = []
    spec = loaded.spec
    for config in spec.scorers:
        judge = getattr(config, "model", None)
        if (
            isinstance(judge, ModelConfig)
            and not getattr(config, "force_same_model", False)
            and (judge.provider, judge.name) == (model.provider, model.name)
        ):
            errors.append(
                InputError(
                    str(loaded.path),
                    None,
                    f"{config.where}.model",
                    f"the judge {judge.provider}/{judge.name} is the model under test and would "
                    "grade itself; use another judge, or set force_same_model: true",
                )
            )
            continue
        try:
            scorers.append(build_scorer(config, loaded.base_dir))
        except (OSError, ValueError) as exc:  # a file that went away since the spec loaded
            errors.append(InputError(str(loaded.path), None, config.where, str(exc)))
    if errors:
        raise errors[0] if len(errors) == 1 else InputErrors(errors)
    return scorers


@dataclass(frozen=True)
class RunPlan:
    """A run's plan, every sample checked (its prompt renders, its scorers can score it)
    before any call or write; its requests are rendered batch by batch as the run
    reaches them, so a run holds one batch at a time."""

    loaded: LoadedSpec
    dataset: Dataset
    model: ModelConfig
    scorers: list[Scorer]
    renderer: PromptRenderer
    builder: RequestBuilder
    toolbox: Toolbox | None
    repeats: int
    samples: int
    # A multiple-choice spec's options (by log-likelihood: its requests are theirs).
    choices: ChoiceRenderer | None = None

    @property
    def dataset_hash(self) -> str:
        """The dataset's hash covering the media files its samples show (each sample was
        rendered when the plan checked it, so the renderer has seen them all)."""
        return dataset_media_hash(self.dataset.content_hash, self.renderer.media.digest())

    @property
    def item_count(self) -> int:
        return self.samples * self.repeats

    @property
    def scorer_names(self) -> list[str]:
        return [s.name for s in self.scorers]

    def batches(self, size: int | None = None) -> Iterator[Batch]:
        """The items, `size` samples (with their repeats; default `batch_samples`) at a
        time, in order."""
        size = size or batch_samples(self.repeats)
        samples = iter(self.dataset)
        while chunk := list(islice(samples, size)):
            yield self.batch(chunk)

    def batch(self, samples: list[Sample]) -> Batch:
        label = self.loaded.spec.dataset.label
        items: list[PlannedSample] = []
        for sample in samples:
            if self.choices is not None and self.loaded.spec.by_loglikelihood:
                items.append(self._choice_item(sample, label, self.choices))
                continue
            choice_set = self.choices.render(sample, label) if self.choices is not None else None
            messages, media = self.renderer.render(sample, label)
            retrieval = retrieval_of(sample.fields)
            for repeat in range(self.repeats):
                request = self.builder.build(messages, sample, label, repeat, media)
                items.append(
                    PlannedSample(
                        sample=sample,
                        request=request,
                        repeat=repeat,
                        retrieval=retrieval,
                        choice_set=choice_set,
                    )
                )
        return Batch(
            self.loaded, self.dataset, self.model, items, self.scorers, self.builder, self.toolbox
        )

    def _choice_item(self, sample: Sample, label: str, choices: ChoiceRenderer) -> PlannedSample:
        asked = choices.render(sample, label)
        continuations = [choices.continuation_prefix + text for text in asked.options]
        requests = [
            self.builder.loglikelihood(asked.context, c, turns=asked.turns) for c in continuations
        ]
        unconditional = self.loaded.spec.unconditional_context
        if unconditional is not None:
            requests += [
                self.builder.loglikelihood(unconditional, c, templated=False) for c in continuations
            ]
        return PlannedSample(
            sample=sample,
            request=requests[0],
            retrieval=retrieval_of(sample.fields),
            choice_set=asked,
            choice_requests=requests,
        )


def _check_samples(
    loaded: LoadedSpec,
    dataset: Dataset,
    renderer: PromptRenderer,
    builder: RequestBuilder,
    scorers: list[Scorer],
    toolbox: Toolbox | None = None,
    choices: ChoiceRenderer | None = None,
) -> int:
    """Every sample of the dataset read and checked: it renders, its request builds, every
    scorer can score it; the number of samples. Raises every input error found (the first
    20), before anything is called or written."""
    label = loaded.spec.dataset.label
    errors: list[InputError] = []
    count = 0
    for sample in dataset.validated():
        try:
            if choices is not None:
                choices.render(sample, label)
            messages = [] if loaded.spec.by_loglikelihood else renderer.messages(sample, label)
            builder.check(sample, label)
            builder.check_media(messages, sample, label)
            if toolbox is not None:
                toolbox.check(sample, label)
            for scorer in scorers:
                scorer.check(sample, messages, label)
            check_retrieval_fields(sample, label)
        except InputError as exc:
            errors.append(exc)
            continue
        count += 1
    if errors:
        raise errors[0] if len(errors) == 1 else InputErrors(errors[:20])
    return count


def plan(
    loaded: LoadedSpec,
    model: ModelConfig,
    dataset: Dataset | None = None,
    *,
    repeats: int | None = None,
) -> RunPlan:
    """Check that every sample renders and can be scored; raises InputError(s).
    `repeats` (default: the spec's) makes each sample that many items, repeat by repeat."""
    if model.asset is not None:
        raise asset_model_refusal(loaded, model)
    repeats = repeats or loaded.spec.repeats
    scorers = build_scorers(loaded, model)
    if dataset is None:
        dataset = load_spec_dataset(loaded)
    spec = loaded.spec
    toolbox = Toolbox(spec.tools, loaded.base_dir) if spec.tools is not None else None
    check_kinds(loaded, model)
    fewshot = fewshot_examples(loaded, dataset)
    choices = choice_renderer(spec, fewshot)
    generated = choices if choices is not None and not spec.by_loglikelihood else None
    renderer = PromptRenderer(spec, fewshot, generated, media_dir=dataset.path.parent)
    try:
        builder = RequestBuilder(
            model,
            spec.params,
            tools=toolbox.definitions() if toolbox is not None else None,
            tool_choice=spec.tool_choice,
            shared_messages=renderer.shared_messages,
            chat_template=bool(spec.chat_template),
        )
    except ValueError as exc:  # the model has no chat template, or it cannot be read
        raise InputError(
            str(loaded.path), _spec_line(loaded, "chat_template"), "chat_template", str(exc)
        ) from None
    samples = _check_samples(loaded, dataset, renderer, builder, scorers, toolbox, choices)
    return RunPlan(
        loaded, dataset, model, scorers, renderer, builder, toolbox, repeats, samples, choices
    )


def entry_field(loaded: LoadedSpec, model: ModelConfig) -> str:
    """The field of a spec's model entry with `asset:`, as errors name it (`models[1].asset`,
    or `model.asset` for the one `model:`)."""
    if loaded.spec.model is not None:
        return "model.asset"
    names = [m.name for m in loaded.spec.models]
    return f"models[{names.index(model.name)}].asset" if model.name in names else "asset"


def asset_model_refusal(loaded: LoadedSpec, model: ModelConfig) -> InputError:
    """A model whose name and endpoint are another Dagster asset's value (`asset:`) is
    resolved by the Dagster layer before it is planned; planned as it is (the CLI), it is
    an error naming the spec's entry."""
    return InputError(
        str(loaded.path), None, entry_field(loaded, model),
        f"model {model.name!r} is the value of Dagster asset {model.asset!r}, read under "
        "Dagster (the spec's `model` asset resolves it), not by the CLI; run the spec's "
        "other models (--model NAME), or launch its assets with `dg launch`",
    )  # fmt: skip


def check_kinds(loaded: LoadedSpec, model: ModelConfig) -> None:
    """A model named beside the spec (`--models`) is held to the spec's request kind (and
    chat template) too."""
    provider = providers.get(model.provider)
    if loaded.spec.by_loglikelihood and "loglikelihood" not in provider.kinds:
        raise InputError(str(loaded.path), None, "models", loglikelihood_refusal(model.provider))
    if loaded.spec.chat_template and provider.chat_template is None:
        raise InputError(
            str(loaded.path), _spec_line(loaded, "chat_template"), "chat_template",
            chat_template_refusal(model.provider),
        )  # fmt: skip


def _spec_line(loaded: LoadedSpec, field: str) -> int | None:
    """The line of a top-level field in the spec's file (None when it is not there: a
    catalogue entry given a chat template by another file)."""
    try:
        doc = load_yaml(loaded.path)
    except InputError:  # a spec given in memory (`run_spec`) has no file to read
        return None
    return doc.line_of((field,)) if doc.has((field,)) else None
