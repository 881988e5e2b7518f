"""Name → implementation tables.

Every variant that a study can choose by name (a reward component, an advantage estimator, a loss
surrogate, an aggregation mode, a task, a model, a design) is registered in one :class:`Registry`
with a decorator, and looked up by name::

    from ablate.registry import Registry

    ESTIMATORS = Registry("advantage estimator")

    @ESTIMATORS.register("grpo")
    def grpo(...): ...

    ESTIMATORS.get("grpo")        # the function
    ESTIMATORS.get("grpoo")       # UnknownNameError: ... valid names: grpo, ... (did you mean 'grpo'?)

Registering a name twice raises, so a plugin cannot silently replace a built-in.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from ablate.errors import UnknownNameError

T = TypeVar("T")

#: Every registry created, by kind; ``ablate`` commands and tests iterate over it.
ALL_REGISTRIES: dict[str, Registry] = {}


def nearest(name: str, choices: list[str] | tuple[str, ...]) -> str | None:
    """The closest of ``choices`` to ``name`` (difflib ratio >= 0.5), or None."""
    found = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return found[0] if found else None


class Registry(Generic[T]):
    """A table from names to implementations of one kind.

    Args:
        kind: what the entries are, in words ("advantage estimator"); used in error messages.
    """

    def __init__(self, kind: str) -> None:
        if kind in ALL_REGISTRIES:
            raise ValueError(f"a registry of kind {kind!r} exists already")
        self.kind = kind
        self._entries: dict[str, T] = {}
        ALL_REGISTRIES[kind] = self

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T) -> T: ...

    def register(self, name: str, obj: T | None = None):
        """Register ``obj`` under ``name``; without ``obj``, return a decorator.

        Raises:
            ValueError: ``name`` is registered already (names are never silently replaced).
        """

        def add(value: T) -> T:
            if not isinstance(name, str) or not name:
                raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}")
            if name in self._entries:
                raise ValueError(
                    f"{self.kind} {name!r} is registered already; choose another name "
                    f"(registered: {', '.join(self.names())})"
                )
            self._entries[name] = value
            return value

        if obj is not None:
            return add(obj)
        return add

    def unregister(self, name: str) -> None:
        """Remove ``name`` (for tests that register temporary entries)."""
        self._entries.pop(name, None)

    def get(self, name: str) -> T:
        """The entry registered as ``name``.

        Raises:
            UnknownNameError: with the valid names and the nearest one.
        """
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise UnknownNameError(self.unknown_message(name)) from None

    def unknown_message(self, name: object) -> str:
        """The message for an unknown ``name``: valid names and a suggestion."""
        valid = self.names()
        msg = f"unknown {self.kind} {name!r}; valid names: {', '.join(valid) or '(none registered)'}"
        guess = nearest(str(name), valid)
        if guess is not None:
            msg += f" (did you mean {guess!r}?)"
        return msg

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._entries)

    def items(self) -> list[tuple[str, T]]:
        return list(self._entries.items())

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
