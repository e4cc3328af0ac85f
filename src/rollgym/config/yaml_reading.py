"""YAML for job configs: duplicate keys refused, every error one line naming the file.

PyYAML's safe loader keeps the last of two equal keys without a word, so a config that sets
``concurrency:`` twice runs with whichever came last; and its errors name ``<unicode
string>`` over several lines. This loader refuses a duplicate key naming its file, line and
key path, and turns a syntax error into ``line L, column C: problem`` under the file's name.
"""

from __future__ import annotations

from typing import Any

import yaml

from rollgym.errors import ConfigError


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader whose mappings refuse a key they already hold."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class says so
                break
            if duplicate:
                first = seen[key].start_mark.line + 1
                raise _DuplicateKey(key, key_node.start_mark, first)
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: object, mark: yaml.Mark, first_line: int) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key
        self.mark = mark
        self.first_line = first_line


def load_yaml(text: str, source: str) -> object:
    """Parse one YAML document of ``source``; raise one-line :class:`ConfigError` on error."""
    loader: _UniqueKeyLoader | None = None
    try:
        # The loader's constructor already reads the whole text: a control character is
        # refused here, before the first token.
        loader = _UniqueKeyLoader(text)
        loader.name = source
        return loader.get_single_data()
    except _DuplicateKey as exc:
        raise ConfigError(
            f"line {exc.mark.line + 1}: duplicate key {exc.key!r} (first set on line "
            f"{exc.first_line}); keep one",
            source=source,
        ) from None
    except yaml.YAMLError as exc:
        problem = describe_yaml_error(exc, text)
        raise ConfigError(f"not valid YAML: {problem}", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()


def unacceptable_character(exc: yaml.reader.ReaderError) -> str:
    """What PyYAML's reader refused, said as a person would fix it."""
    return f"character U+{exc.character:04X} is not allowed in YAML (it is not printable)"


def describe_yaml_error(exc: yaml.YAMLError, text: str) -> str:
    """``line 3, column 5: mapping values are not allowed here`` (one line); ``text`` is what
    was parsed (a character the reader refuses is located in it)."""
    if isinstance(exc, yaml.reader.ReaderError):
        position = exc.position
        line = text.count("\n", 0, position) + 1
        column = position - text.rfind("\n", 0, position)
        return f"line {line}, column {column}: {unacceptable_character(exc)}"
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        context = f" ({exc.context})" if exc.context and exc.problem else ""
        if mark is not None:
            return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"
        return f"{problem}{context}"
    return " ".join(str(exc).split())
