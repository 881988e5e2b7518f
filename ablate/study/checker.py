"""Checking a study file: the keys it may hold, one problem per mistake (``FILE:LINE: key: problem``),
and the checker that collects them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ablate.errors import AblateError
from ablate.study.model import SEED_PATH, SeedRange, unknown_choice
from ablate.yamlio import FileProblem, LineDict, LineList, YamlError, plain
from ablate.yamlio import read_yaml as _read_yaml

#: Top-level keys of a study file, with what each holds (for error messages).
STUDY_KEYS: dict[str, str] = {
    "name": "the study's name, [a-z0-9_-]+",
    "description": "the question the study answers",
    "plugins": "modules to import to register extra components",
    "base": "dotted overrides applied to every trial",
    "factors": "factor -> levels",
    "design": "which arms to run",
    "baseline": "the control arm: factor -> level",
    "exclude": "combinations not to run",
    "seeds": "n or a list of seeds, the same for every arm",
    "contexts": "factors replicated over rather than compared (task, model ...): each contrast is pooled across them",
    "entry": "how a context enters: learns (the baseline's gain in a pilot), band (its step-0 objective), pilot",
    "extended_after": "the seed counts whose report was read before the seeds were extended (the two-stage test)",
    "budgets": "named override sets chosen with --budget",
    "objective": "the metric the study compares",
    "tune": "per-arm hyper-parameter tuning",
    "report": "extra metrics the report compares level by level",
    "primary": "the contrasts the study exists for: factor or factor=level",
    "min_effect": "the smallest effect worth finding, in the objective's units",
    "acknowledge": "configuration warnings the study runs into on purpose, by name",
    "evidence": "false for a demo: its report is the reader's own run, never committed nor read by ablate ledger",
}
REQUIRED_KEYS = ("name", "factors", "seeds", "objective")
FACTOR_KEYS = ("description", "levels", "path", "values")
OBJECTIVE_KEYS = ("metric", "mode", "summary", "last_n")
TUNE_KEYS = ("params", "trials", "budget", "seeds")
REPORT_KEYS = ("metrics",)
SEED_RANGE_KEYS = ("min", "max")
TUNE_PARAM_KEYS = ("low", "high", "log")
NAME_RE = re.compile(r"[a-z0-9_-]+\Z")
FACTOR_RE = re.compile(r"[A-Za-z0-9_-]+\Z")
PATH_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
MODULE_RE = PATH_RE
_PATTERN_TEXT = {NAME_RE: "[a-z0-9_-]+", FACTOR_RE: "[A-Za-z0-9_-]+"}
#: At most this many per-arm configuration failures are listed one by one.
MAX_ARM_PROBLEMS = 20
#: The most problems a StudyError prints (all of them stay in ``StudyError.problems``).
MAX_SHOWN_PROBLEMS = 50


class StudyError(AblateError):
    """An invalid study file; ``problems`` lists everything found, all at once."""

    def __init__(self, file: str, problems: Sequence[FileProblem]) -> None:
        self.file = file
        self.problems = list(problems)
        n = len(self.problems)
        head = f"invalid study file {file} ({n} problem{'s' if n != 1 else ''}):"
        shown = [f"  {p}" for p in self.problems[:MAX_SHOWN_PROBLEMS]]
        if n > MAX_SHOWN_PROBLEMS:
            shown.append(f"  ... and {n - MAX_SHOWN_PROBLEMS:,} more (fix these first)")
        super().__init__("\n".join([head, *shown]))

    def __str__(self) -> str:
        return str(self.args[0])


def indented(text: str) -> str:
    """A multi-line message on one problem line: continuation lines indented."""
    return str(text).strip().replace("\n", "\n      ")


def read_yaml(path: str | Path) -> Any:
    """:func:`ablate.yamlio.read_yaml` (the one reader of user files), its error as a :class:`StudyError`."""
    try:
        return _read_yaml(path)
    except YamlError as exc:
        raise StudyError(exc.file, exc.problems) from None


def line_of(node: Any, key: Any = None) -> int | None:
    if isinstance(node, LineDict):
        if key is not None and key in node.key_lines:
            return node.key_lines[key]
        return node.line
    if isinstance(node, LineList):
        if isinstance(key, int) and 0 <= key < len(node.item_lines):
            return node.item_lines[key]
        return node.line
    return None


def type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "empty"}.get(
        type(plain(value)), type(value).__name__
    )


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Checker:
    """Collects the problems of one study file."""

    def __init__(self, file: str, doc: Any) -> None:
        self.file = file
        self.doc = doc
        self.problems: list[FileProblem] = []

    def add(self, line: int | None, key: str, message: str) -> None:
        self.problems.append(FileProblem(self.file, line, key, message))

    # -- generic pieces -------------------------------------------------------------------------

    def duplicates(self, node: Any, path: str) -> None:
        """Report every duplicate key anywhere in the document."""
        if isinstance(node, LineDict):
            for key, line, first in node.duplicates:
                where = f"{path}.{key}" if path else str(key)
                self.add(line, where, f"duplicate key (first at line {first}); keep only one of them")
            for key, value in node.items():
                self.duplicates(value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, LineList):
            for i, value in enumerate(node):
                self.duplicates(value, f"{path}[{i}]")

    def keys(self, node: LineDict, path: str, allowed: Sequence[str], what: str) -> None:
        for key in node:
            if key not in allowed:
                self.add(line_of(node, key), f"{path}.{key}" if path else str(key), unknown_choice(what, key, allowed))

    def overrides(self, parent: Any, key: Any, path: str) -> dict[str, Any] | None:
        """Check a mapping of dotted overrides (``parent[key]``); None if malformed. Empty -> {}."""
        node = parent[key]
        line = line_of(parent, key)
        if node is None:
            return {}
        if not isinstance(node, dict):
            self.add(
                line, path, f"must be a mapping of dotted config paths to values, got {type_name(node)} "
                f"{plain(node)!r}; e.g. {{loss.clip_high: 0.28}}"
            )
            return None
        ok = True
        for k in node:
            kline = line_of(node, k)
            if not isinstance(k, str) or not PATH_RE.match(k):
                self.add(kline, f"{path}.{k}", "not a dotted config path; write e.g. loss.aggregation")
                ok = False
            elif k == SEED_PATH:
                self.add(kline, f"{path}.{k}", "the seed is set by 'seeds:', not by overrides; remove it here")
                ok = False
        return {k: plain(v) for k, v in node.items()} if ok else None

    def seed_range(self, parent: Any, key: str, path: str) -> SeedRange | None:
        """``{min: a, max: b}`` with 1 <= a <= b."""
        node = parent[key]
        line = line_of(parent, key)
        self.keys(node, path, SEED_RANGE_KEYS, "seeds key")
        lo, hi = node.get("min"), node.get("max")
        if not (is_int(lo) and is_int(hi) and 1 <= lo <= hi):
            self.add(line, path, f"got {plain(node)!r}; allowed: {{min: a, max: b}} with integers 1 <= a <= b, "
                                 "e.g. {min: 4, max: 16}")
            return None
        return SeedRange(lo, hi)

    def seeds(self, parent: Any, key: str, path: str, allow_range: bool = False) -> tuple[int, ...] | None:
        value = parent[key]
        line = line_of(parent, key)
        allowed = "allowed: a positive integer n (seeds 0..n-1) or a list of distinct integers >= 0"
        if allow_range:
            allowed += ", or {min: a, max: b} (adaptive)"
        if is_int(value):
            if value >= 1:
                return tuple(range(value))
            self.add(line, path, f"must be at least 1, got {value}; {allowed}")
            return None
        if isinstance(value, list) and value and all(is_int(v) and v >= 0 for v in value):
            dup = sorted({v for v in value if value.count(v) > 1})
            if dup:
                self.add(line, path, f"seeds repeat: {dup}; {allowed}")
                return None
            return tuple(value)
        self.add(line, path, f"got {plain(value)!r}; {allowed}")
        return None

    def name_like(self, parent: Any, key: Any, path: str, value: Any, pattern: re.Pattern, what: str) -> bool:
        if isinstance(value, str) and pattern.match(value):
            return True
        fix = re.sub(r"[^a-z0-9_-]+", "-", str(value).lower()).strip("-") if pattern is NAME_RE else None
        msg = f"{what} {value!r} must match {_PATTERN_TEXT[pattern]}"
        if fix:
            msg += f"; did you mean {fix!r}?"
        self.add(line_of(parent, key), path, msg)
        return False
