"""The frozen design of a study at a budget: its record in the store and how a new plan differs from it.

The first run of a budget records every trial key with its arm and seed, and each arm's overrides
(:func:`design_record`); a later run whose plan differs is refused with the differences
(:func:`diff_designs`, :class:`DesignDiff`), unless it only adds trials and ``--extend`` is given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ablate.errors import AblateError

if TYPE_CHECKING:
    from ablate.study import TrialSpec


@dataclass(frozen=True)
class DesignDiff:
    """How the study file's design differs from the frozen one (trials as ``(arm, seed)``).

    Attributes:
        added_arms / removed_arms: arms only in the new / the frozen design.
        added_seeds / removed_seeds: seeds only in the new / the frozen design.
        changed: ``(arm, seed, what)``: the same arm and seed whose resolved configuration (its key)
            differs; ``what`` lists the changed overrides when the arm's own overrides changed.
        added / removed: every trial key only in the new / the frozen design.
    """

    added_arms: tuple[str, ...] = ()
    removed_arms: tuple[str, ...] = ()
    added_seeds: tuple[int, ...] = ()
    removed_seeds: tuple[int, ...] = ()
    changed: tuple[tuple[str, int, str], ...] = ()
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed)

    @property
    def additions_only(self) -> bool:
        """True when the new design keeps every frozen trial and adds some."""
        return bool(self.added) and not self.removed

    def lines(self) -> list[str]:
        """The differences, one per line."""
        out = []
        if self.added_arms:
            out.append(f"added arms ({len(self.added_arms)}): " + "; ".join(self.added_arms))
        if self.removed_arms:
            out.append(f"removed arms ({len(self.removed_arms)}): " + "; ".join(self.removed_arms))
        if self.added_seeds:
            out.append("added seeds: " + ", ".join(map(str, self.added_seeds)))
        if self.removed_seeds:
            out.append("removed seeds: " + ", ".join(map(str, self.removed_seeds)))
        by_arm: dict[str, tuple[list[int], str]] = {}
        for arm, seed, what in self.changed:
            by_arm.setdefault(arm, ([], what))[0].append(seed)
        for arm, (seeds, what) in by_arm.items():
            out.append(f"changed arm {arm} (seeds {', '.join(map(str, seeds))}): {what}")
        return out


def design_record(specs: Sequence[TrialSpec], arm_overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The frozen form of a design: ``{hash, trials: {key: [arm, seed]}, arms: {arm: overrides}}``.

    Args:
        specs: the trials of one budget (``Plan.specs``).
        arm_overrides: arm name -> its merged dotted overrides (:meth:`ablate.study.plan.Plan.arm_overrides`),
            kept to explain later changes.
    """
    trials = {s.key: [s.arm, int(s.seed)] for s in specs}
    digest = hashlib.sha256(json.dumps(sorted(trials), separators=(",", ":")).encode()).hexdigest()[:16]
    arms = {name: {k: jsonable(v) for k, v in ov.items()} for name, ov in arm_overrides.items()}
    return {"hash": digest, "trials": trials, "arms": arms}


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def diff_designs(frozen: Mapping[str, Any], new: Mapping[str, Any]) -> DesignDiff:
    """The differences between a frozen design record and a new one (see :func:`design_record`)."""
    old_t: dict[str, list] = dict(frozen.get("trials", {}))
    new_t: dict[str, list] = dict(new.get("trials", {}))
    added = tuple(k for k in new_t if k not in old_t)
    removed = tuple(k for k in old_t if k not in new_t)
    old_arms = list(dict.fromkeys(a for a, _ in old_t.values()))
    new_arms = list(dict.fromkeys(a for a, _ in new_t.values()))
    old_seeds = sorted({int(s) for _, s in old_t.values()})
    new_seeds = sorted({int(s) for _, s in new_t.values()})
    old_by = {(a, int(s)): k for k, (a, s) in old_t.items()}
    new_by = {(a, int(s)): k for k, (a, s) in new_t.items()}
    changed = []
    for (arm, seed), key in new_by.items():
        if (arm, seed) in old_by and old_by[(arm, seed)] != key:
            what = _explain_overrides(frozen.get("arms", {}).get(arm, {}), new.get("arms", {}).get(arm, {}))
            changed.append((arm, seed, what))
    return DesignDiff(
        added_arms=tuple(a for a in new_arms if a not in old_arms),
        removed_arms=tuple(a for a in old_arms if a not in new_arms),
        added_seeds=tuple(s for s in new_seeds if s not in old_seeds),
        removed_seeds=tuple(s for s in old_seeds if s not in new_seeds),
        changed=tuple(changed),
        added=added,
        removed=removed,
    )


def _explain_overrides(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    parts = []
    for k in list(dict.fromkeys([*old, *new])):
        if k not in new:
            parts.append(f"{k} {json.dumps(old[k])} -> (default)")
        elif k not in old:
            parts.append(f"{k} (default) -> {json.dumps(new[k])}")
        elif old[k] != new[k]:
            parts.append(f"{k} {json.dumps(old[k])} -> {json.dumps(new[k])}")
    if parts:
        return "; ".join(parts)
    return "same overrides, other resolved configuration (TrialConfig defaults changed: another ablate version?)"


class DesignChangedError(AblateError):
    """The study file plans another design than the one frozen in the store."""

    def __init__(self, message: str, diff: DesignDiff) -> None:
        super().__init__(message)
        self.diff = diff


__all__ = ["DesignChangedError", "DesignDiff", "design_record", "diff_designs", "jsonable"]
