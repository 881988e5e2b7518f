"""What can be wrong with a trial configuration: :class:`ConfigProblem`, :class:`TrialConfigError`, :class:`ConfigWarning`."""

from __future__ import annotations

from dataclasses import dataclass

from ablate.errors import ConfigError

__all__ = ["ConfigNote", "ConfigProblem", "ConfigWarning", "RuleViolations", "TrialConfigError"]


class ConfigWarning(UserWarning):
    """A legal configuration that is probably not what was meant (the message says why and the fix).

    Attributes:
        rule: the warning's name (a key of :data:`ablate.config.rules.WARNING_RULES`), which a study file
            lists under ``acknowledge:`` when it runs the combination on purpose; None for a warning
            raised without one.
    """

    def __init__(self, message: str, rule: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True)
class ConfigNote:
    """One warning of a trial configuration: the rule's name and the message (why, and the fix)."""

    rule: str
    message: str

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class ConfigProblem:
    """One problem of a trial configuration (a validation problem, not a task's problem).

    Attributes:
        path: the dotted path concerned (``"loss.clip_low"``, ``"reward.components[1]"``), or ``""``
            for a problem of the whole configuration.
        message: what is wrong and how to fix it.
        line: the line of the YAML file that set ``path``, when the configuration came from a file.
        rule: the problem comes from a rule between several keys (:class:`RuleViolations`), not from
            ``path``'s own value or name.
    """

    path: str
    message: str
    line: int | None = None
    rule: bool = False  # a cross-field rule (ablate.config.rules), not a problem of one key's value

    def __str__(self) -> str:
        where = self.path or "(configuration)"
        if self.line is not None:
            where += f" (line {self.line})"
        return f"{where}: {self.message}"


class TrialConfigError(ConfigError):
    """Every problem of a trial configuration at once.

    Attributes:
        problems: the individual :class:`ConfigProblem` s, in the order found.
        source: where the configuration came from (``"config file 'x.yaml'"``), or ``None``.
    """

    def __init__(self, problems: list[ConfigProblem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        n = len(self.problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{head}invalid trial configuration ({n} problem{'s' if n != 1 else ''}):\n{lines}")


class RuleViolations(ValueError):
    """Raised inside pydantic by the cross-field rules; carries every violated rule."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems
