"""YAML loading that remembers the line of every key, so errors can name it."""

from pathlib import Path
from typing import Any

import yaml

from gradetrail_lib.errors import InputError

Location = tuple[str | int, ...]


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate mapping keys instead of keeping the last."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _index_lines(node: yaml.Node, here: Location, lines: dict[Location, int]) -> None:
    lines[here] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            lines[(*here, key)] = key_node.start_mark.line + 1
            _index_lines(value_node, (*here, key), lines)
            # The key's own line is more useful than the value's for scalar values.
            lines[(*here, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index_lines(item, (*here, i), lines)


class YamlDocument:
    """A parsed YAML document plus the line number of every location in it."""

    def __init__(self, path: Path, data: Any, lines: dict[Location, int]) -> None:
        self.path = path
        self.data = data
        self._lines = lines

    def has(self, loc: Location) -> bool:
        return loc in self._lines

    def value_at(self, loc: Location) -> Any:
        value = self.data
        for part in loc:
            value = value[part]
        return value

    def line_of(self, loc: Location) -> int | None:
        """The line of the deepest known prefix of `loc` (pydantic may add union tags)."""
        for end in range(len(loc), -1, -1):
            line = self._lines.get(loc[:end])
            if line is not None:
                return line
        return None


def load_yaml(path: Path) -> YamlDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(str(path), None, None, f"cannot read file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raw = path.read_bytes()
        bad_line = raw[: exc.start].count(b"\n") + 1
        raise InputError(str(path), bad_line, None, "not valid UTF-8") from exc
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise InputError(str(path), line, None, f"invalid YAML: {exc.problem}") from exc
    except yaml.YAMLError as exc:
        raise InputError(str(path), None, None, f"invalid YAML: {exc}") from exc
    lines: dict[Location, int] = {}
    if node is not None:
        _index_lines(node, (), lines)
    return YamlDocument(path, data, lines)
