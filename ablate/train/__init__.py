"""The RL loop of one trial: the one place that calls tasks, models, rewards and the RL core.

``run_trial(config, log)`` trains one fully specified configuration and seed and returns a
:class:`TrialResult`::

    state = setup_trial(config)                      # task, policy (warm start), PRM, reference, critic, optimizer
    evaluate_trial(state, 0)                         # the start policy
    for step in 1..train.steps:
        metrics, batch = train_step(state, step)     # sample prompts ─► roll out G completions each ─► grade
                                                     # ─► token rewards [B, T] ─► advantages [B, T]
                                                     # ─► PPO epochs over minibatches (gradient accumulation inside)
        evaluate_trial(state, step)                  # every eval.every steps and at the last
        save_checkpoint(...)                         # every train.checkpoint_every steps

Modules, one job each:

* :mod:`~ablate.train.setup` -- :func:`setup_trial` builds the :class:`TrialState`;
* :mod:`~ablate.train.batch` -- :class:`StepBatch` and :func:`collect_batch` (rollout, grading,
  reference log-probs, dynamic sampling);
* :mod:`~ablate.train.scoring` -- token rewards, their parts and the step mask of one rollout;
* :mod:`~ablate.train.update` -- :func:`ppo_update`, the PPO update over epochs, minibatches and micro-batches;
* :mod:`~ablate.train.step` -- :func:`train_step`, one RL step;
* :mod:`~ablate.train.stats` -- the rollout metrics and the sample table;
* :mod:`~ablate.train.evaluate` -- :func:`evaluate_trial` and :func:`eval_problem_rows`;
* :mod:`~ablate.train.checkpoint` -- saving and resuming (``<workdir>/trainer.pt``);
* :mod:`~ablate.train.trial` -- :func:`run_trial`; :mod:`~ablate.train.loop` -- the loop and :class:`TrialResult`;
* :mod:`~ablate.train.population` -- packed trials: a population's members trained batched in one process;
* :mod:`~ablate.train.seeds`, :mod:`~ablate.train.guards` -- seeded generators, the NaN guard.

``log(metrics, step)`` is the only way a trial reports (it never imports mlflow); every metric name
is documented in ``docs/metrics.md`` (:data:`METRICS` here), and a test keeps the two in sync.

Reproducibility: every random draw of step ``s`` comes from generators seeded by ``(seed, s)``, so
the same config and seed give the same metrics on CPU, and a trial resumed from its checkpoint ends
with exactly the result of an uninterrupted one.

Run one trial from the command line with ``ablate train --set train.steps=20``.
"""

from __future__ import annotations

from ablate.metrics import METRICS, metrics_glossary_markdown
from ablate.train.batch import CollectStats, RolloutTiming, StepBatch, collect_batch
from ablate.train.checkpoint import CHECKPOINT_FILE
from ablate.train.evaluate import eval_problem_rows, evaluate_trial
from ablate.train.guards import NonFiniteError
from ablate.train.loop import LogFn, TrialResult
from ablate.train.seeds import derive_seed
from ablate.train.setup import Critic, TrialState, build_policy, build_task, setup_trial
from ablate.train.step import train_step
from ablate.train.trial import run_trial
from ablate.train.update import ppo_update

__all__ = [
    "CHECKPOINT_FILE",
    "METRICS",
    "CollectStats",
    "Critic",
    "LogFn",
    "NonFiniteError",
    "RolloutTiming",
    "StepBatch",
    "TrialResult",
    "TrialState",
    "build_policy",
    "build_task",
    "collect_batch",
    "derive_seed",
    "eval_problem_rows",
    "evaluate_trial",
    "metrics_glossary_markdown",
    "ppo_update",
    "run_trial",
    "setup_trial",
    "train_step",
]
