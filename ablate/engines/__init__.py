"""Trial engines: the seam every trial is trained through, and the engines that join it.

- :mod:`ablate.engines.base`: the seam (:class:`~ablate.engines.base.EngineJob` →
  :class:`~ablate.train.TrialResult`, :func:`~ablate.engines.base.engine_for`) and its registry
  :data:`~ablate.engines.base.ENGINES`, which knows no engine by import: each engine's module registers it;
- :mod:`ablate.engines.native`: ``engine.name: ablate``, this package's own trainer (:func:`ablate.train.run_trial`);
- :mod:`ablate.engines.trl`: ``engine.name: trl``, :class:`~ablate.engines.trl.TrlEngine`, TRL's ``GRPOTrainer``
  given the trial's model, warm start, prompts, rewards and evaluation, resumable from its checkpoints;
- :mod:`ablate.engines.trl_map`: the map from ablate's options to ``GRPOConfig`` and the options TRL cannot
  honour (pure, so that validation refuses without TRL installed);
- :mod:`ablate.engines.trl_scoring`: the task's sequence rewards as TRL reward functions, and the rollout
  metrics ablate logs (``reward/*``, ``response/*``, ``compute/*``) read off what TRL generated;
- :mod:`ablate.engines.trl_ranks` and :mod:`ablate.engines.trl_rank`: ``engine.processes > 1``, one trial on N
  processes under torchrun (the worker's side, and each rank's).

Importing this package registers the built-in engines (as ``ablate.tasks`` registers the tasks); it imports
neither torch nor TRL, so validation may (:func:`ablate.registry.engine_registry`).
"""

from ablate.engines import native, trl  # noqa: F401  (registers the built-in engines)
