"""One RL step: collect a scored batch, log what it says, update the policy, adapt the KL coefficient."""

from __future__ import annotations

import time

from ablate.models.batching import at
from ablate.models.decode_graph import capture_seconds
from ablate.train.batch import CollectStats, StepBatch, collect_batch, drop_solved
from ablate.train.guards import check_finite
from ablate.train.setup import TrialState
from ablate.train.stats import rollout_metrics
from ablate.train.update import ppo_update


def adapt_beta(state: TrialState, kl_ref: float, batch_size: int) -> None:
    """Adaptive KL controller (Ziegler et al. 2019): move ``beta`` towards ``kl.target`` by at most
    20% of ``batch_size / kl.horizon`` per step."""
    c = state.config.kl
    error = max(-0.2, min(0.2, kl_ref / c.target - 1.0))
    state.beta *= 1.0 + error * batch_size / c.horizon


def step_counters(state: TrialState, stats: CollectStats) -> dict[str, float]:
    """Add the step's sampling to the trial's counters; the ``data/*``, ``kl/beta`` and ``compute/*`` metrics."""
    state.tokens_so_far += int(stats.tokens)
    state.samples_so_far += int(stats.samples)
    return {
        "data/kept_groups_frac": stats.kept_groups_frac,
        "data/sample_rounds": stats.sample_rounds,
        "kl/beta": float(state.beta),
        "compute/tokens": float(state.tokens_so_far),
        "compute/samples": float(state.samples_so_far),
    }


def train_step(state: TrialState, step: int) -> tuple[dict[str, float], StepBatch]:
    """Run RL step ``step`` (1-based): collect and score a batch, update, adapt beta.

    Returns:
        The step's metrics (every ``reward/*``, ``response/*``, ``policy/*``, ``loss/*``, ``adv/*``,
        ``optim/*``, ``data/*``, ``compute/*`` metric and the step's ``perf/*`` times in seconds) and
        its batch.

    Raises:
        NonFiniteError: non-finite rewards, advantages, loss or gradient norm.
    """
    t0 = time.perf_counter()
    at(step, "collect")
    batch, stats = collect_batch(state, step)
    check_finite(batch.token_rewards, "rewards", step)
    t1 = time.perf_counter()
    metrics = rollout_metrics(batch)
    t2 = time.perf_counter()
    at(step, "update")
    metrics.update(ppo_update(state, batch, step))
    t3 = time.perf_counter()
    if state.config.kl.adaptive and "policy/kl_ref" in metrics:
        adapt_beta(state, metrics["policy/kl_ref"], batch.mask.shape[0])
    metrics.update(step_counters(state, stats))
    if state.config.algo.drop_solved_at is not None:
        metrics["data/solved_dropped"] = float(drop_solved(state, batch))
        metrics["data/pool_size"] = float(len(state.pool))
    metrics.update({
        "perf/rollout_s": t1 - t0,
        "perf/reward_s": t2 - t1,
        "perf/update_s": t3 - t2,
        "perf/rollout_tokens_per_s": batch.timing.tokens_per_second,
    })
    if state.config.rollout.cuda_graph:
        metrics["perf/graph_capture_s"] = capture_seconds(state.model)
    return metrics, batch
