"""A timing model of trials: how long a trial takes, from its configuration and measured constants.

``ablate show`` prints each budget's estimated time with it. The constants are *measured*, per zoo
model, by ``python benchmarks/calibrate_timing.py`` (which runs short real trials and fits them) and
stored in ``ablate/study/timing.json`` with the machine they were measured on. A model without constants
(a local checkpoint, a plugin model) has no estimate: :func:`estimate_trial_seconds` returns None
and ``ablate show`` says so rather than guess.

The model, per trial (one worker, one CPU thread, warm start and learned PRM already cached)::

    seconds = setup
            + steps x [ rollout(N, L) x resample + epochs x update(N, T) x critic + reward(N) ]
            + evals x rollout(E, L) x pass_k
    rollout(n, L) = L x (decode_a + decode_b x n)        # L decode steps of a batch of n sequences
    update(n, T)  = update_a + update_b x n x T          # forward + backward over n sequences of T tokens

with N = prompts_per_step x group_size completions of at most L = max_new_tokens tokens, T = L plus
the calibration task's prompt length, E = eval.n_problems, evals = steps / eval.every + 1 (and the
start), resample = 1.5 with dynamic sampling, critic = the measured critic factor with a critic. It
counts every completion at its full length L: completions that stop early make a trial faster, so
the estimate leans high.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ablate.config import TrialConfig
    from ablate.study import TrialSpec
from typing import Any

#: Where the measured constants live (written by benchmarks/calibrate_timing.py).
TIMING_FILE = Path(__file__).with_name("timing.json")
#: Rollout time multiplier with algo.dynamic_sampling (extra sampling rounds; the measured mean is
#: workload-dependent, this is a round figure between 1 and 1 + max_resample_rounds).
DYNAMIC_SAMPLING_FACTOR = 1.5
#: Each trial's slowdown when two workers share two cores, measured on the studies of studies/ (the
#: median ratio of measured to estimated trial time with --workers 2 was 1.12-1.17 on 56 trials).
SHARED_CORES_SLOWDOWN = 1.15


def parallel_seconds(seconds: float, workers: int) -> float:
    """Wall time of ``seconds`` of one-worker trials spread over ``workers`` workers, one core each."""
    return seconds / workers * (SHARED_CORES_SLOWDOWN if workers > 1 else 1.0)


@dataclass(frozen=True)
class ModelCosts:
    """Measured costs of one model (seconds, one CPU thread).

    Attributes:
        decode_a: per decode step, fixed part (kernel launches, Python).
        decode_b: per decode step and sequence in the batch.
        update_a: per pass over a step's rollouts, fixed part.
        update_b: per pass, per completion token (forward + backward + optimizer).
        reward_b: per completion, grading and advantages.
        setup: per trial: building the model and the task, loading the cached warm start.
        prompt_tokens: mean prompt length of the calibration task (added to L in T).
        critic_factor: update time with a critic over without (measured on one model, applied to all).
    """

    decode_a: float
    decode_b: float
    update_a: float
    update_b: float
    reward_b: float
    setup: float
    prompt_tokens: float
    critic_factor: float

    def rollout(self, n: int, length: int) -> float:
        """Seconds to sample ``n`` sequences of ``length`` new tokens."""
        return length * (self.decode_a + self.decode_b * n)

    def update(self, n: int, tokens: float) -> float:
        """Seconds of one pass of the update over ``n`` sequences of ``tokens`` tokens."""
        return self.update_a + self.update_b * n * tokens


@lru_cache(maxsize=4)
def load_timing(path: str | None = None) -> tuple[dict[str, ModelCosts], dict[str, Any]]:
    """The measured constants per model name, and the calibration's metadata (machine, date ...).
    Empty when the file is missing or unreadable (no estimates then)."""
    file = Path(path) if path is not None else TIMING_FILE
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        models = {name: ModelCosts(**c) for name, c in data["models"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}, {}
    return models, dict(data.get("meta", {}))


def estimate_config_seconds(config: TrialConfig, costs: dict[str, ModelCosts] | None = None) -> float | None:
    """Expected wall seconds of one trial of ``config`` (a TrialConfig) on one worker, or None when
    its model has no measured constants. See the module docstring for the model."""
    if costs is None:
        costs = load_timing()[0]
    c = costs.get(str(config.model.name))
    if c is None:
        return None
    r = config.rollout
    n = r.prompts_per_step * r.group_size
    length = r.max_new_tokens
    tokens = length + c.prompt_tokens
    steps = config.train.steps
    rollout = c.rollout(n, length) * (DYNAMIC_SAMPLING_FACTOR if config.algo.dynamic_sampling else 1.0)
    update = config.algo.ppo_epochs * c.update(n, tokens) * (c.critic_factor if config.critic.enabled else 1.0)
    per_step = rollout + update + c.reward_b * n
    every = config.eval.every
    evals = 1 + (math.ceil(steps / every) if every else 1)
    per_eval = c.rollout(config.eval.n_problems, length)
    if config.eval.pass_k > 1:
        per_eval += c.rollout(config.eval.n_problems * config.eval.pass_k, length)
    return c.setup + steps * per_step + evals * per_eval


def estimate_trial_seconds(spec: TrialSpec) -> float | None:
    """The expected wall time of one trial on one worker, in seconds, from the timing model of
    this module (measured constants per zoo model); None when its model has none."""
    return estimate_config_seconds(spec.config)


def estimate_study_seconds(specs: Sequence[TrialSpec]) -> float | None:
    """The sum of :func:`estimate_trial_seconds` over ``specs`` (one worker), or None if any is unknown."""
    total = 0.0
    for spec in specs:
        t = estimate_trial_seconds(spec)
        if t is None:
            return None
        total += t
    return total
