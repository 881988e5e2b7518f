"""Errors a user can cause.

Every error that comes from user input (a bad YAML key, an unknown name, an impossible combination
of options) is an :class:`AblateError`. The CLI prints its message alone, without a traceback, and
exits with code 2. The message should name the file (when there is one), the key, and the fix.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import TextIO


class AblateError(Exception):
    """A user-facing error: printed without a traceback, exit code 2."""

    exit_code = 2


class UnknownNameError(AblateError, KeyError):
    """A name that is not registered; the message lists the valid names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ConfigError(AblateError, ValueError):
    """An invalid configuration value or combination."""


class OutageError(AblateError):
    """A server or file a study needs (the study store, the tracking server) did not answer within
    the time allowed: printed in one line like any AblateError, but exit code 1 (not bad input)."""

    exit_code = 1


class UnloggedObjectiveError(AblateError):
    """None of a study's finished trials logged its objective's metric: the report was written (it says so,
    at ``index``), but compares nothing. Exit code 1: the study file is valid, its objective names a metric
    these trials do not log (one that only an option they lack logs)."""

    exit_code = 1

    def __init__(self, message: str, index: Path) -> None:
        super().__init__(message)
        self.index = index


class StudyIdentityError(AblateError):
    """A study file takes the name of another study whose store or MLflow experiment exists."""


def identity_message(name: str, where: str, other_file: str, this_file: str) -> str:
    """The one message for a study that takes the name of another: both files and the fix."""
    return (f"study {name!r}: {where} belongs to another study of the same name ({other_file}), and {this_file} "
            "differs from it in its base, factors or design (or, with tune:, its objective). Give this study its "
            "own 'name:', or run it against another store and experiment (--runs DIR or --storage URL, and "
            "--tracking-uri URI); nothing was run or written")


#: What a one-line warning of this process starts with (:func:`say_warnings_in_one_line`).
_WARNING_PREFIX = ["ablate"]


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    """``warnings.showwarning`` for ablate's own categories: one line; others in Python's format."""
    text = (f"{_WARNING_PREFIX[0]}: warning: {message}\n" if category.__module__.split(".")[0] == "ablate" else
            warnings.formatwarning(message, category, filename, lineno, line))
    try:
        (file if file is not None else sys.stderr).write(text)
    except OSError:  # a closed stderr: a warning never fails a command (as Python's own does)
        pass


def say_warnings_in_one_line(prefix: str) -> None:
    """Show this process's warnings of ablate's own categories (a torn journal tail, a corrupt checkpoint
    moved aside) as one line, ``<prefix>: warning: <message>``, instead of Python's two (the file and line
    that warned, then its source line); other libraries' warnings keep Python's format."""
    _WARNING_PREFIX[0] = prefix
    warnings.showwarning = _show_warning
