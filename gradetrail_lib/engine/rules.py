"""The rules among a run's options, each worded once. A message names an option as the
surface it came through spells it: `OptionNames` holds Python's arguments (`run_spec`,
`run_model`), and the CLI passes its flags."""

from dataclasses import dataclass

from gradetrail_lib.errors import UsageError


@dataclass(frozen=True, kw_only=True)
class OptionNames:
    """How a surface spells the options a rule names."""

    batch: str = "batch"
    no_cache: str = "read_cache=False"
    models: str = "models=[...]"
    base_url: str = "base_url"
    max_cost: str = "max_cost"
    until_decided: str = "a release check"
    against: str = "against"
    new_model: str = "models=[NEW]"
    chunk: str = "chunk"
    max_samples: str = "max_samples"


PYTHON_NAMES = OptionNames()


def batch_needs_the_cache(names: OptionNames = PYTHON_NAMES) -> UsageError:
    """A run by batch without a kept cache: the batches are recorded there, so that a
    run killed while they run never pays for them twice."""
    return UsageError(
        f"{names.batch} needs the cache file (it records the batches, so that a run "
        f"killed while they run never pays for them twice): drop {names.no_cache}"
    )


def base_url_needs_models(names: OptionNames = PYTHON_NAMES) -> UsageError:
    """A base URL with no model to give it to: it is the endpoint of the `provider/name`
    models named, which the spec need not list."""
    return UsageError(
        f"{names.base_url} is the endpoint of the models given by {names.models}; "
        f"give {names.models}"
    )


def check_decision(
    *, read_cache: bool, batch_off: bool, new_models: int, folder: bool, names: OptionNames
) -> None:
    """A release check (`until_decided`): one new model of one spec against the
    incumbent, its chunks sent at once and kept in the cache."""
    until = names.until_decided
    if new_models != 1:
        raise UsageError(f"{until} needs exactly one new model ({names.new_model})")
    if folder:
        raise UsageError(f"{until} runs one spec, not a folder")
    if not read_cache:
        raise UsageError(
            f"{until} needs the cache (the cases it sends are kept there, so the run "
            f"directories written once it decides pay nothing again): drop {names.no_cache}"
        )
    if not batch_off:
        raise UsageError(f"{until} sends each chunk at once: drop {names.batch}")
