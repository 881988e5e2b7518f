"""Errors a user can cause.

Every error that comes from user input (a bad YAML key, an unknown name, an impossible combination
of options) is an :class:`AblateError`. The CLI prints its message alone, without a traceback, and
exits with code 2. The message should name the file (when there is one), the key, and the fix.
"""

from __future__ import annotations


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
