"""Applying dotted overrides to configuration data, and turning what goes wrong into :class:`ConfigProblem` s.

An override is a mapping (``{"loss.clip_low": 0.1}``, nested sections allowed) or ``path=value``
strings whose values are YAML in the dialect of :mod:`ablate.yamlio`. Layers of overrides are set into
nested plain data that pydantic then validates; every unknown path, bad value and duplicate is
collected as a :class:`ConfigProblem` (with the YAML line when it came from a file). Every function
takes the root model (``TrialConfig``) as an argument, so that this module depends on no schema.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from ablate.config.paths import Target, describe_type, is_section, lookup, unknown_path_message
from ablate.config.problems import ConfigProblem, RuleViolations
from ablate.yamlio import LineDict, YamlError, parse_yaml, plain

__all__ = [
    "Layer",
    "apply_layer",
    "file_lines",
    "flatten_into",
    "problems_from_validation_error",
    "with_line",
]

Overrides = Mapping[str, Any] | Iterable[str]


class Layer:
    """One set of overrides (a mapping, or ``path=value`` strings), with YAML line numbers if any."""

    def __init__(self, overrides: Overrides, lines: dict[str, int] | None = None) -> None:
        self.overrides = overrides
        self.lines = lines or {}


def _items_of(overrides: Overrides, root: type[BaseModel],
              problems: list[ConfigProblem]) -> list[tuple[str, Any, bool]]:
    """(path, value, value_is_a_string_to_parse) for every override, nested mappings flattened."""
    out: list[tuple[str, Any, bool]] = []
    if isinstance(overrides, Mapping):
        _flatten_overrides(overrides, "", root, out, problems)
        return out
    if isinstance(overrides, str):
        overrides = [overrides]
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            problems.append(ConfigProblem(str(item), "an override must be a string path=value, e.g. loss.clip_high=0.28"))
            continue
        path, raw = item.split("=", 1)
        out.append((path.strip(), raw.strip(), True))
    return out


def _flatten_overrides(mapping: Mapping[Any, Any], prefix: str, root: type[BaseModel],
                       out: list[tuple[str, Any, bool]], problems: list[ConfigProblem]) -> None:
    for key, value in mapping.items():
        if not isinstance(key, str):
            problems.append(ConfigProblem(f"{prefix}{key!r}", "keys must be strings (dotted paths)"))
            continue
        path = prefix + key
        target = lookup(root, path)
        if target is not None and target.kind == "section" and (isinstance(value, Mapping) or value is None):
            _flatten_overrides(value or {}, path + ".", root, out, problems)
        else:
            out.append((path, value, False))


def apply_layer(root: type[BaseModel], data: dict[str, Any], layer: Layer, problems: list[ConfigProblem]) -> None:
    """Set every override of ``layer`` into the nested ``data`` of ``root``; record problems (unknown paths...)."""
    items = _items_of(layer.overrides, root, problems)
    from_mapping = isinstance(layer.overrides, Mapping)
    seen: set[str] = set()
    for path, value, is_string in items:
        target = lookup(root, path)
        if target is None:
            problems.append(ConfigProblem(path, unknown_path_message(root, path)))
            continue
        if is_string or (isinstance(value, str) and target.kind == "leaf" and target.field is not None
                         and not _accepts_str(target.field.annotation)):
            # "path=value" text is YAML; so is a string given for a field that cannot hold one
            # ({"seed": "3"}), while strings meant as strings are never re-read.
            value = _parse_string(value, target)
        if target.kind == "section":
            if isinstance(value, Mapping):
                apply_layer(root, data, Layer({path: value}), problems)
            else:
                keys = ", ".join(target.section.model_fields) if target.section else ""
                problems.append(ConfigProblem(path, (
                    f"is a section, not a value (got {value!r}); set its keys, e.g. {path}.<key>=..., "
                    f"one of: {keys}")))
            continue
        if from_mapping and path in seen:
            problems.append(ConfigProblem(path, "is set twice (nested and dotted); set it once"))
            continue
        seen.add(path)
        _set_path(data, target, path, value, problems)


def _set_path(data: dict[str, Any], target: Target, path: str, value: Any, problems: list[ConfigProblem]) -> None:
    node = data
    for part in target.parts[:-1]:
        node = node.setdefault(part, {})
    last = target.parts[-1]
    if not target.rest:
        node[last] = value
        return
    current = node.get(last)
    if not isinstance(current, dict):
        current = {}
    node[last] = current = dict(current)
    for key in target.rest[:-1]:
        nxt = current.get(key)
        if nxt is not None and not isinstance(nxt, dict):
            problems.append(ConfigProblem(path, f"cannot set a key inside {key!r}, which holds {nxt!r}, not a mapping"))
            return
        current[key] = current = dict(nxt or {})
    current[target.rest[-1]] = value


def _parse_string(raw: str, target: Target) -> Any:
    """The value of a ``path=value`` string: YAML, but a string field keeps its text (``name=on`` stays 'on')."""
    try:
        parsed = plain(parse_yaml(raw))
    except YamlError:
        return raw
    if (target.kind == "leaf" and target.field is not None and parsed is not None
            and not isinstance(parsed, str) and _accepts_str(target.field.annotation)):
        return raw
    return parsed


def _accepts_str(ann: Any) -> bool:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if ann is str:
        return True
    if origin is typing.Annotated:
        return _accepts_str(args[0])
    if origin is Literal:
        return all(isinstance(a, str) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts_str(a) for a in args if a is not type(None))
    return False


def flatten_into(data: Mapping[str, Any], prefix: str, cls: type[BaseModel], out: dict[str, Any]) -> None:
    """Add the leaves of the nested ``data`` of section ``cls`` to ``out`` under dotted keys."""
    for name, fi in cls.model_fields.items():
        if is_section(fi.annotation):
            flatten_into(data[name], prefix + name + ".", fi.annotation, out)
        else:
            out[prefix + name] = data[name]


def problems_from_validation_error(root: type[BaseModel], exc: ValidationError) -> list[ConfigProblem]:
    """One :class:`ConfigProblem` per pydantic error: dotted path, message, value given, allowed values."""
    problems: list[ConfigProblem] = []
    for err in exc.errors():
        inner = (err.get("ctx") or {}).get("error")
        if isinstance(inner, RuleViolations):
            problems.extend(dataclasses.replace(p, rule=True) for p in inner.problems)
            continue
        path = ""
        for part in err["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        if err["type"] == "extra_forbidden":
            problems.append(ConfigProblem(path, unknown_path_message(root, path)))
            continue
        problems.append(ConfigProblem(path, _error_message(root, err)))
    return problems


def _error_message(root: type[BaseModel], err: ErrorDetails) -> str:
    """The message of one pydantic error: what is wrong, the value given, the allowed values."""
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    msg = f"{msg} (got {_short(err.get('input'))})"
    target = lookup(root, ".".join(str(p) for p in err["loc"] if not isinstance(p, int)))
    if err["type"] == "literal_error" and isinstance(err.get("input"), str):
        allowed = list(typing.get_args(target.field.annotation)) if target and target.field else []
        guess = difflib.get_close_matches(err["input"], [str(a) for a in allowed], n=1, cutoff=0.5)
        if guess:
            msg += f"; did you mean {guess[0]!r}?"
    elif target is not None and target.field is not None and target.kind == "leaf":
        if not msg.startswith("unknown "):
            msg += f"; expected {describe_type(target.field)}"
    return msg


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def with_line(problem: ConfigProblem, lines: Mapping[str, int]) -> ConfigProblem:
    """``problem`` with the YAML line of its path (or of the nearest enclosing path that has one)."""
    if problem.line is not None or not lines:
        return problem
    path = re.sub(r"\[\d+\]$", "", problem.path)
    while path:
        if path in lines:
            return ConfigProblem(problem.path, problem.message, lines[path])
        path = path.rpartition(".")[0]
    return problem


def file_lines(root: type[BaseModel], doc: LineDict) -> tuple[dict[str, int], list[ConfigProblem]]:
    """The line of every dotted key of a file read by :func:`ablate.yamlio.read_yaml`, and its
    duplicates as problems: a key given twice, also as ``loss: {clip_low: …}`` and ``loss.clip_low: …``."""
    lines: dict[str, int] = {}
    problems: list[ConfigProblem] = []
    _walk_lines(root, doc, "", lines, problems)
    return lines, problems


def _walk_lines(root: type[BaseModel], node: Any, prefix: str, lines: dict[str, int],
                problems: list[ConfigProblem]) -> None:
    if not isinstance(node, LineDict):
        return
    for key, value in node.items():
        path = prefix + str(key)
        line = node.key_lines.get(key)
        if path in lines:
            problems.append(ConfigProblem(path, f"is given twice (also on line {lines[path]}); keep one", line))
            continue
        lines[path] = line if line is not None else node.line
        target = lookup(root, path)
        if target is not None and target.kind in ("section", "mapping"):
            _walk_lines(root, value, path + ".", lines, problems)
    for key, line, first in node.duplicates:
        problems.append(ConfigProblem(prefix + str(key), f"is given twice (also on line {first}); keep one", line))
