"""Regex match; the pattern is a template rendered per sample with values regex-escaped.

A dataset has one pattern per sample, and compiling one is slow in Python's `re` (its
parser is pure Python): most of a re-score's time (docs/performance.md). The commonest
pattern, a fixed text around an inserted answer ("Answer: {{ answer }}"), is a plain
literal once rendered, and a literal needs no regex engine: with no IGNORECASE (whose
Unicode case folding a string comparison would not reproduce) or VERBOSE flag, its
leftmost match is `str.find` and its full match is equality. Anything else, or any
doubt, goes to `re`. Tests hold the two paths to the same results.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.providers.base import Message
from gradetrail_lib.scorers.base import (
    BaseScorer,
    CallOutcome,
    Score,
    ScoreInput,
    clip,
    field_value,
)
from gradetrail_lib.scorers.registry import ScorerConfig
from gradetrail_lib.templating import Template, check_template, make_environment

RegexFlag = Literal["IGNORECASE", "MULTILINE", "DOTALL", "VERBOSE", "ASCII"]


class Config(ScorerConfig):
    """`pattern` is a jinja2 template rendered per sample; inserted values are regex-escaped."""

    type: Literal["regex"]
    field: str = "answer"
    pattern: str | None = Field(default=None, description="Defaults to the escaped field value.")
    flags: list[RegexFlag] = Field(default_factory=list)
    match: Literal["search", "fullmatch"] = "search"

    # Field validators (not model validators) so an error names `scorer.pattern` and its line.
    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, pattern: str | None) -> str | None:
        return None if pattern is None else check_template(pattern)


def build(config: Config, base_dir: Path) -> "RegexMatch":
    return RegexMatch(config)


# Values inserted with {{ }} are literal text, so an answer like "3.5" or "(a)" means itself.
_ENV = make_environment(finalize=lambda value: re.escape(str(value)))

# Outside a character class and without VERBOSE these are the only characters with a
# meaning of their own; "\" followed by a letter or digit is a class, anchor or reference.
_SPECIAL = frozenset(".^$*+?{}[]|()")
_SPECIAL_OR_ESCAPE = re.compile("[" + re.escape("".join(sorted(_SPECIAL)) + "\\") + "]")
_LITERAL_UNSAFE_FLAGS = re.IGNORECASE | re.VERBOSE


def literal_text(source: str) -> str | None:
    """The text a pattern matches when it is a plain literal (escapes undone), else None."""
    if _SPECIAL_OR_ESCAPE.search(source) is None:
        return source
    out: list[str] = []
    chars = iter(source)
    for c in chars:
        if c == "\\":
            escaped = next(chars, None)
            if escaped is None or escaped.isalnum() or not escaped.isascii():
                return None
            out.append(escaped)
        elif c in _SPECIAL:
            return None
        else:
            out.append(c)
    return "".join(out)


# Not frozen, for speed: one per sample.
@dataclass
class CompiledPattern:
    """A rendered pattern, matched by `re` or, when it is a plain literal, as text."""

    source: str
    regex: re.Pattern[str] | None
    literal: str | None

    def find(self, text: str, *, full: bool) -> str | None:
        """The matched text (leftmost, or the whole text when `full`), or None."""
        if self.literal is not None:
            if full:
                return text if text == self.literal else None
            return self.literal if self.literal in text else None
        assert self.regex is not None
        found = self.regex.fullmatch(text) if full else self.regex.search(text)
        return found.group(0) if found else None


def compile_pattern(source: str, flags: re.RegexFlag) -> CompiledPattern:
    literal = None if flags & _LITERAL_UNSAFE_FLAGS else literal_text(source)
    if literal is not None:
        return CompiledPattern(source, None, literal)
    return CompiledPattern(source, re.compile(source, flags), None)


class RegexMatch(BaseScorer):
    type = "regex"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name = config.name
        self._template = (
            Template(config.pattern, f"{config.where}.pattern", _ENV)
            if config.pattern is not None
            else None
        )
        self._flags = reduce(lambda acc, f: acc | getattr(re, f), config.flags, re.NOFLAG)
        # re's own cache holds 512 patterns; a dataset has one per sample, rendered and
        # compiled once for check() before the calls and reused by score() after.
        self._compiled: dict[str, CompiledPattern] = {}
        self._by_sample: dict[tuple[str, int], CompiledPattern] = {}

    def compile(self, sample: Sample, dataset_path: str = "dataset") -> CompiledPattern:
        known = self._by_sample.get((sample.id, sample.line))
        if known is not None:
            return known
        if self._template is None:
            source = re.escape(str(sample.fields[self.config.field]))
        else:
            source = self._template.render(sample, dataset_path)
        compiled = self._compiled.get(source)
        if compiled is None:
            compiled = self._compiled[source] = compile_pattern(source, self._flags)
        self._by_sample[(sample.id, sample.line)] = compiled
        return compiled

    def check(self, sample: Sample, messages: list[Message], dataset_path: str) -> None:
        if self.config.pattern is None:
            field_value(sample, self.config.field, dataset_path)
        try:
            self.compile(sample, dataset_path)
        except re.error as exc:
            from gradetrail_lib.errors import InputError

            raise InputError(
                dataset_path,
                sample.line,
                f"{self.config.where}.pattern",
                f"sample {sample.id!r}: rendered pattern does not compile: {exc}",
            ) from exc

    def score(self, item: ScoreInput, calls: Sequence[CallOutcome | None]) -> Score:
        response = item.response
        pattern = self.compile(item.sample)
        found = pattern.find(response, full=self.config.match == "fullmatch")
        if found is not None:
            return Score(1.0, f"{self.config.match} found {clip(found)!r}")
        return Score(0.0, f"no {self.config.match} of /{clip(pattern.source)}/")
