"""One YAML config file read: its data, the line of each key, and errors that point at a line."""

from __future__ import annotations

from typing import Any

import yaml

from jobq.core.errors import ConfigError

MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *base`: a key YAML means to be overridden


def read_yaml(text: str, source: str) -> tuple[Any, dict[str, int]]:
    """The document in ``text`` (None if empty) and the 1-based line of each key, by dotted path.

    ConfigError naming ``source:line:column`` for text that is not YAML, and ``source:line``
    with both lines for a key given twice in one mapping: YAML itself keeps the last one
    silently, so a setting an operator added at the end of a section would quietly win (or
    lose) against one set further up.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        lines: dict[str, int] = {}
        if node is not None:
            _walk(node, "", lines, source, set())
        return (None if node is None else loader.construct_document(node)), lines
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_syntax(exc), source=_at(source, exc.problem_mark, column=True)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {' '.join(str(exc).split())}", source=source) from None
    finally:
        loader.dispose()


def _at(source: str, mark: Any, *, column: bool = False) -> str:
    if mark is None:
        return source
    return f"{source}:{mark.line + 1}" + (f":{mark.column + 1}" if column else "")


def _syntax(exc: yaml.MarkedYAMLError) -> str:
    """What is wrong, and with what (the context), without quoting the file's text: a line of
    it may hold a password."""
    problem = exc.problem or "cannot be parsed"
    context = exc.context
    mark = exc.context_mark
    if context and mark is not None:
        context = f"{context} started at line {mark.line + 1}, column {mark.column + 1}"
    return f"not valid YAML: {problem}" + (f" ({context})" if context else "")


def _walk(node: yaml.Node, prefix: str, lines: dict[str, int], source: str,
          seen: set[int]) -> None:
    """Record each key's line under ``prefix``; ConfigError for a key given twice in a mapping.

    A node reached again through an alias is not walked again: its keys were recorded where it
    was anchored, and a document of nested aliases (or one that contains itself) stays cheap.
    """
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, f"{prefix}[{index}]", lines, source, seen)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    here: dict[tuple[str, str], int] = {}  # (tag, text): `1` and `"1"` are different keys
    for key, value in node.value:
        if key.tag == MERGE_TAG or not isinstance(key, yaml.ScalarNode):
            continue
        dotted = f"{prefix}.{key.value}" if prefix else str(key.value)
        line = key.start_mark.line + 1
        first = here.get((key.tag, key.value))
        if first is not None:
            raise ConfigError(f"duplicate key (also at line {first}): YAML keeps the last one "
                              "only; remove one of them", key=dotted, source=f"{source}:{line}")
        here[key.tag, key.value] = lines[dotted] = line
        _walk(value, dotted, lines, source, seen)
