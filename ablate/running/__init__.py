"""Running a study: from a validated study and a budget to every trial trained, logged and recorded.

- :mod:`ablate.running.runner`: ``ablate run`` (tune, plan, enqueue, rounds of workers, adaptive seeds);
- :mod:`ablate.running.pool`: the local pool of worker processes; :mod:`ablate.running.worker`: the worker loop;
- :mod:`ablate.running.session`: the run's settings and the opened session every attempt takes;
- :mod:`ablate.running.attempt`: one logged attempt of a trial, trained through the engine seam
  (:mod:`ablate.engines`);
- :mod:`ablate.running.preflight`: the refusals before anything is written; :mod:`ablate.running.footprint`: a
  study's peak disk use and the ``--pack auto`` size;
- :mod:`ablate.running.tuner`: per-arm Optuna search; :mod:`ablate.running.progress`: the progress display;
  :mod:`ablate.running.memory`: a worker keeps freed memory mapped.

Named ``running``, not ``run``: a subpackage becomes an attribute of :mod:`ablate` once imported, and
``ablate.run`` is the Python API's function (:func:`ablate.api.run`).
"""
