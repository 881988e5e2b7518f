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

The built-in registries are filled by importing their modules (:data:`BUILTIN_MODULES`), which
imports torch. That happens at the edge, where components are used (the CLI, the trainer), with
:func:`load_builtin_registries`; a configuration is validated against :data:`BUILTIN_NAMES` (the
built-in names of each kind, declared here without importing anything) plus whatever has been
registered so far (a study's plugins), so validating one never imports torch.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

from ablate.errors import UnknownNameError

T = TypeVar("T")

#: Every registry created, by kind; ``ablate`` commands and tests iterate over it.
ALL_REGISTRIES: dict[str, Registry] = {}

#: Modules whose import registers the built-in components (tasks, models, losses, estimators, rewards).
BUILTIN_MODULES: tuple[str, ...] = ("ablate.rl", "ablate.tasks", "ablate.models", "ablate.rewards")

#: The built-in names of every kind a configuration names, in registration order, declared without
#: importing their implementations (a test checks them against the loaded registries).
BUILTIN_NAMES: dict[str, tuple[str, ...]] = {
    "advantage estimator": ("grpo", "dr_grpo", "rloo", "grpo_process", "gae"),
    "kl estimator": ("k1", "k2", "k3"),
    "ratio level": ("token", "sequence", "sequence_token"),
    "policy loss surrogate": ("ppo", "cispo", "sapo"),
    "loss aggregation": (
        "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm", "prompt-mean",
        "balanced-mean",
    ),
    "task": ("addition", "chain", "countdown", "jsonl", "reasoning_gym"),
    "model": ("micro-llama", "tiny-llama", "small-llama", "base-llama", "tiny-gpt2", "tiny-qwen2", "small-gpt2",
              "small-qwen2", "smollm2-135m"),
    "reward component": ("final_answer", "prm", "kl", "format", "partial", "missing_eos", "soft_overlong"),
}

#: The positions (prompt plus completion tokens) of each built-in model, declared without importing
#: torch, so that validation can check ``rollout.max_new_tokens`` (a test checks them against the zoo).
BUILTIN_MODEL_POSITIONS: dict[str, int] = {
    "micro-llama": 256, "tiny-llama": 256, "small-llama": 512, "base-llama": 512, "tiny-gpt2": 256,
    "tiny-qwen2": 256, "small-gpt2": 512, "small-qwen2": 512, "smollm2-135m": 8192,
}

_builtins_loaded = False


def load_builtin_registries() -> None:
    """Import :data:`BUILTIN_MODULES` once, so that their registries are filled (imports torch).

    Called at the edge: the ``ablate`` command line before it runs a command, and whoever needs the
    real registries. A module that does not exist is skipped (only a :class:`ModuleNotFoundError`
    for that exact module; any other import error propagates).
    """
    global _builtins_loaded
    if _builtins_loaded:
        return
    for name in BUILTIN_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    _builtins_loaded = True


#: The module whose import registers the trial engines in the engine seam's registry (kind ``engine``,
#: :data:`ablate.engines.base.ENGINES`); it imports neither torch nor TRL, so validation may load it.
ENGINES_MODULE = "ablate.engines"


def engine_registry() -> Registry:
    """The trial engines by name (``engine.name``), importing :data:`ENGINES_MODULE` if none is registered
    yet: how the layers below the engines (the configuration's rules, its reference page) ask an engine what
    it refuses or says, without importing the engines."""
    if "engine" not in ALL_REGISTRIES:
        importlib.import_module(ENGINES_MODULE)
    return ALL_REGISTRIES["engine"]


def builtins_loaded() -> bool:
    """Whether :func:`load_builtin_registries` has run (the registries are then the whole truth)."""
    return _builtins_loaded


def registry_of(kind: str) -> Registry | None:
    """The registry of ``kind`` (e.g. ``"task"``) after loading the built-ins, or None if there is none.

    Loads the built-in registries (imports torch): for the edge, not for validation (see
    :func:`known_names`). A registry with no entries counts as none.
    """
    load_builtin_registries()
    reg = ALL_REGISTRIES.get(kind)
    return reg if reg is not None and len(reg) > 0 else None


def known_names(kind: str) -> list[str] | None:
    """The names a configuration may give for ``kind``, without importing any implementation.

    Once the built-ins are loaded, the registry's names; before, :data:`BUILTIN_NAMES` plus whatever
    has been registered so far (plugins). None when there are none (the name is then not checked).
    """
    reg = ALL_REGISTRIES.get(kind)
    registered = reg.names() if reg is not None else []
    if _builtins_loaded:
        return registered or None
    declared = list(BUILTIN_NAMES.get(kind, ()))
    names = declared + [n for n in registered if n not in declared]
    return names or None


def unknown_name_message(kind: str, name: object, valid: list[str]) -> str:
    """The message for an unknown ``name`` of ``kind``: the valid names and the nearest one."""
    msg = f"unknown {kind} {name!r}; valid names: {', '.join(valid) or '(none registered)'}"
    guess = nearest(str(name), valid)
    if guess is not None:
        msg += f" (did you mean {guess!r}?)"
    return msg


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
        return unknown_name_message(self.kind, name, self.names())

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
