"""Dotted paths through a tree of pydantic sections: what a path names, its default, its allowed values.

Every function takes the root model (:class:`~ablate.config.TrialConfig`) as an argument, so that this
module depends on no schema; :mod:`ablate.config.schema` binds them to ``TrialConfig``
(:func:`~ablate.config.field_paths`, :func:`~ablate.config.describe_path`,
:func:`~ablate.config.nearest_path`).
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ablate.config.problems import ConfigProblem, TrialConfigError
from ablate.config.validators import allowed_text

__all__ = [
    "Target",
    "default_of",
    "describe_field",
    "describe_type",
    "is_mapping_field",
    "is_section",
    "leaf_paths",
    "lookup",
    "nearest_of",
    "section_defaults",
    "unknown_path_message",
]


def is_section(annotation: object) -> bool:
    """Whether a field's annotation is a section (a pydantic model), not a value."""
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def is_mapping_field(fi: FieldInfo) -> bool:
    """Whether a field holds a free mapping (``task.options``), whose keys are paths too."""
    return typing.get_origin(fi.annotation) is dict


def section_defaults(cls: type[BaseModel]) -> dict[str, Any]:
    """The default data of a section and its subsections, as nested plain JSON data."""
    return {name: (section_defaults(fi.annotation) if is_section(fi.annotation) else default_of(fi))
            for name, fi in cls.model_fields.items()}


def default_of(fi: FieldInfo) -> Any:
    """The default of a field as plain JSON data (tuples become lists; mutables are copies)."""
    value = fi.get_default(call_default_factory=True)
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class Target:
    """Where a dotted path points: a section, a leaf field, or keys inside a mapping-valued field."""

    kind: Literal["section", "leaf", "mapping"]
    field: FieldInfo | None
    section: type[BaseModel] | None
    parts: tuple[str, ...]  # path segments up to and including the field
    rest: tuple[str, ...]  # keys below a mapping-valued field


def lookup(root: type[BaseModel], path: str) -> Target | None:
    """Resolve a dotted path against the schema of ``root``, or None if it names nothing."""
    parts = path.split(".")
    cls: type[BaseModel] = root
    for i, part in enumerate(parts):
        fi = cls.model_fields.get(part)
        if fi is None:
            return None
        if is_section(fi.annotation):
            if i == len(parts) - 1:
                return Target("section", fi, fi.annotation, tuple(parts), ())
            cls = fi.annotation
            continue
        if is_mapping_field(fi):
            if any(not p for p in parts[i + 1:]):
                return None
            return Target("mapping", fi, None, tuple(parts[: i + 1]), tuple(parts[i + 1:]))
        if i < len(parts) - 1:
            return None
        return Target("leaf", fi, None, tuple(parts), ())
    return None


def leaf_paths(root: type[BaseModel]) -> list[str]:
    """Every settable dotted path of ``root`` (leaves and mapping-valued fields), in order."""
    out: list[str] = []

    def walk(cls: type[BaseModel], prefix: str) -> None:
        for name, fi in cls.model_fields.items():
            if is_section(fi.annotation):
                walk(fi.annotation, prefix + name + ".")
            else:
                out.append(prefix + name)

    walk(root, "")
    return out


def describe_field(root: type[BaseModel], path: str) -> str:
    """The description of the field of ``root`` at a dotted path, with its type and default.

    Raises:
        TrialConfigError: the path names no field (the message gives the nearest valid path).
    """
    target = lookup(root, path)
    if target is None or target.field is None or target.rest:
        raise TrialConfigError([ConfigProblem(path, unknown_path_message(root, path))])
    fi = target.field
    if target.kind == "section":
        return f"{path}: section ({fi.description})"
    return f"{path} ({describe_type(fi)}; default {json.dumps(default_of(fi))}): {fi.description}"


def nearest_of(root: type[BaseModel], path: str) -> str | None:
    """The valid dotted path of ``root`` nearest to ``path`` (difflib), or None when nothing is close."""
    paths = leaf_paths(root)
    found = difflib.get_close_matches(path, paths, n=1, cutoff=0.6)
    if found:
        return found[0]
    last = path.split(".")[-1]
    by_last: dict[str, list[str]] = {}
    for p in paths:
        by_last.setdefault(p.split(".")[-1], []).append(p)
    close = difflib.get_close_matches(last, list(by_last), n=1, cutoff=0.7)
    if close and len(by_last[close[0]]) == 1:
        return by_last[close[0]][0]
    return None


def unknown_path_message(root: type[BaseModel], path: str) -> str:
    """``unknown key``, the nearest valid path, and the keys of the longest valid section prefix."""
    msg = "unknown key"
    guess = nearest_of(root, path)
    if guess is not None:
        msg += f" (did you mean {guess!r}?)"
    parts = path.split(".")
    # the longest valid section prefix: list what it holds
    for i in range(len(parts) - 1, -1, -1):
        prefix = ".".join(parts[:i])
        target = lookup(root, prefix) if prefix else Target("section", None, root, (), ())
        if target is not None and target.kind == "section" and target.section is not None:
            where = f"{prefix!r}" if prefix else "the top level"
            msg += f"; valid keys of {where}: {', '.join(target.section.model_fields)}"
            break
    return msg


def describe_type(fi: FieldInfo) -> str:
    """Allowed values of a field in words: ``a number, > 0 and < 1``; ``one of 'none', 'reward', 'loss'``."""
    text = _describe_annotation(fi.annotation)
    bounds = []
    for m in fi.metadata:
        allowed = allowed_text(m)
        if allowed is not None:
            text = allowed
        for attr, sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            v = getattr(m, attr, None)
            if v is not None:
                bounds.append(f"{sym} {v}")
    if bounds:
        text += ", " + " and ".join(bounds)
    return text


def _describe_annotation(ann: Any) -> str:
    origin = typing.get_origin(ann)
    args = typing.get_args(ann)
    if origin is typing.Annotated:
        base = _describe_annotation(args[0])
        for meta in args[1:]:
            allowed = allowed_text(meta)
            if allowed is not None:
                return allowed
        return base
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        parts = [_describe_annotation(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return text + " or null" if type(None) in args else text
    if origin is tuple:
        return _describe_tuple(args)
    if origin is dict:
        return "a mapping"
    if ann is bool:
        return "true or false"
    if isinstance(ann, type):
        return {"str": "a string", "int": "an integer", "float": "a number"}.get(ann.__name__, ann.__name__)
    return str(ann)


def _describe_tuple(args: tuple[Any, ...]) -> str:
    if len(args) == 2 and args[1] is Ellipsis:
        inner = _describe_annotation(args[0])
        return "a list of " + (inner[2:] + "s" if inner.startswith("a ") else inner)
    inners = {_describe_annotation(a) for a in args}
    if len(inners) == 1:
        inner = inners.pop()
        return f"a list of {len(args)} " + (inner[2:] + "s" if inner.startswith("a ") else inner)
    return "a list of " + ", ".join(_describe_annotation(a) for a in args)
