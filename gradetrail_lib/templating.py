"""Rendering prompts from sample fields (jinja2, StrictUndefined)."""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
import jinja2.meta

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError


def regex_replace(text: str, pattern: str, replacement: str) -> str:
    """The `regex_replace` filter: Python's `re.sub` (a benchmark's text clean-up, as
    HellaSwag's prompt removes its `[title]` markers)."""
    return re.sub(pattern, replacement, text)


def make_environment(finalize: Callable[[Any], Any] | None = None) -> jinja2.Environment:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=finalize,
    )
    env.filters["regex_replace"] = regex_replace
    return env


@dataclass(frozen=True)
class Slot:
    """A plain `{{ name }}` in a template."""

    name: str


# Tokens that output nothing of their own: a raw block's text comes as data between its tags.
_SILENT = {"whitespace", "comment_begin", "comment", "comment_end", "raw_begin", "raw_end"}
# Names jinja2 reads as constants, not as variables.
_CONSTANTS = {"true", "false", "none", "True", "False", "None"}


def substitution_parts(env: jinja2.Environment, source: str) -> list[str | Slot] | None:
    """The template as text and plain `{{ name }}` slots, or None if it holds anything else.

    Read from jinja2's own tokens (`Environment.lex`), so the text is what jinja2 outputs:
    whitespace control, comments and raw blocks applied, newlines as the environment's.
    """
    tokens = [(kind, value) for _, kind, value in env.lex(source) if kind not in _SILENT]
    parts: list[str | Slot] = []
    while tokens:
        match tokens:
            case [("data", text), *rest]:
                parts.append(text.replace("\n", env.newline_sequence))
            case [("variable_begin", _), ("name", name), ("variable_end", _), *rest] if (
                name not in _CONSTANTS
            ):
                parts.append(Slot(name))
            case _:
                return None
        tokens = rest
    return parts


class Template:
    """A compiled template that names the sample and field when a field is missing.

    Most prompts and patterns are only text and `{{ name }}` slots (`substitution_parts`):
    those are filled in directly, as jinja2 fills them (`str(finalize(value))`), rather
    than through a jinja2 render and its context for every sample. Anything else, and a
    slot that names no field of the sample (a jinja2 global, or undefined), goes through
    `jinja2.Template.render`.
    """

    def __init__(self, source: str, what: str, env: jinja2.Environment | None = None) -> None:
        env = env or make_environment()
        self._template = env.from_string(source)  # syntax errors surface here, either way
        self._parts = substitution_parts(env, source)
        self._names = [p.name for p in self._parts or [] if isinstance(p, Slot)]
        self._finalize = env.finalize
        self._what = what
        self._source = source

    @property
    def constant(self) -> bool:
        """Whether it renders the same text for every sample (it reads no field)."""
        if self._parts is not None:
            return not self._names
        return not jinja2.meta.find_undeclared_variables(
            self._template.environment.parse(self._source)
        )

    def render(self, sample: Sample, dataset_path: str) -> str:
        if self._parts is not None:
            text = self._substitute(sample.fields)
            if text is not None:
                return text
        try:
            return self._template.render(sample.fields)
        except jinja2.UndefinedError as exc:
            raise InputError(
                dataset_path,
                sample.line,
                self._what,
                f"sample {sample.id!r}: {exc.message}",
            ) from exc
        except jinja2.TemplateError as exc:
            raise InputError(
                dataset_path, sample.line, self._what, f"sample {sample.id!r}: {exc}"
            ) from exc

    def check(
        self, sample: Sample, dataset_path: str, provided: Mapping[str, Any] | None = None
    ) -> None:
        """Raise as render() would for this sample (with `provided` names added to its
        fields), without rendering when the template only substitutes names it has."""
        provided = provided or {}
        if self._parts is not None and all(
            name in sample.fields or name in provided for name in self._names
        ):
            return
        fields = {**sample.fields, **provided}
        self.render(Sample(id=sample.id, fields=fields, line=sample.line), dataset_path)

    def _substitute(self, fields: Mapping[str, Any]) -> str | None:
        """The text with each slot's field, or None if a slot names no field."""
        assert self._parts is not None
        out = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
            elif part.name in fields:
                value = fields[part.name]
                out.append(str(self._finalize(value) if self._finalize is not None else value))
            else:
                return None
        return "".join(out)


def check_template(source: str) -> str:
    try:
        make_environment().parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"template syntax error on its line {exc.lineno}: {exc.message}") from exc
    return source
