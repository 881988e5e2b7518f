"""The reward options table: ``reward.components`` of a trial config as ``name → (weight, options)``.

It sits beside the components it configures (:mod:`ablate.rewards.components`): a new built-in
component with options adds its row here, next to its implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.config import TrialConfig

#: ``(weight, options)`` of one component, the value type of :func:`compute_token_rewards`'s mapping.
ComponentSpec = tuple[float, dict[str, Any]]


def _builtin_components(config: TrialConfig) -> dict[str, ComponentSpec]:
    """Weight and options of every built-in component, read from the ``reward``, ``kl`` and ``rollout`` sections."""
    r = config.reward
    return {
        "final_answer": (r.final_answer.weight, {}),
        "prm": (
            r.prm.weight,
            {
                "source": r.prm.source,
                "flip_prob": r.prm.flip_prob,
                "correct": r.prm.correct_reward,
                "incorrect": r.prm.incorrect_reward,
                "normalize": r.prm.normalize,
            },
        ),
        "kl": (1.0, {"beta": config.kl.beta, "estimator": config.kl_estimator}),
        "format": (r.format.weight, {"mode": r.format.mode}),
        "partial": (r.partial.weight, {}),
        "missing_eos": (r.missing_eos.weight, {}),
        "soft_overlong": (
            r.soft_overlong.weight,
            {"max_len": config.rollout.max_new_tokens, "cache": r.soft_overlong.buffer},
        ),
    }


def reward_components(config: TrialConfig) -> dict[str, ComponentSpec]:
    """``reward.components`` as ``name → (weight, options)`` for :func:`compute_token_rewards`, in order.

    A plugin component has no config section: weight 1, no options. The ``kl`` component's ``beta``
    is the configured start value; a trainer with an adaptive coefficient overrides it per step.
    """
    table = _builtin_components(config)
    return {name: table.get(name, (1.0, {})) for name in config.reward.components}
