"""Options shared by several commands: the statistics' and the cache location."""

import argparse

from gradetrail_lib.analysis.stats.defaults import DEFAULT_CONFIDENCE, PROPORTION_METHODS
from gradetrail_lib.results.trace import DEFAULT_THRESHOLD
from gradetrail_lib.settings import DEFAULTS, cli_settings


def fraction(text: str) -> float:
    """A number strictly between 0 and 1 (a confidence level, an interval's width)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, not {text}")
    return value


confidence_level = fraction


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return value


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {text}")
    return value


def add_stats_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--confidence",
        type=confidence_level,
        default=DEFAULT_CONFIDENCE,
        help=f"confidence level of every interval (default {DEFAULT_CONFIDENCE})",
    )
    parser.add_argument(
        "--method",
        choices=PROPORTION_METHODS,
        default="wilson",
        help="pass-rate interval: Wilson score (default) or exact Clopper-Pearson",
    )
    add_pass_threshold(parser)


def add_pass_threshold(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pass-threshold",
        type=non_negative,
        default=DEFAULT_THRESHOLD,
        help=f"a sample passes when its score is at least this (default {DEFAULT_THRESHOLD:g})",
    )


def add_cache_option(
    parser: argparse.ArgumentParser, help_prefix: str = "the response cache"
) -> None:
    """`--cache PATH|URL`: a DuckDB file or a postgresql:// URL, read as text (a URL is no
    path) and opened by `gradetrail_lib.cache.location`, which refuses other schemes."""
    parser.add_argument(
        "--cache",
        default=cli_settings().database,
        metavar="PATH|URL",
        help=f"{help_prefix}: a DuckDB file or a postgresql://user@host/db URL "
        f"(env GRADETRAIL_CACHE; default {DEFAULTS.database})",
    )
