"""Reading the YAML files a user writes (study files, trial files), in one dialect, with line numbers.

Every file is read with :class:`LineLoader`: a ``yaml.SafeLoader`` (no Python tags) whose mappings and
sequences remember where they were (:class:`LineDict`, :class:`LineList`) and whose mappings record
duplicate keys instead of silently keeping the last value. The dialect is YAML 1.2's for scalars:
only ``true``/``false`` are booleans (``on``, ``off``, ``yes``, ``no`` stay strings, as level
names often are) and ``1e-5`` is a float (YAML 1.1 reads it as a string). ``path=value`` override
strings are read with the same dialect (:func:`parse_yaml`).

Aliases are bounded: a document whose aliases would expand to more than :data:`MAX_EXPANDED_NODES`
values (a "billion laughs" alias bomb), or that nests deeper than :data:`MAX_DEPTH`, or whose aliases
refer to themselves, is refused with one message before anything is built from it.

This module imports nothing of ablate but its errors, so reading a file never imports torch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ablate.errors import ConfigError

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPANDED_NODES",
    "FileProblem",
    "LineDict",
    "LineList",
    "LineLoader",
    "YamlError",
    "parse_yaml",
    "plain",
    "read_yaml",
]


class LineDict(dict):
    """A mapping read from YAML that remembers where it and each of its keys were.

    Attributes:
        line: 1-based line where the mapping starts.
        key_lines: key -> 1-based line of the key.
        duplicates: (key, line, line of the first occurrence) for every repeated key.
    """

    line: int = 0
    key_lines: dict[Any, int]
    duplicates: list[tuple[Any, int, int]]


class LineList(list):
    """A sequence read from YAML that remembers its line and each item's line."""

    line: int = 0
    item_lines: list[int]


_MERGE_TAG = "tag:yaml.org,2002:merge"

#: The most values (mappings, sequences and scalars, each alias counted as the values it stands for)
#: a document may expand to; a study file has a few hundred.
MAX_EXPANDED_NODES = 100_000
#: The deepest nesting of mappings and sequences a document may have.
MAX_DEPTH = 64


def _expansion(node: yaml.Node, memo: dict[int, tuple[int, int]], active: set[int]) -> tuple[int, int]:
    """``(values, depth)`` of ``node`` with every alias expanded, computed once per node (aliases share
    their node, so this takes time linear in the document's text, not in its expansion).

    Raises:
        ValueError: an alias refers to a node that contains it.
    """
    if id(node) in memo:
        return memo[id(node)]
    if id(node) in active:
        raise ValueError("an alias refers to a value that contains it")
    if isinstance(node, yaml.ScalarNode):
        return 1, 0
    active.add(id(node))
    children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
    sizes = [_expansion(c, memo, active) for c in children]
    active.discard(id(node))
    result = (1 + sum(n for n, _ in sizes), 1 + max((d for _, d in sizes), default=0))
    memo[id(node)] = result
    return result


def _check_expansion(node: yaml.Node | None, file: str) -> None:
    """Refuse a document whose aliases expand beyond the bounds (see the module docstring)."""
    if node is None:
        return
    line = node.start_mark.line + 1
    try:
        values, depth = _expansion(node, {}, set())
    except ValueError as exc:
        raise YamlError(FileProblem(file, line, "yaml", f"invalid YAML: {exc}; write the value out")) from None
    except RecursionError:
        values, depth = 0, MAX_DEPTH + 1
    if values > MAX_EXPANDED_NODES:
        raise YamlError(FileProblem(file, line, "yaml", f"its aliases expand to {values:,} values, more than "
                                    f"{MAX_EXPANDED_NODES:,} (an alias bomb?); write the values out or use fewer aliases"))
    if depth > MAX_DEPTH:
        raise YamlError(FileProblem(file, line, "yaml", f"nested deeper than {MAX_DEPTH} levels; flatten it"))


class LineLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (no Python tags) whose mappings and sequences keep their line numbers
    (:class:`LineDict`, :class:`LineList`) and record duplicate keys instead of silently keeping
    the last value; scalars are read as YAML 1.2 reads them (see the module docstring)."""


def _construct_mapping(loader: LineLoader, node: yaml.MappingNode) -> Iterator[LineDict]:
    data = LineDict()
    data.line = node.start_mark.line + 1
    data.key_lines = {}
    data.duplicates = []
    yield data
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            if key in first:
                data.duplicates.append((key, line, first[key]))
            else:
                first[key] = line
        except TypeError:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, "found unhashable key", key_node.start_mark
            ) from None
    loader.flatten_mapping(node)  # merge keys ('<<: *anchor'); explicit keys win
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        data[key] = loader.construct_object(value_node, deep=False)
        data.key_lines.setdefault(key, key_node.start_mark.line + 1)
        if first.get(key) is not None:
            data.key_lines[key] = first[key]


def _construct_sequence(loader: LineLoader, node: yaml.SequenceNode) -> Iterator[LineList]:
    data = LineList()
    data.line = node.start_mark.line + 1
    data.item_lines = [child.start_mark.line + 1 for child in node.value]
    yield data
    data.extend(loader.construct_object(child, deep=False) for child in node.value)


LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)

# Booleans and floats as YAML 1.2 reads them: 'on', 'off', 'yes', 'no' stay strings (level names such
# as on/off are common), and 1e-5 is a float (YAML 1.1 reads it as a string).
_BOOL_TAG, _FLOAT_TAG = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:float"
LineLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_BOOL_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
LineLoader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
LineLoader.add_implicit_resolver(
    _FLOAT_TAG,
    re.compile(
        r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
        |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


@dataclass(frozen=True)
class FileProblem:
    """One thing wrong in a file the user wrote, at a line: why a YAML file could not be read, or
    (:mod:`ablate.study`) one problem of a study file.

    Attributes:
        file: the file.
        line: 1-based line of the problem, when known.
        key: ``"file"`` (it cannot be read) or ``"yaml"`` (it is not valid safe YAML).
        message: what is wrong and how to fix it.
    """

    file: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.key}: {self.message}"


class YamlError(ConfigError):
    """A YAML file that cannot be read or parsed; ``problems`` holds one :class:`FileProblem`."""

    def __init__(self, problem: FileProblem) -> None:
        self.file = problem.file
        self.problems = [problem]
        super().__init__(str(problem))


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file with :class:`LineLoader` (safe, duplicate keys recorded, lines kept).

    Raises:
        YamlError: the file cannot be read or is not valid (safe) YAML; names the file and line.
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise YamlError(FileProblem(file, None, "file", "no such file; check the path")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise YamlError(FileProblem(file, None, "file", f"cannot read: {exc}")) from None
    return parse_yaml(text, file)


def parse_yaml(text: str, file: str = "<string>") -> Any:
    """Parse YAML text with :class:`LineLoader`; ``file`` names it in errors.

    Raises:
        YamlError: the text is not valid (safe) YAML; names the line.
    """
    loader = LineLoader(text)
    try:
        node = loader.get_single_node()
        _check_expansion(node, file)
        return loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = exc.problem or str(exc)
        if "could not determine a constructor" in what:
            what += "; only plain (safe) YAML is accepted: no !!python or custom tags"
        elif exc.context:
            what = f"{exc.context}, {what}"
        raise YamlError(FileProblem(file, line, "yaml", f"invalid YAML: {what}")) from None
    except yaml.YAMLError as exc:
        raise YamlError(FileProblem(file, None, "yaml", f"invalid YAML: {exc}")) from None
    finally:
        loader.dispose()


def plain(obj: Any) -> Any:
    """``obj`` with every :class:`LineDict` / :class:`LineList` turned into a plain dict / list."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain(v) for v in obj]
    return obj
