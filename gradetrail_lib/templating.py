"""Rendering prompts from sample fields (jinja2, StrictUndefined)."""

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import jinja2
from jinja2 import nodes

from gradetrail_lib.datasets.dataset import Sample
from gradetrail_lib.errors import InputError
from gradetrail_lib.providers.request import Message

if TYPE_CHECKING:  # the spec imports the scorers, which render templates
    from gradetrail_lib.spec.spec import Spec


def make_environment(finalize: Callable[[Any], Any] | None = None) -> jinja2.Environment:
    return jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=finalize,
    )


def substitution_parts(env: jinja2.Environment, source: str) -> list[str | nodes.Name] | None:
    """The template as text and plain `{{ name }}` slots, or None if it holds anything else.

    Most prompts and patterns are only that, and for them jinja2's per-call context
    costs more than the substitution: ~6 us a render, twice per sample in a plan. Such a
    template renders as jinja2's generated code does: each slot becomes
    `str(finalize(value))`, the text is what its lexer left (whitespace control and raw
    blocks already applied), and a name that is neither a field nor a global is undefined.
    """
    parts: list[str | nodes.Name] = []
    for output in env.parse(source).body:
        if not isinstance(output, nodes.Output):
            return None
        for node in output.nodes:
            if isinstance(node, nodes.TemplateData):
                parts.append(node.data)
            elif isinstance(node, nodes.Name) and node.ctx == "load":
                parts.append(node)
            else:
                return None
    return parts


def format_string(parts: list[str | nodes.Name]) -> str | None:
    """The parts as a `str.format_map` string, or None when a slot's name is not a plain
    identifier. For the values a dataset holds (JSON's: strings, numbers, booleans, None,
    lists, objects) `format(value, "")` is `str(value)`, so it renders as `_substitute`
    does, several times faster; a name missing from the fields raises KeyError."""
    pieces = []
    for part in parts:
        if isinstance(part, str):
            pieces.append(part.replace("{", "{{").replace("}", "}}"))
        elif part.name.isidentifier():
            pieces.append("{" + part.name + "}")
        else:
            return None
    return "".join(pieces)


class Template:
    """A compiled template that names the sample and field when a field is missing."""

    def __init__(self, source: str, what: str, env: jinja2.Environment | None = None) -> None:
        env = env or make_environment()
        self._template = env.from_string(source)  # syntax errors surface here, either way
        self._parts = substitution_parts(env, source)
        self._finalize = env.finalize
        self._format = (
            format_string(self._parts) if self._parts is not None and not env.finalize else None
        )
        self._what = what
        # jinja2's render() copies its globals out of a ChainMap on every call: 13 us per
        # short prompt here, 5 us without. They are merged once instead, and the context
        # is built as render() builds it (`new_context(shared=True)` takes the mapping as
        # it is, so it must hold the globals itself).
        self._globals = dict(self._template.globals)

    def render(self, sample: Sample, dataset_path: str) -> str:
        if self._format is not None:
            try:
                return self._format.format_map(sample.fields)
            except KeyError:  # a global's name, or undefined: said as jinja2 would
                pass
        if self._parts is not None:
            return self._substitute(self._parts, sample, dataset_path)
        template = self._template
        try:
            context = template.new_context({**self._globals, **sample.fields}, shared=True)
            return template.environment.concat(template.root_render_func(context))
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
        fields), without rendering when the template only substitutes names."""
        provided = provided or {}
        if self._parts is None:
            self.render(Sample(sample.id, {**sample.fields, **provided}, sample.line), dataset_path)
            return
        for part in self._parts:
            if isinstance(part, str):
                continue
            name = part.name
            if name not in sample.fields and name not in provided and name not in self._globals:
                raise InputError(
                    dataset_path, sample.line, self._what,
                    f"sample {sample.id!r}: '{name}' is undefined",
                )  # fmt: skip

    def _substitute(self, parts: list[str | nodes.Name], sample: Sample, dataset_path: str) -> str:
        fields, finalize = sample.fields, self._finalize
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
                continue
            name = part.name
            if name in fields:
                value = fields[name]
            elif name in self._globals:
                value = self._globals[name]
            else:
                raise InputError(
                    dataset_path,
                    sample.line,
                    self._what,
                    f"sample {sample.id!r}: '{name}' is undefined",
                )
            out.append(str(finalize(value)) if finalize is not None else str(value))
        return "".join(out)


class PromptRenderer:
    """The first messages of a sample's conversation: `system` and `prompt`, or the
    spec's `messages:` chat, each content a template."""

    def __init__(self, spec: "Spec") -> None:
        self._chat: list[tuple[str, Template]] = []
        if spec.messages is not None:
            for i, m in enumerate(spec.messages):
                self._chat.append((m.role, Template(m.content, f"messages[{i}].content")))
            return
        if spec.system is not None:
            self._chat.append(("system", Template(spec.system, "system")))
        assert spec.prompt is not None
        self._chat.append(("user", Template(spec.prompt, "prompt")))

    def messages(self, sample: Sample, dataset_path: str) -> list[Message]:
        return [
            {"role": role, "content": template.render(sample, dataset_path)}
            for role, template in self._chat
        ]
