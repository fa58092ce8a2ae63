"""Regex match; the pattern is a template rendered per sample with values regex-escaped."""

import re
from functools import reduce

from gradetrail_lib.dataset import Sample
from gradetrail_lib.render import Template, make_environment
from gradetrail_lib.scorers.base import Score, clip, field_value
from gradetrail_lib.spec import RegexScorer

# Values inserted with {{ }} are literal text, so an answer like "3.5" or "(a)" means itself.
_ENV = make_environment(finalize=lambda value: re.escape(str(value)))


class RegexMatch:
    def __init__(self, config: RegexScorer) -> None:
        self.config = config
        self._template = (
            Template(config.pattern, "scorer.pattern", _ENV) if config.pattern is not None else None
        )
        self._flags = reduce(lambda acc, f: acc | getattr(re, f), config.flags, re.NOFLAG)
        # re's own cache holds 512 patterns; a dataset has one per sample, compiled once
        # for check() before the calls and reused by score() after.
        self._compiled: dict[str, re.Pattern[str]] = {}

    def compile(self, sample: Sample, dataset_path: str = "dataset") -> re.Pattern[str]:
        if self._template is None:
            source = re.escape(str(sample.fields[self.config.field]))
        else:
            source = self._template.render(sample, dataset_path)
        compiled = self._compiled.get(source)
        if compiled is None:
            compiled = self._compiled[source] = re.compile(source, self._flags)
        return compiled

    def check(self, sample: Sample, dataset_path: str) -> None:
        if self.config.pattern is None:
            field_value(sample, self.config.field, dataset_path)
        try:
            self.compile(sample, dataset_path)
        except re.error as exc:
            from gradetrail_lib.errors import InputError

            raise InputError(
                dataset_path,
                sample.line,
                "scorer.pattern",
                f"sample {sample.id!r}: rendered pattern does not compile: {exc}",
            ) from exc

    def score(self, response: str, sample: Sample) -> Score:
        pattern = self.compile(sample)
        find = pattern.fullmatch if self.config.match == "fullmatch" else pattern.search
        found = find(response)
        if found:
            return Score(1.0, f"{self.config.match} found {clip(found.group(0))!r}")
        return Score(0.0, f"no {self.config.match} of /{clip(pattern.pattern)}/")
