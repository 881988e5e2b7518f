"""Checks of single field values that pydantic types cannot express: registered names, devices, JSON.

Registered names (tasks, models, estimators, losses, reward components) are checked against
:func:`ablate.registry.known_names`, which knows the built-in names without importing their
implementations: validating a configuration never imports torch. Components from a study's
``plugins:`` are found once the plugin is imported (it registers them).

Each validator records its allowed values in words (:func:`allowed_text`), for error messages and
``docs/config.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import AfterValidator

from ablate.registry import known_names, unknown_name_message

__all__ = [
    "allowed_text",
    "check_device",
    "check_json_mapping",
    "check_kl_estimator",
    "check_model_name",
    "registered",
]

_ALLOWED: dict[Callable[..., Any], str] = {}


def _describes(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def mark(func: Callable[..., Any]) -> Callable[..., Any]:
        _ALLOWED[func] = text
        return func

    return mark


def allowed_text(meta: object) -> str | None:
    """For field metadata holding a validator of this module: its allowed values in words
    (``a registered task name``); else None."""
    func = getattr(meta, "func", None)
    return _ALLOWED.get(func) if callable(func) else None


def _unknown(kind: str, value: str) -> str | None:
    """The error message if ``value`` is not a known name of ``kind`` (None: known, or no names to check)."""
    names = known_names(kind)
    if names is None or value in names:
        return None
    return unknown_name_message(kind, value, names)


def registered(kind: str) -> AfterValidator:
    """A validator that accepts only names known for ``kind`` (when there are any)."""

    def check(value: str) -> str:
        msg = _unknown(kind, value)
        if msg is not None:
            raise ValueError(msg)
        return value

    _describes(f"a registered {kind} name")(check)
    return AfterValidator(check)


@_describes("a registered model name or a checkpoint directory")
def check_model_name(value: str) -> str:
    """A model name: a registered one, or the path of an existing local checkpoint directory."""
    msg = _unknown("model", value)
    if msg is None or Path(value).expanduser().is_dir():
        return value
    raise ValueError(msg + "; or give the path of an existing local checkpoint directory")


@_describes("auto or a registered kl estimator name")
def check_kl_estimator(value: str) -> str:
    """A KL estimator: ``auto`` or a registered name."""
    msg = None if value == "auto" else _unknown("kl estimator", value)
    if msg is not None:
        raise ValueError(msg + " (or 'auto')")
    return value


DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


@_describes("auto, cpu, mps, cuda or cuda:N")
def check_device(value: str) -> str:
    """A device string: auto, cpu, mps, cuda or cuda:N."""
    if not DEVICE_RE.match(value):
        raise ValueError(f"device must be auto, cpu, mps, cuda or cuda:N, got {value!r}")
    return value


def check_json_mapping(value: dict[str, Any]) -> dict[str, Any]:
    """A mapping of JSON-like values only (so that it can be hashed into the trial key)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"must hold only JSON-like values (strings, numbers, lists, mappings): {exc}") from None
    return value
