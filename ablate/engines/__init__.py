"""Trial engines other than ablate's own trainer, behind :mod:`ablate.engine`'s seam.

- :mod:`ablate.engines.trl_scoring`: the task's sequence rewards as TRL reward functions, and the rollout
  metrics ablate logs (``reward/*``, ``response/*``, ``compute/*``) read off what TRL generated;
- :mod:`ablate.engines.trl`: :class:`~ablate.engines.trl.TrlEngine`, TRL's ``GRPOTrainer`` given the trial's
  model, warm start, prompts, rewards and evaluation, resumable from its checkpoints;
- :mod:`ablate.engines.trl_ranks` and :mod:`ablate.engines.trl_rank`: ``engine.processes > 1``, one trial on N
  processes under torchrun (the worker's side, and each rank's).

The map from ablate's options to ``GRPOConfig`` and the options TRL cannot honour live in
:mod:`ablate.config.trl_map` (pure, so that validation refuses without TRL installed).
"""
